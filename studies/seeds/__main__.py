import sys

from studies.seeds.runner import cli

sys.exit(cli())
