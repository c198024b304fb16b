"""ICA speed: our Amari-rule ICA against scikit-learn's FastICA on the same synthetic mixture.

    python benchmarks/bench_ica.py [--n 30000] [--d 128] [--repeats 3] [--seed 0] [--threads N]

128 unit-variance Laplace sources, 30,000 samples, a Gaussian random mixing matrix. Both methods
start from the raw mixture (each does its own whitening), so the times are end to end. Runs
alternate (ours, FastICA, ours, ...) because the machine is shared; the best time of each and the
median of the paired ratios are printed. --threads caps BLAS threads for both (threadpoolctl).
Target: an Amari index <= 0.01 in no more time than FastICA (ratio <= 1).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from twotower_lib.analysis.ica import ICAConfig, PCAConfig, amari_index, fit_ica, fit_whitening


def mixture(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    sources = rng.laplace(size=(n, d)) / np.sqrt(2.0)               # (n, d) unit variance
    mixing = rng.standard_normal((d, d))                            # (d, d)
    return sources @ mixing.T, mixing


def ours(x: np.ndarray, mixing: np.ndarray) -> tuple[float, float, int]:
    t = time.perf_counter()
    white = fit_whitening(x, PCAConfig(d=x.shape[1]))
    result = fit_ica(white.transform(x), ICAConfig(progress=False))
    elapsed = time.perf_counter() - t
    total = result.unmixing @ (white.components / np.sqrt(white.eigenvalues)).T @ mixing
    return elapsed, amari_index(total), result.n_iter


def fastica(x: np.ndarray, mixing: np.ndarray, seed: int) -> tuple[float, float, int]:
    from sklearn.decomposition import FastICA

    t = time.perf_counter()
    model = FastICA(n_components=x.shape[1], whiten="unit-variance", random_state=seed, max_iter=1000).fit(x)
    elapsed = time.perf_counter() - t
    return elapsed, amari_index(model.components_ @ mixing), model.n_iter_


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=30000)
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="BLAS threads (default: library default)")
    args = parser.parse_args()
    from threadpoolctl import threadpool_limits

    x, mixing = mixture(args.n, args.d, args.seed)
    runs: dict[str, list[tuple[float, float, int]]] = {"amari-ica": [], "fastica": []}
    with threadpool_limits(args.threads):
        for r in range(args.repeats):
            runs["amari-ica"].append(ours(x, mixing))
            runs["fastica"].append(fastica(x, mixing, args.seed))
            for name in runs:
                t, a, it = runs[name][-1]
                print(f"repeat {r}: {name:9s} {t:6.2f} s  Amari index {a:.4f}  iterations {it}", flush=True)
    best = {name: min(v) for name, v in runs.items()}
    ratio = best["amari-ica"][0] / best["fastica"][0]
    paired = float(np.median([o[0] / f[0] for o, f in zip(runs["amari-ica"], runs["fastica"])]))
    ok = max(a for _, a, _ in runs["amari-ica"]) <= 0.01 and ratio <= 1.0
    print(f"best: amari-ica {best['amari-ica'][0]:.2f} s (Amari {best['amari-ica'][1]:.4f}), "
          f"fastica {best['fastica'][0]:.2f} s (Amari {best['fastica'][1]:.4f})")
    print(f"ratio amari-ica / fastica = {ratio:.2f} (best times), {paired:.2f} (median of paired repeats)"
          f"  -> target (Amari <= 0.01, ratio <= 1) {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
