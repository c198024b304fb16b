"""When does the preference emerge? `study` trains seed pairs, probes their snapshots and writes
the cross-seed curves to `results/emergence/` (`python -m twotower_lib emergence`); `curves`
reads them back for the book's section 07."""
