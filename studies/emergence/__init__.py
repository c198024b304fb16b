"""When does the preference emerge? `study` trains seed pairs, probes their snapshots and writes the
cross-seed curves to `results/emergence/` (`python -m studies.emergence NAME | --all`); the book reads
them back through `twotower_lib.book.emergence_curves` (section 07)."""
