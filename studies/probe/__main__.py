"""The probe study's commands.

    python -m studies.probe book                  # rewrite results/probe/book.json from the committed measurements
    python -m studies.probe refine RUN [--iters 15 --ridge 0.03 --penalty logit] [probe options]
                                                  # probe RUN with its linear heads taken to the defined optimum
"""

import argparse
import sys

from twotower_lib.errors import UserError
from twotower_lib.probe.run import add_arguments as add_probe_arguments
from twotower_lib.probe.run import config_from_args, probe_run


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.probe", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("book", help="rewrite results/probe/book.json from the committed measurements")
    refine = commands.add_parser("refine", help="probe a run with the full-batch L-BFGS refinement of its linear heads")
    add_probe_arguments(refine)
    refine.add_argument("--iters", type=int, default=15, help="L-BFGS iterations after AdamW")
    refine.add_argument("--ridge", type=float, default=0.03, help="(ridge/2) x the penalty joins the mean cross-entropy")
    refine.add_argument("--penalty", default="logit", help="'logit' (the logits' variance) or 'readout' (|B|²)")
    args = parser.parse_args(argv)
    if args.command == "book":
        from studies.probe.report import write_book

        print(f"book parts -> {write_book()}")
        return 0
    from studies.probe.optimum import RefineConfig, Refinement

    cfg = config_from_args(args)
    if cfg.head != "linear":
        raise UserError(f"the refinement is for the linear head (a convex objective); --head is {cfg.head!r}")
    RefineConfig(max_iter=args.iters, ridge=args.ridge, penalty=args.penalty).validate()
    if args.all_snapshots:
        raise UserError("refine probes one run or snapshot at a time (leave --all-snapshots out)")
    probe_run(args.run_dir, cfg, snapshot=args.snapshot, data_dir=args.data, out=args.out, force=args.force,
              refine=Refinement(args.iters, args.ridge, args.penalty))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except UserError as e:
        sys.exit(f"error: {e}")
