"""When does the preference emerge? `study` trains seed pairs, probes their snapshots and writes the
cross-seed curves to `results/emergence/` (`python -m studies.emergence NAME | --all`); `report` reads them
and writes what section 07 and the decisions page show (`python -m studies.emergence book`)."""
