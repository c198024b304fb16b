"""When does the preference emerge? Cross-seed correlation against tokens seen.

Runs of one configuration that differ only in the seed save weight snapshots along training
(0, 2^16, 2^17, ... tokens). Probing two of them at every common snapshot and correlating their
preference scores over the top-N frequent tokens gives r(tokens), with the document-bootstrap 95%
CI, the permutation p-value and the correlation with log-frequency partialled out. The bootstrap
holds the trained models fixed, so it says nothing about how much r changes with the seeds; a
configuration with more than two seeds gets one curve per pair of seeds, and their spread
(`seed_spread`) is that seed-to-seed variation. The point at 0
tokens is the untrained-towers control (heads trained on randomly initialised, frozen towers).

A snapshot at t tokens of a run with budget T > t is not the end of a run with budget t: it took
its steps at a higher learning rate, and its rate has not decayed yet. With the few hundred steps
of a CPU run that can put it ahead, not behind: GPT's snapshot at 1M tokens of a 4M run had a lower
validation loss (5.69) than four runs that ended at 1M (5.87-5.91). Only each curve's last point is
the end of a run.

A study is a list of named configurations (`STUDY`): a tower family, a size preset, a
vocabulary size, a token budget and two or more seeds. `python -m studies.emergence NAME ...` trains
what is missing (resuming), probes every snapshot (up-to-date probes are reused) and writes
`results/emergence/<NAME>.parquet` with a provenance manifest beside it; the book's emergence
section reads those files, so it shows hours of CPU time without recomputing them.
"""

from __future__ import annotations

import argparse
import itertools
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from twotower_lib.artifacts import atomic_write_bytes, atomic_write_json, provenance, read_json
from studies.emergence.report import CURVE_COLUMNS, RESULTS_DIR  # the format the report reads
from twotower_lib.data.config import data_home
from twotower_lib.errors import UserError
from twotower_lib.run_names import seed_pair_name


@dataclass(frozen=True)
class StudyConfig:
    """One line of the study: same-configuration runs (two or more seeds) trained with snapshots along the way."""

    name: str
    model_type: str               # "elmo" | "gpt" | "bert"
    preset: str                   # a CPU preset of models.config (width, depth)
    vocab_size: int = 8192
    train_tokens: int = 8_000_000
    seeds: tuple[int, ...] = (1, 2)
    micro_batch: int = 32
    seq_len: int = 128
    lr: float | None = None            # peak learning rate (None: the DeepSpeed config's, DEFAULT_LR)
    final_lr_fraction: float = 0.0     # where the linear decay ends, as a fraction of the peak

    def __post_init__(self):
        if len(set(self.seeds)) < 2 or len(set(self.seeds)) != len(self.seeds):
            raise UserError(f"study configuration {self.name!r}: seeds {self.seeds} must be at least two different "
                            "seeds, each listed once")

    def pairs(self) -> list[tuple[int, int]]:
        """Every pair of seeds: 2 seeds give one curve, 4 give six (not independent: each run is in three)."""
        return list(itertools.combinations(self.seeds, 2))


# The study run for the book (`python -m studies.emergence --all`). Each configuration asks one
# question (its comment); what it answered is on the decisions page (book/decisions.md, computed from
# results/emergence/) and in section 07.
STUDY: dict[str, StudyConfig] = {c.name: c for c in (
    # BERT, the fastest family on a CPU, at the default's Bert-large size, to cpu-long's 12M tokens
    StudyConfig("bert-cpu-v8192", "bert", "cpu", train_tokens=12_000_000),
    # four seeds (six pairs) at the cheapest size: how much r moves between seed pairs
    StudyConfig("bert-cpu-small-v8192", "bert", "cpu-small", train_tokens=4_000_000, seeds=(1, 2, 3, 4)),
    # the same size trained four times longer: does the rising curve go on rising, and cross 0.6?
    StudyConfig("bert-cpu-small-v8192-16M", "bert", "cpu-small", train_tokens=16_000_000),
    # ... and with two other seeds: is its crossing of 0.6 seed-robust?
    StudyConfig("bert-cpu-small-v8192-16M-s3s4", "bert", "cpu-small", train_tokens=16_000_000, seeds=(3, 4)),
    # one thing changed at a time from the default's Bert-large size: width, depth, vocabulary
    StudyConfig("bert-cpu-wide-v8192", "bert", "cpu-wide", train_tokens=4_000_000),
    StudyConfig("bert-cpu-deep-v8192", "bert", "cpu-deep", train_tokens=4_000_000),
    StudyConfig("bert-cpu-v4096", "bert", "cpu", vocab_size=4096, train_tokens=4_000_000),
    # GPT at the default size, past where the profiles stop
    StudyConfig("gpt-cpu-v8192", "gpt", "cpu", train_tokens=4_000_000),
    # GPT at the default profile's GPT budget, four seeds (six pairs): is its early r seed-robust?
    StudyConfig("gpt-cpu-v8192-1M", "gpt", "cpu", train_tokens=1_000_000, seeds=(1, 2, 3, 4)),
    # GPT at the cpu-long profile's GPT budget: does a run that ends at 2M reach 0.6?
    StudyConfig("gpt-cpu-v8192-2M", "gpt", "cpu", train_tokens=2_000_000),
    # ... and with four seeds (six pairs), trained again (the pair above predates the content-hash
    # data identity, so its runs cannot be probed against today's prepared data)
    StudyConfig("gpt-cpu-v8192-2M-4seeds", "gpt", "cpu", train_tokens=2_000_000, seeds=(1, 2, 3, 4)),
    # The schedule at the default's 1M GPT tokens (a few hundred steps): the 4M run's snapshot at 1M, taken
    # before its rate decayed, had a lower validation loss than the 1M runs' ends. Does a 3x higher peak,
    # or no decay, raise the agreement?
    StudyConfig("gpt-cpu-v8192-1M-lr3e-3", "gpt", "cpu", train_tokens=1_000_000, seeds=(1, 2, 3, 4), lr=3e-3),
    StudyConfig("gpt-cpu-v8192-1M-const", "gpt", "cpu", train_tokens=1_000_000, seeds=(1, 2, 3, 4),
                final_lr_fraction=1.0),
    # BERT at the Bert-base size, 4M tokens with the peak rate held: the 16M pair's snapshot at 4M, still
    # near the peak, agreed more than the 4M runs that had decayed to 0. Is the decay what costs BERT?
    StudyConfig("bert-cpu-small-v8192-4M-const", "bert", "cpu-small", train_tokens=4_000_000, seeds=(1, 2, 3, 4),
                final_lr_fraction=1.0),
    # ... and at the default's Bert-large size and budget (2M), whose decayed pair agreed with the towers'
    # roles swapped: does the held rate settle the sign?
    StudyConfig("bert-cpu-v8192-2M-const", "bert", "cpu", train_tokens=2_000_000, seeds=(1, 2, 3, 4),
                final_lr_fraction=1.0),
    # ELMo (the BiLSTM towers) at the default size: the default trains one ELMo run and cpu-long one,
    # so neither says whether ELMo's seeds agree
    StudyConfig("elmo-cpu-v8192", "elmo", "cpu", train_tokens=2_000_000),
    StudyConfig("tiny-test", "gpt", "tiny", vocab_size=300, train_tokens=40_000, micro_batch=8, seq_len=32),
)}


def common_snapshots(run_a: Path, run_b: Path, min_tokens: int = 0,
                     max_tokens: int | None = None) -> list[tuple[int, str | None]]:
    """(tokens, snapshot name) present in both runs, plus the final weights (name None), in order.

    Snapshots before `min_tokens` (and after `max_tokens`) are skipped, except the untrained one at
    0 tokens (the control)."""
    from twotower_lib.models import list_snapshots

    a = {t: p.stem for t, p in list_snapshots(run_a)}
    b = {t: p.stem for t, p in list_snapshots(run_b)}
    points: list[tuple[int, str | None]] = [(t, a[t]) for t in sorted(set(a) & set(b)) if t == 0 or t >= min_tokens]
    finals = [read_json(r / "manifest.json")["tokens_seen"] for r in (run_a, run_b)
              if (r / "manifest.json").exists()]
    if len(finals) == 2 and finals[0] == finals[1] and finals[0] not in {t for t, _ in points}:
        points.append((finals[0], None))
    if max_tokens is not None:
        points = [(t, name) for t, name in points if t <= max_tokens]
    if not points:
        raise UserError(f"runs {run_a} and {run_b} have no weight snapshot in common (and no finished final "
                        "weights at the same token count); train both with the same budget and batch")
    return points


def reuse_untrained_probe(run: Path, runs_dir: Path) -> bool:
    """Copy the probe of `run`'s untrained snapshot from another configuration's run with the same
    weights, if one exists; True if copied.

    Why: configurations that differ only in budget or schedule start from the same weights for the
    same seed and size, so their untrained-towers control is one probe (minutes of CPU each).
    `probe_run` still checks the copy's identity (weights hash, data hash, probe settings) and
    recomputes it if anything differs."""
    import shutil

    from twotower_lib.artifacts import atomic_directory, manifest_has, sha256_file
    from twotower_lib.models import snapshot_name, weights_path
    from twotower_lib.probe.run import probe_dir

    target = probe_dir(run, 0)
    weights = weights_path(run, 0)
    if (target / "manifest.json").exists() or not weights.exists():
        return False
    want = sha256_file(weights)
    for found in sorted(Path(runs_dir).glob(f"*/{run.name}/probes/{snapshot_name(0)}/manifest.json")):
        if found.parent != target and read_json(found).get("identity", {}).get("weights_sha256") == want:
            # copied whole under a temporary name, then renamed: a kill never leaves half a probe
            with atomic_directory(target, manifest_has("artifact_version"), "a probe") as tmp:
                shutil.copytree(found.parent, tmp, dirs_exist_ok=True)
            return True
    return False


def curve(run_a: str | Path, run_b: str | Path, *, top_n: int, n_boot: int = 200, probe_cfg=None,
          data_dir: str | Path | None = None, min_tokens: int = 0, max_tokens: int | None = None,
          config_name: str = "", pair: str = "", show: bool = True) -> pd.DataFrame:
    """r(tokens) of a same-configuration pair: probe both runs at each common snapshot and correlate.

    Probes land in each run's `probes/<snapshot>/` (final weights: `probe/`) and are reused when up
    to date, so an interrupted curve resumes where it stopped.
    """
    from twotower_lib.analysis.table2 import CorrelationConfig, pairwise_correlations
    from twotower_lib.analysis.uncertainty import text_ceiling
    from twotower_lib.data import load_prepared
    from twotower_lib.preference import load_artifact
    from twotower_lib.probe.run import ProbeConfig, probe_run

    run_a, run_b = Path(run_a), Path(run_b)
    probe_cfg = probe_cfg or ProbeConfig()
    rows, data = [], None
    for tokens, snap in common_snapshots(run_a, run_b, min_tokens, max_tokens):
        arts = [load_artifact(probe_run(r, probe_cfg, snapshot=snap, data_dir=data_dir, show=False)) for r in (run_a, run_b)]
        data = data or load_prepared(arts[0].manifest["data_path"])  # one data set for the whole curve
        tables = {"a": arts[0].table, "b": arts[1].table}
        doc_stats = {"a": arts[0].doc_stats, "b": arts[1].doc_stats}
        cfg = CorrelationConfig(n=top_n, n_boot=n_boot, n_permutations=1000, progress=False)
        main = pairwise_correlations(tables, data.counts, cfg, doc_stats=doc_stats).iloc[0]
        partial = pairwise_correlations(tables, data.counts, CorrelationConfig(n=top_n, n_boot=0, n_permutations=0),
                                        control=np.log(np.maximum(np.asarray(data.counts, dtype=float), 1.0))).iloc[0]
        mean_log = pairwise_correlations(tables, data.counts, CorrelationConfig(n=top_n, n_boot=0, n_permutations=0,
                                                                              score_col="score_logmean")).iloc[0]
        ceiling = text_ceiling(tables, doc_stats, data.counts, [("a", "b")], top_n).iloc[0]["ceiling"]
        vl = [a.manifest["val_loss"] for a in arts]
        rows.append({"config": config_name, "pair": pair, "tokens": int(tokens), "r": main["r"], "ci_low": main["ci_low"],
                     "ci_high": main["ci_high"], "p_value": main["p_value"], "r_partial_logfreq": partial["r"],
                     "n_tokens": int(main["n_tokens"]),
                     "val_loss_a": vl[0]["cooperative"], "val_loss_b": vl[1]["cooperative"],
                     "head_loss_a": float(np.mean([v for k, v in vl[0].items() if k != "cooperative"])),
                     "head_loss_b": float(np.mean([v for k, v in vl[1].items() if k != "cooperative"])),
                     # Eq. 3's ordering: relative gap of the towers' mean p, and which tower won it
                     **{f"margin_{x}": a.manifest["ordering"]["margin"] / max(a.manifest["ordering"]["mean_p"])
                        for x, a in zip("ab", arts)},
                     **{f"primary_{x}": a.manifest["ordering"]["primary_tower"] for x, a in zip("ab", arts)},
                     # the same correlation with towers taken by physical index (tower 0 minus tower 1 in
                     # both runs), not by Eq. 3: r_physical = r when both runs call the same index primary
                     "r_physical": main["r"] * (1 if arts[0].manifest["ordering"]["primary_tower"]
                                                == arts[1].manifest["ordering"]["primary_tower"] else -1),
                     # what finite validation text allows: r cannot exceed it even for identical preferences
                     "ceiling": ceiling,
                     "r_mean_log": mean_log["r"]})  # the authors' score variant (mean of log p), no interval
        if show:
            r = rows[-1]
            print(f"{config_name or run_a.parent.name} {pair}: {tokens:>11,} tokens  r = {r['r']:+.3f} "
                  f"[{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]  partial {r['r_partial_logfreq']:+.3f}  "
                  f"val loss {r['val_loss_a']:.2f}/{r['val_loss_b']:.2f}", flush=True)
    return pd.DataFrame(rows, columns=CURVE_COLUMNS)


def run_study(cfg: StudyConfig, runs_dir: str | Path, results_dir: str | Path = RESULTS_DIR, *, top_n: int = 1000,
              n_boot: int = 200, probe_cfg=None, min_tokens: int = 0, data_dir: str | Path | None = None,
              threads_per_run: int = 1, show: bool = True) -> Path:
    """Prepare the data (or use `data_dir`), train every seed (resuming), probe every snapshot, write one
    curve per pair of seeds into one file; return its path."""
    from twotower_lib.data import DataConfig, load_prepared
    from twotower_lib.data.prepare import prepare_data
    from twotower_lib.book.profiles import get_profile
    from twotower_lib.probe.config import PROBE_VERSION
    from twotower_lib.train.loop import TrainConfig, train_job
    from twotower_lib.workers import run_jobs

    t0 = time.time()
    default = get_profile("cpu")
    data_cfg = DataConfig(corpus="registry:brown" if cfg.preset == "tiny" else default.data.corpus,
                          vocab_size=cfg.vocab_size, seq_len=cfg.seq_len, seed=default.data.seed,
                          valid_fraction=default.data.valid_fraction, doc_words=default.data.doc_words)
    data_dir = Path(data_dir) if data_dir else prepare_data(data_cfg, verbose=show)
    data = load_prepared(data_dir)
    if data.vocab_size != cfg.vocab_size or data.seq_len != cfg.seq_len:
        raise UserError(f"--data {data_dir} has vocabulary {data.vocab_size} and blocks of {data.seq_len}, but "
                        f"configuration {cfg.name} needs {cfg.vocab_size} and {cfg.seq_len}")
    probe_cfg = probe_cfg or default.probe_config()
    pair_dir = Path(runs_dir) / cfg.name
    runs, jobs = {}, []
    for seed in cfg.seeds:
        out = pair_dir / f"{cfg.model_type}-s{seed}"
        tcfg = TrainConfig.for_tokens(cfg.model_type, cfg.preset, seed, cfg.train_tokens, cfg.micro_batch, cfg.seq_len,
                                      precision="fp32", lr=cfg.lr, final_lr_fraction=cfg.final_lr_fraction,
                                      data=str(data_dir))
        done = (out / "manifest.json").exists() and read_json(out / "manifest.json")["steps"] >= tcfg.max_steps
        if not done:
            jobs.append({"tcfg": tcfg, "data_path": str(data_dir), "out": str(out)})
        runs[seed] = out
    # the seeds train side by side, `threads_per_run` threads each (0: one after the other on every core)
    run_jobs(train_job, jobs, threads_per_run, f"training {cfg.name}", label=lambda j: Path(j["out"]).name)
    for run in runs.values():
        reuse_untrained_probe(run, Path(runs_dir))
    # probes are per run and reused, so every pair after the first costs only its correlations
    table = pd.concat([curve(runs[a], runs[b], top_n=top_n, n_boot=n_boot, probe_cfg=probe_cfg, data_dir=data_dir,
                             min_tokens=min_tokens, config_name=cfg.name, pair=seed_pair_name(a, b), show=show)
                       for a, b in cfg.pairs()], ignore_index=True)
    results_dir = Path(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{cfg.name}.parquet"
    atomic_write_bytes(path, table.to_parquet(index=False))
    data_name = portable_path(data_dir, data_home(), "$TWOTOWER_DATA")
    atomic_write_json(results_dir / f"{cfg.name}.json", {  # committed: no path of this machine in it
        "config": asdict(cfg), "top_n": top_n, "n_boot": n_boot, "probe_config": asdict(probe_cfg),
        "probe_version": PROBE_VERSION,
        "data": {"path": data_name, "data_hash": data.data_hash, "corpus": data_cfg.corpus},
        "runs": [portable_path(r, runs_dir, "") for r in runs.values()], "pairs": [seed_pair_name(a, b) for a, b in cfg.pairs()],
        "train_minutes": [round(read_json(r / "manifest.json")["wall_time_s"] / 60, 2) for r in runs.values()],
        "seconds_this_call": round(time.time() - t0, 1),
        "command": f"python -m studies.emergence {cfg.name} --top-n {top_n} --bootstrap {n_boot} --min-tokens "
                   f"{min_tokens}" + (f" --data {data_name}" if data_dir else ""),
        "provenance": provenance()})
    return path


def portable_path(path: str | Path, root: str | Path, label: str) -> str:
    """`path` as a committed file writes it: relative to `root` and prefixed by `label` (e.g.
    "$TWOTOWER_DATA/prepared/x"; "" keeps it relative), or only its name if it lies elsewhere."""
    path, root = Path(path).resolve(), Path(root).resolve()
    try:
        rel = path.relative_to(root).as_posix()
    except ValueError:
        return path.name
    return f"{label}/{rel}" if label else rel


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("configs", nargs="*", help=f"study configurations: {', '.join(STUDY)}; or `book`: rewrite the "
                                              "book's parts from the committed curves")
    p.add_argument("--all", action="store_true", help="every configuration of the study except tiny-test")
    p.add_argument("--runs", default=None, help="where the pairs are trained (default: $TWOTOWER_RUNS/emergence)")
    p.add_argument("--results", default=str(RESULTS_DIR), help="where the curves are written")
    p.add_argument("--top-n", type=int, default=1000)
    p.add_argument("--bootstrap", type=int, default=200)
    p.add_argument("--data", default=None, help="prepared-data directory (default: prepare the configuration's own)")
    p.add_argument("--threads-per-run", type=int, default=1,
                   help="CPU threads per training run, as many seeds side by side as the cores allow "
                        "(default 1; 0 = one run at a time on every core)")
    p.add_argument("--min-tokens", type=int, default=0,
                   help="skip snapshots before this many tokens (the untrained one at 0 is always kept)")


def main(args: argparse.Namespace) -> int:
    from twotower_lib.book.profiles import runs_root

    if args.configs == ["book"]:
        from studies.emergence.report import write_book

        print(f"book parts -> {write_book(Path(args.results))}")
        return 0
    names = [n for n in STUDY if n != "tiny-test"] if args.all else args.configs
    if not names:
        raise UserError(f"name at least one configuration (or --all): {', '.join(STUDY)}")
    unknown = [n for n in names if n not in STUDY]
    if unknown:
        raise UserError(f"unknown study configuration(s) {unknown}; choose among {', '.join(STUDY)}")
    if args.top_n < 2 or args.bootstrap < 0:
        raise UserError("--top-n must be at least 2 and --bootstrap non-negative")
    runs = Path(args.runs) if args.runs else runs_root() / "emergence"
    for name in names:
        path = run_study(STUDY[name], runs, args.results, top_n=args.top_n, n_boot=args.bootstrap,
                         min_tokens=args.min_tokens, data_dir=args.data, threads_per_run=args.threads_per_run)
        print(f"{name}: curve -> {path}")
    if Path(args.results).resolve() == RESULTS_DIR.resolve():
        from studies.emergence.report import write_book

        print(f"book parts -> {write_book()}")
    return 0
