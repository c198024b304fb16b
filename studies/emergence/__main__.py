import argparse
import sys

from twotower_lib.errors import UserError

from studies.emergence import study

parser = argparse.ArgumentParser(prog="python -m studies.emergence", description=study.__doc__.splitlines()[0])
study.add_arguments(parser)
try:
    sys.exit(study.main(parser.parse_args()))
except UserError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)
