"""Command line: `python -m twotower_lib data prepare | train | probe | run | book` (and `publish`); the studies have their own runners (`python -m studies.NAME`).

Thin: each subcommand lives in the module that does the work and exposes
`add_arguments(parser)` and `main(args) -> int`. Modules are imported only when their
subcommand runs, so `--help` is fast and a missing optional dependency only affects its command.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from twotower_lib.errors import UserError

# subcommand -> (module, help). `data` has its own sub-subcommands.
COMMANDS = {
    "train": ("twotower_lib.train.loop", "train a two-tower (or single-tower) language model with DeepSpeed"),
    "probe": ("twotower_lib.probe.run", "train per-tower probing heads and write the preference-score table"),
    "run": ("twotower_lib.book.pipeline", "run the book's sections (papermill) at a profile"),
    "book": ("twotower_lib.book.build", "build the jupyter-book from the executed sections"),
    "publish": ("twotower_lib.book.publish", "commit a finished profile run's scorecard and summaries to results/profiles/"),
}
DATA_COMMANDS = {
    "prepare": ("twotower_lib.data.prepare", "fetch/clean a corpus, train the tokenizer, write token blocks"),
}


def build_parser() -> tuple[argparse.ArgumentParser, dict]:
    parser = argparse.ArgumentParser(prog="python -m twotower_lib", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    handlers: dict = {}
    data = sub.add_parser("data", help="corpus preparation")
    data_sub = data.add_subparsers(dest="data_command", required=True, metavar="DATA_COMMAND")
    for name, (module_name, help_) in DATA_COMMANDS.items():
        p = data_sub.add_parser(name, help=help_, description=help_)
        handlers[("data", name)] = (module_name, p)
    for name, (module_name, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        handlers[(name,)] = (module_name, p)
    return parser, handlers


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # The deepspeed launcher adds --local_rank=N (before the subcommand); LOCAL_RANK is in the environment.
    argv = [a for a in argv if not a.startswith("--local_rank")]
    parser, handlers = build_parser()
    # Find which subcommand is asked for so that only its module is imported.
    key = None
    for k in handlers:
        if tuple(a for a in argv if not a.startswith("-"))[: len(k)] == k:
            key = k if key is None or len(k) > len(key) else key
    if key is not None:
        module_name, p = handlers[key]
        mod = importlib.import_module(module_name)  # only the asked command's module: a fast --help
        mod.add_arguments(p)
        p.set_defaults(_handler=mod.main)
    args = parser.parse_args(argv)
    if not hasattr(args, "_handler"):
        parser.print_help()
        return 2
    try:
        return int(args._handler(args) or 0)
    except KeyboardInterrupt:
        print("interrupted; completed work is kept and the next run resumes from it", file=sys.stderr)
        return 130
    except UserError as e:
        # A message meant for the user: show it without a traceback (TWOTOWER_DEBUG=1 shows it).
        if os.environ.get("TWOTOWER_DEBUG"):
            raise
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
