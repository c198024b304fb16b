"""PCA whitening (Eq. 5) and Amari's natural-gradient ICA (Eq. 6-7): the math of Section 5.3.

Section 5.3 of the paper: take the input embedding of every token occurrence in a corpus sample (so frequent words
weigh more), reduce it to d = 128 whitened dimensions, and unmix it with Amari's rule

    W <- W + lr * (I - E[g(y) y^T]) W,      y = W p,      W_0 = I            (Eq. 6)
    g(y) = sgn(y) * (1 - exp(-sqrt(2) |y|)) / 2                              (Eq. 7)

A word then belongs to component j's group when |y_j| > 2.5 (Figs. 5-7, Table 3: `word_groups`).

Paper ambiguities and how they are resolved here:
- Eq. 5 writes P = X V_d sqrt(S_d); ICA needs *whitened* input, P = X V_d S_d^(-1/2). We whiten. Eq. 5 also takes
  the SVD of the uncentred X^T X / n; ICA's model has zero-mean sources, so we centre X first (`PCAConfig.center`;
  False gives the literal uncentred reading).
- Eq. 6 writes `W_{i+1} = W_m + ...`; read as `W_{i+1} = W_i + ...` (Amari's rule).
- Eq. 7 reads `sgn(y)(1 - exp(-sqrt(2)|y|))/2` in one extraction and `... exp(-sqrt(2|y|)) ...` with unbalanced
  brackets in the other. We use the first: it is a smoothed sign, the score function of a Laplace-like source, and
  it is continuous at 0.
- "Until converge": we stop when the largest entry of I - E[g(y)y^T] is below `tol`.
- The output scale of ICA is arbitrary (the fixed point of Eq. 6 with this g has |y| about 3 times a unit-variance
  source), so the 2.5 threshold only means something on a fixed scale. We rescale every component to unit variance
  over the corpus sample and flip its sign so that its long tail is positive (`ICAConfig.standardize`); 2.5 then
  means 2.5 standard deviations, which matches the paper's "about 80% of values within [-1, 1]".
- A group holds both tails (|y_j| > 2.5), as the paper says ("larger than 2.5 or smaller than -2.5").
- "Five most typical words" of a group: the five members with the largest |y_j|.
- Which words Figs. 5-6 count is not stated (Fig. 5 shows the 500 most frequent): the word set is an input.

How the rule is driven (the paper's fixed lr = 0.01 needs ~10^4 full passes): the fixed point and objective are the
paper's; each step is an L-BFGS step (`memory` pairs) on the block-diagonal Hessian of the likelihood per component
pair (Picard, Ablin et al. 2018), backtracking on that likelihood; the block model alone (`memory=0`) stalls on the
heavy tails of frequency-weighted word vectors. `ICAConfig(newton=False)` is the plain natural gradient with an
adaptive step; adding `adaptive=False` is the paper's literal loop. All stop at the same W on planted sources
(tested). A corpus sample enters as distinct tokens weighted by their counts: the same estimate, far cheaper.
"""

from __future__ import annotations

import importlib.util
import math
import warnings
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
from tqdm import tqdm

from twotower_lib.paper import ICA_DIM, ICA_WIDTH
from twotower_lib.errors import UserError

SQRT2 = math.sqrt(2.0)
# Newton steps give way to the plain rule when the last STALL_STEPS steps lowered the loss by less
# than STALL_GAIN of its size (on real word vectors Newton steps alone can stall short of the optimum).
STALL_STEPS, STALL_GAIN = 20, 1e-5


# ---------------------------------------------------------------------- PCA whitening (Eq. 5)


@dataclass(frozen=True)
class PCAConfig:
    d: int = 128                # kept dimensions (the paper: 128)
    center: bool = True         # subtract the mean first (see module docstring)


@dataclass
class PCAWhitening:
    """x -> (x - mean) @ V_d @ S_d^(-1/2): d uncorrelated unit-variance coordinates."""

    mean: np.ndarray            # (D,)
    components: np.ndarray      # (D, d)  V_d, eigenvectors of the largest d eigenvalues
    eigenvalues: np.ndarray     # (d,)    S_d, descending
    explained: float            # share of the total variance the d components keep

    def transform(self, x: np.ndarray) -> np.ndarray:
        return ((np.asarray(x, dtype=np.float64) - self.mean) @ self.components) / np.sqrt(self.eigenvalues)


def fit_whitening(x: np.ndarray, config: PCAConfig = PCAConfig(), weights: np.ndarray | None = None) -> PCAWhitening:
    """Eigen-decompose the covariance of the rows of x (n, D) and keep the top d directions. `weights`: how many times
    each row occurs (a token's count in the corpus sample). The covariance is symmetric: Eq. 5's SVD is its `eigh`."""
    x = as_matrix(x, "word vectors")
    w = _check_weights(weights, len(x))
    dim = x.shape[1]
    if config.d < 1 or config.d > dim:
        raise UserError(f"PCA dimension d = {config.d} must be between 1 and the vector width {dim}; "
                        f"pass a smaller d (the paper uses 128 for wide embeddings)")
    if (w > 0).sum() <= config.d:
        raise UserError(f"PCA to d = {config.d} needs more than {config.d} distinct vectors, got {(w > 0).sum()}; "
                        f"use a larger corpus sample")
    mean, eigenvalues, vectors = _principal_axes(x, w, config.center)
    kept = eigenvalues[: config.d]
    if kept[-1] <= 1e-10 * max(kept[0], 1e-300):
        rank = int((eigenvalues > 1e-10 * max(eigenvalues[0], 1e-300)).sum())
        raise UserError(f"the word vectors span only {rank} dimensions, fewer than d = {config.d}; "
                        f"whitening would divide by zero. Pass d <= {rank}")
    # fix each eigenvector's sign (largest entry positive) so results do not depend on LAPACK
    vectors = vectors[:, : config.d]
    vectors = vectors * np.sign(vectors[np.abs(vectors).argmax(0), range(config.d)])
    return PCAWhitening(mean=mean, components=vectors, eigenvalues=kept,
                     explained=float(kept.sum() / eigenvalues.clip(min=0).sum()))


PAPER_DIM_SHARE = ICA_DIM / ICA_WIDTH  # the paper kept d = 128 of a 1,024-wide embedding (2 x 512)


def paper_dim(width: int) -> int:
    """d at the paper's share of the embedding width (1/8), at least 2."""
    return max(2, round(width * PAPER_DIM_SHARE))


def pca_spectrum(x: np.ndarray, weights: np.ndarray | None = None) -> pd.DataFrame:
    """Every principal direction of the rows of x (n, D), weighted: its variance, share, cumulative
    share and excess kurtosis (0 for a Gaussian). What a reader needs to choose d: ICA can only
    separate non-Gaussian directions, and whitening gives a low-variance direction as much weight
    as the first."""
    x = as_matrix(x, "word vectors")
    w = _check_weights(weights, len(x))
    mean, eigenvalues, vectors = _principal_axes(x, w, center=True)
    keep = eigenvalues > 1e-10 * max(eigenvalues[0], 1e-300)       # directions the vectors span
    p = (x - mean) @ vectors[:, keep]                                # (n, rank)
    v = w / w.sum()
    kurtosis = (v @ p ** 4) / (v @ p ** 2) ** 2 - 3
    share = eigenvalues[keep] / eigenvalues.clip(min=0).sum()
    return pd.DataFrame({"component": np.arange(1, keep.sum() + 1), "variance": eigenvalues[keep],
                         "share": share, "cumulative share": np.cumsum(share), "excess kurtosis": kurtosis})


def _principal_axes(x: np.ndarray, w: np.ndarray, center: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weighted mean (D,), covariance eigenvalues (D,) and eigenvectors (D, D), largest first."""
    mean = (w @ x) / w.sum() if center else np.zeros(x.shape[1])
    cov = np.zeros((x.shape[1], x.shape[1]))
    for start in range(0, len(x), 65536):                           # bounded memory for large samples
        chunk = x[start:start + 65536].astype(np.float64) - mean
        cov += (chunk * w[start:start + 65536, None]).T @ chunk
    eigenvalues, vectors = np.linalg.eigh(cov / w.sum())            # ascending
    return mean, eigenvalues[::-1], vectors[:, ::-1]


# ---------------------------------------------------------------------- Amari ICA (Eq. 6-7)


def g(y: np.ndarray) -> np.ndarray:
    """Eq. 7: sgn(y) (1 - exp(-sqrt(2)|y|)) / 2."""
    return np.sign(y) * (1.0 - np.exp(-SQRT2 * np.abs(y))) / 2.0


@dataclass(frozen=True)
class ICAConfig:
    lr: float = 0.01            # step of the plain rule (the paper: 0.01); Newton steps start at 1
    newton: bool = True         # precondition the natural gradient per component pair
    memory: int = 7             # L-BFGS pairs on top of that preconditioner (Picard's default; 0: the preconditioner alone)
    adaptive: bool = True       # adapt the step on the likelihood (False: the paper's fixed lr)
    tol: float = 1e-3           # stop when max |I - E[g(y) y^T]| < tol
    max_iter: int = 1000
    starts: int = 1             # W_0 = I (the paper), then seeded random rotations; the best likelihood is kept
    seed: int = 0               # of those rotations
    chunk: int = 4096           # samples per block when accumulating statistics (cache-sized)
    standardize: bool = True    # unit variance, positive long tail per component (see docstring)
    blas_threads: int | None = 1    # BLAS threads while fitting (None: library default), see fit_ica
    progress: bool = True


@dataclass
class ICAResult:
    unmixing: np.ndarray        # (d, d) W of Eq. 6, y = W p
    n_iter: int
    converged: bool
    gradient: float             # final max |I - E[g(y) y^T]|
    loss: list[float] = field(default_factory=list)   # negative log-likelihood per accepted step
    newton_steps: int = 0       # steps taken with the Newton preconditioner before the plain rule took over
    start: int = 0              # which start this is (0: W_0 = I)
    starts: list["ICAResult"] = field(default_factory=list)  # every start's fit, when there were several

    def stability(self) -> np.ndarray:
        """Per component of this fit (d,): the median over the other converged starts of its largest
        |correlation| with one of their components (1: every start found it). Components of a
        likelihood with several optima that only some starts reach are the ones to read with care."""
        others = [r for r in self.starts if r.converged and r.start != self.start]
        if not others:
            return np.full(len(self.unmixing), np.nan)
        unit = lambda w: w / np.linalg.norm(w, axis=1, keepdims=True)   # noqa: E731  rows: components on whitened p
        return np.median([np.abs(unit(self.unmixing) @ unit(r.unmixing).T).max(1) for r in others], axis=0)


def _statistics(w: np.ndarray, p: np.ndarray, v: np.ndarray, second_moment: np.ndarray, chunk: int,
                newton: bool):
    """One pass over p (d, n): loss, relative gradient E[g(y)y^T] - I, and the Hessian terms.

    v (n,): sample weights summing to 1 (float32); second_moment: E[p p^T], so that
    E[y y^T] = W E[p p^T] W^T needs no pass. Buffers are reused: no allocation per block.
    """
    d, n = p.shape
    gyy = np.zeros((d, d), dtype=np.float64)
    mean_abs = np.zeros(d)      # E|y_i|
    dpsi = np.zeros(d)          # E[exp(-sqrt2 |y_i|)]        (g'(y) = sqrt2/2 exp(-sqrt2 |y|))
    dpsi_y2 = np.zeros(d)       # E[exp(-sqrt2 |y_i|) y_i^2]
    buf_y, buf_a, buf_e = (np.empty((d, min(chunk, n)), dtype=np.float32) for _ in range(3))
    for start in range(0, n, chunk):
        c = min(chunk, n - start)
        y, a, e, vc = buf_y[:, :c], buf_a[:, :c], buf_e[:, :c], v[start:start + c]
        np.matmul(w, p[:, start:start + c], out=y)                  # (d, c)
        np.abs(y, out=a)
        mean_abs += a @ vc
        np.multiply(a, np.float32(-SQRT2), out=e)
        np.exp(e, out=e)                                            # exp(-sqrt2 |y|)
        dpsi += e @ vc
        if newton:
            np.multiply(e, y, out=a)
            np.multiply(a, y, out=a)
            dpsi_y2 += a @ vc
        np.multiply(e, np.float32(-0.5), out=e)
        np.add(e, np.float32(0.5), out=e)
        np.copysign(e, y, out=e)                                    # g(y), Eq. 7
        np.multiply(e, vc, out=e)
        gyy += e @ y.T
    loss = -np.linalg.slogdet(w.astype(np.float64))[1] + float((mean_abs / 2 - (1 - dpsi) / (2 * SQRT2)).sum())
    grad = gyy - np.eye(d)
    y2 = np.einsum("ij,jk,ik->i", w, second_moment, w)            # diag(W E[pp^T] W^T)
    hessian = (dpsi * SQRT2 / 2, y2, dpsi_y2 * SQRT2 / 2) if newton else None
    return loss, grad, hessian


def _newton_direction(grad: np.ndarray, hessian, floor: float = 1e-2) -> np.ndarray:
    """Solve the 2x2 block [[h_ij, 1], [1, h_ji]] per pair (i, j); h_ij = E[g'(y_i)] E[y_j^2].

    Blocks whose smallest eigenvalue is below `floor` are shifted up to it, so the direction
    always descends.
    """
    dpsi, y2, dpsi_y2 = hessian
    h = np.outer(dpsi, y2)                                          # (d, d)
    ht = h.T
    smallest = (h + ht - np.sqrt((h - ht) ** 2 + 4.0)) / 2.0
    shift = np.maximum(0.0, floor - smallest)
    h, ht = h + shift, ht + shift
    direction = (ht * grad - grad.T) / (h * ht - 1.0)
    np.fill_diagonal(direction, np.diag(grad) / np.maximum(dpsi_y2 + 1.0, floor))
    return direction


def _lbfgs_direction(grad: np.ndarray, hessian, memory: list) -> np.ndarray:
    """L-BFGS's two-loop recursion in the relative coordinates (W <- (I - step) W), with the block-diagonal
    Newton direction as the initial inverse Hessian (Picard, Ablin et al. 2018): the pairs (s, y) of the last
    steps correct the block model where the word vectors' heavy tails make it poor."""
    q, alphas = grad.copy(), []
    for s, y, rho in reversed(memory):
        a = rho * float(np.vdot(s, q))
        alphas.append(a)
        q -= a * y
    r = _newton_direction(q, hessian)
    for (s, y, rho), a in zip(memory, reversed(alphas)):
        r += s * (a - rho * float(np.vdot(y, r)))
    return r


def fit_ica(p: np.ndarray, config: ICAConfig = ICAConfig(), weights: np.ndarray | None = None) -> ICAResult:
    """Unmix whitened data p (n, d) with Amari's rule (Eq. 6) and Eq. 7's g; W starts at I.

    The likelihood has several optima on word vectors: on the default profile's Bert-large embedding
    (d = 32) twelve starts all met the tolerance, at losses 0.1 nats apart. With `config.starts` > 1
    the rule also runs from seeded random rotations and the converged fit of lowest loss is returned,
    every start's fit in its `starts` (`ICAResult.stability` says which components most starts find).
    Rows of p are samples; `weights` (n,) counts each row that many times. Computation is in
    float32 blocks, so `tol` much below 1e-5 is out of reach. Deterministic (the rotations are seeded).
    BLAS is held to `config.blas_threads` threads (via threadpoolctl, when installed): the many
    small products here are slower on several threads than on one, most of all on a busy machine.
    """
    if config.blas_threads is not None and importlib.util.find_spec("threadpoolctl") is not None:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(config.blas_threads):
            return _fit_ica(p, config, weights)
    return _fit_ica(p, config, weights)


def _fit_ica(p: np.ndarray, config: ICAConfig, weights: np.ndarray | None) -> ICAResult:
    """Every start (W_0 = I, then seeded random rotations); the one of lowest loss among those that
    converged (or among all, if none did), with every start's fit attached."""
    p = as_matrix(p, "whitened data")
    if config.starts < 1:
        raise UserError(f"ICAConfig.starts = {config.starts} must be at least 1")
    v = _check_weights(weights, len(p))
    v = (v / v.sum()).astype(np.float32)                            # (n,)
    pt = np.ascontiguousarray(p.T, dtype=np.float32)               # (d, n)
    second_moment = (pt * v) @ pt.T                                 # (d, d) E[p p^T]; I when whitened
    d, rng = p.shape[1], np.random.default_rng(config.seed)
    fits = []
    for k in range(config.starts):
        w0 = np.eye(d) if k == 0 else np.linalg.qr(rng.standard_normal((d, d)))[0]
        fit = _fit_from(w0, pt, v, second_moment, config, desc=f"ICA start {k + 1}/{config.starts}")
        fit.start = k
        fits.append(fit)
    pool = [r for r in fits if r.converged] or fits
    best = min(pool, key=lambda r: r.loss[-1])
    if len(fits) > 1:
        best = replace(best, starts=fits)                # a copy: no fit holds itself
    if not best.converged:
        warnings.warn(f"ICA stopped after {best.n_iter} steps without converging (max |I - E[g(y)y^T]| = "
                      f"{best.gradient:.2e} >= tol {config.tol:g}); raise max_iter or check for near-Gaussian "
                      "directions", stacklevel=3)
    return best


def _fit_from(w: np.ndarray, pt: np.ndarray, v: np.ndarray, second_moment: np.ndarray, config: ICAConfig,
              desc: str = "ICA") -> ICAResult:
    """One run of the rule from W_0 = w."""
    newton = config.newton
    stats = lambda w: _statistics(w.astype(np.float32), pt, v, second_moment, config.chunk, newton)  # noqa: E731
    lr = 1.0 if newton else config.lr                               # a Newton step is already scaled
    loss, grad, hess = stats(w)
    losses = [loss]
    converged, n_iter, newton_steps = False, 0, 0
    memory: list = []                                               # L-BFGS pairs (s, y, 1 / <s, y>)
    bar = tqdm(total=config.max_iter, desc=desc, disable=not config.progress, leave=False)
    while True:
        gmax = float(np.abs(grad).max())
        bar.set_postfix(grad=f"{gmax:.2e}", refresh=False)
        if gmax < config.tol:
            converged = True
            break
        if n_iter == config.max_iter:
            break
        if newton and len(losses) > STALL_STEPS and losses[-STALL_STEPS - 1] - loss < STALL_GAIN * abs(loss):
            # Newton steps stopped paying (heavy-tailed, frequency-weighted word vectors: the block-diagonal
            # Hessian is a poor model there): go on with the plain rule from here, which still descends.
            newton, lr = False, config.lr
            loss, grad, hess = stats(w)
        direction = _lbfgs_direction(grad, hess, memory) if newton else grad
        if newton and memory and float(np.vdot(direction, grad)) <= 0:   # not a descent direction: forget the pairs
            memory.clear()
            direction = _newton_direction(grad, hess)
        while True:
            w_new = w - lr * direction @ w
            new = stats(w_new)
            # accept unless the likelihood got worse beyond float32 rounding of the loss
            if not config.adaptive or new[0] <= loss + 1e-6 * abs(loss) or lr < 1e-8:
                break
            lr /= 2                                                 # reject: shorter step
        if not np.isfinite(new[0]):
            raise UserError(f"ICA diverged at step {n_iter + 1} (lr {lr:g}); use a smaller lr or adaptive=True")
        if newton and config.memory:
            step, change = -lr * direction, new[1] - grad               # s (the relative step taken) and y
            curvature = float(np.vdot(step, change))
            if curvature > 1e-12:
                memory.append((step, change, 1.0 / curvature))
                del memory[:-config.memory]
        w, (loss, grad, hess) = w_new, new
        losses.append(loss)
        n_iter += 1
        bar.update()
        newton_steps += newton
        if config.adaptive:
            lr = min(lr * 1.2, 1.0) if newton else lr * 1.1
    bar.close()
    return ICAResult(unmixing=w, n_iter=n_iter, converged=converged,
                     gradient=float(np.abs(grad).max()), loss=losses, newton_steps=newton_steps)


def amari_index(product: np.ndarray) -> float:
    """Amari et al. (1996) distance of W A from a scaled permutation, normalised to [0, 1]."""
    q = np.abs(np.asarray(product, dtype=np.float64))
    m = q.shape[0]
    if q.shape != (m, m) or m < 2:
        raise UserError(f"the Amari index needs a square matrix of size >= 2, got shape {q.shape}")
    rows = (q.sum(1) / q.max(1) - 1).sum()
    cols = (q.sum(0) / q.max(0) - 1).sum()
    return float((rows + cols) / (2 * m * (m - 1)))


# ---------------------------------------------------------------------- helpers


def as_matrix(x: np.ndarray, what: str) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 2 or 0 in x.shape:
        raise UserError(f"{what} must be a non-empty 2-D array, got shape {x.shape}")
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    if not np.isfinite(x).all():
        raise UserError(f"{what} contain NaN or infinite values; check the checkpoint they came from")
    return x


def _check_weights(weights: np.ndarray | None, n: int) -> np.ndarray:
    if weights is None:
        return np.ones(n)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n,) or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise UserError(f"weights must be {n} non-negative finite numbers with a positive sum, got shape {w.shape}")
    return w


