from studies.ladder.runner import cli

raise SystemExit(cli())
