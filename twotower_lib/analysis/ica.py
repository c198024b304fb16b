"""PCA whitening (Eq. 5) and Amari's natural-gradient ICA (Eq. 6-7) of word vectors; ICA word groups.

Section 5.3 of the paper: take the input embedding of every token occurrence in a corpus sample
(so frequent words weigh more), reduce it to d = 128 whitened dimensions, and unmix it with
Amari's rule

    W <- W + lr * (I - E[g(y) y^T]) W,      y = W p,      W_0 = I            (Eq. 6)
    g(y) = sgn(y) * (1 - exp(-sqrt(2) |y|)) / 2                              (Eq. 7)

A word then belongs to component j's group when |y_j| > 2.5 (Figs. 5-7, Table 3).

Paper ambiguities and how they are resolved here:
- Eq. 5 writes P = X V_d sqrt(S_d); ICA needs *whitened* input, P = X V_d S_d^(-1/2). We whiten.
  Eq. 5 also takes the SVD of the uncentred X^T X / n; ICA's model has zero-mean sources, so we
  centre X first (`PCAConfig.center`; False gives the literal uncentred reading).
- Eq. 6 writes `W_{i+1} = W_m + ...`; read as `W_{i+1} = W_i + ...` (Amari's rule).
- Eq. 7 reads `sgn(y)(1 - exp(-sqrt(2)|y|))/2` in one extraction and `... exp(-sqrt(2|y|)) ...` with
  unbalanced brackets in the other. We use the first: it is a smoothed sign, the score function of
  a Laplace-like source, and it is continuous at 0.
- "Until converge": we stop when the largest entry of I - E[g(y)y^T] is below `tol`.
- The output scale of ICA is arbitrary (the fixed point of Eq. 6 with this g has |y| about 3 times
  a unit-variance source), so the 2.5 threshold only means something on a fixed scale. We rescale
  every component to unit variance over the corpus sample and flip its sign so that its long tail
  is positive (`ICAConfig.standardize`); 2.5 then means 2.5 standard deviations, which matches the
  paper's "about 80% of values within [-1, 1]".
- A group holds both tails (|y_j| > 2.5), as the paper says ("larger than 2.5 or smaller than -2.5").
- "Five most typical words" of a group: the five members with the largest |y_j|.
- Which words Figs. 5-6 count is not stated (Fig. 5 shows the 500 most frequent); the functions
  take the word set as input, and `fig6_data` reports how many words it counted.

How the rule is driven (the paper's fixed lr = 0.01 needs ~10^4 full passes): the fixed point and
the objective are the paper's; by default each step is preconditioned per pair of components by
the block-diagonal Hessian approximation of the ICA likelihood (as in Picard, Ablin et al. 2018),
starts from the full step and backtracks on that likelihood. `ICAConfig(newton=False)` drives the
plain natural gradient with an adaptive step ("bold driver"); adding `adaptive=False` gives the
paper's literal loop with a fixed lr. All three stop at the same W (tested). Statistics are
computed in float32 blocks with reused buffers. Rows of one token are identical, so a corpus
sample enters as distinct tokens weighted by their counts: the same estimate, far cheaper.
"""

from __future__ import annotations

import importlib.util
import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from tqdm import tqdm

from twotower_lib.errors import UserError
from twotower_lib.preference import frequency_order

SQRT2 = math.sqrt(2.0)
# Newton steps give way to the plain rule when the last STALL_STEPS steps lowered the loss by less
# than STALL_GAIN of its size (on real word vectors they stalled 0.06 nats above the optimum).
STALL_STEPS, STALL_GAIN = 20, 1e-5


# ---------------------------------------------------------------------- PCA whitening (Eq. 5)


@dataclass(frozen=True)
class PCAConfig:
    d: int = 128                # kept dimensions (the paper: 128)
    center: bool = True         # subtract the mean first (see module docstring)


@dataclass
class Whitening:
    """x -> (x - mean) @ V_d @ S_d^(-1/2): d uncorrelated unit-variance coordinates."""

    mean: np.ndarray            # (D,)
    components: np.ndarray      # (D, d)  V_d, eigenvectors of the largest d eigenvalues
    eigenvalues: np.ndarray     # (d,)    S_d, descending
    explained: float            # share of the total variance the d components keep

    def transform(self, x: np.ndarray) -> np.ndarray:
        return ((np.asarray(x, dtype=np.float64) - self.mean) @ self.components) / np.sqrt(self.eigenvalues)


def fit_whitening(x: np.ndarray, config: PCAConfig = PCAConfig(), weights: np.ndarray | None = None) -> Whitening:
    """Eigen-decompose the covariance of the rows of x (n, D) and keep the top d directions.

    weights: how many times each row occurs (e.g. a token's count in the corpus sample); a row
    with weight k counts as k identical rows. The covariance is symmetric, so the SVD of Eq. 5 is
    its eigen-decomposition (`eigh`).
    """
    x = _as_matrix(x, "word vectors")
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
    return Whitening(mean=mean, components=vectors, eigenvalues=kept,
                     explained=float(kept.sum() / eigenvalues.clip(min=0).sum()))


PAPER_DIM_SHARE = 128 / 1024  # the paper kept d = 128 of a 1,024-wide embedding (2 x 512)


def paper_dim(width: int) -> int:
    """d at the paper's share of the embedding width (1/8), at least 2."""
    return max(2, round(width * PAPER_DIM_SHARE))


def pca_spectrum(x: np.ndarray, weights: np.ndarray | None = None) -> pd.DataFrame:
    """Every principal direction of the rows of x (n, D), weighted: its variance, share, cumulative
    share and excess kurtosis (0 for a Gaussian). What a reader needs to choose d: ICA can only
    separate non-Gaussian directions, and whitening gives a low-variance direction as much weight
    as the first."""
    x = _as_matrix(x, "word vectors")
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


def neg_log_density(y: np.ndarray) -> np.ndarray:
    """rho(y) with rho' = g: the source model whose likelihood Eq. 6 ascends (up to a constant)."""
    a = np.abs(y)
    return a / 2.0 - (1.0 - np.exp(-SQRT2 * a)) / (2.0 * SQRT2)


@dataclass(frozen=True)
class ICAConfig:
    lr: float = 0.01            # step of the plain rule (the paper: 0.01); Newton steps start at 1
    newton: bool = True         # precondition the natural gradient per component pair
    adaptive: bool = True       # adapt the step on the likelihood (False: the paper's fixed lr)
    tol: float = 1e-3           # stop when max |I - E[g(y) y^T]| < tol
    max_iter: int = 1000
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


def fit_ica(p: np.ndarray, config: ICAConfig = ICAConfig(), weights: np.ndarray | None = None) -> ICAResult:
    """Unmix whitened data p (n, d) with Amari's rule (Eq. 6) and Eq. 7's g; W starts at I.

    Rows of p are samples; `weights` (n,) counts each row that many times. Computation is in
    float32 blocks, so `tol` much below 1e-5 is out of reach. Deterministic (no randomness).
    BLAS is held to `config.blas_threads` threads (via threadpoolctl, when installed): the many
    small products here ran 2-10x slower with 2 threads than with 1 on a busy 2-core machine.
    """
    if config.blas_threads is not None and importlib.util.find_spec("threadpoolctl") is not None:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(config.blas_threads):
            return _fit_ica(p, config, weights)
    return _fit_ica(p, config, weights)


def _fit_ica(p: np.ndarray, config: ICAConfig, weights: np.ndarray | None) -> ICAResult:
    p = _as_matrix(p, "whitened data")
    v = _check_weights(weights, len(p))
    v = (v / v.sum()).astype(np.float32)                            # (n,)
    pt = np.ascontiguousarray(p.T, dtype=np.float32)               # (d, n)
    second_moment = (pt * v) @ pt.T                                 # (d, d) E[p p^T]; I when whitened
    newton = config.newton
    stats = lambda w: _statistics(w.astype(np.float32), pt, v, second_moment, config.chunk, newton)  # noqa: E731
    w = np.eye(p.shape[1])                                         # W_0 = I (the paper)
    lr = 1.0 if newton else config.lr                               # a Newton step is already scaled
    loss, grad, hess = stats(w)
    losses = [loss]
    converged, n_iter, newton_steps = False, 0, 0
    bar = tqdm(total=config.max_iter, desc="ICA", disable=not config.progress, leave=False)
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
        direction = _newton_direction(grad, hess) if newton else grad
        while True:
            w_new = w - lr * direction @ w
            new = stats(w_new)
            # accept unless the likelihood got worse beyond float32 rounding of the loss
            if not config.adaptive or new[0] <= loss + 1e-6 * abs(loss) or lr < 1e-8:
                break
            lr /= 2                                                 # reject: shorter step
        if not np.isfinite(new[0]):
            raise UserError(f"ICA diverged at step {n_iter + 1} (lr {lr:g}); use a smaller lr or adaptive=True")
        w, (loss, grad, hess) = w_new, new
        losses.append(loss)
        n_iter += 1
        bar.update()
        newton_steps += newton
        if config.adaptive:
            lr = min(lr * 1.2, 1.0) if newton else lr * 1.1
    bar.close()
    if not converged:
        warnings.warn(f"ICA stopped after {n_iter} steps without converging (max |I - E[g(y)y^T]| = {gmax:.2e} "
                      f">= tol {config.tol:g}); raise max_iter or check for near-Gaussian directions", stacklevel=3)
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


# ---------------------------------------------------------------------- word vectors -> components


@dataclass
class WordICA:
    """The fitted map from an embedding vector to its d independent components."""

    whitening: Whitening
    ica: ICAResult
    scale: np.ndarray           # (d,) multiplies y: unit variance, positive long tail (or ones)

    def transform(self, x: np.ndarray) -> np.ndarray:
        """(n, D) vectors -> (n, d) components."""
        return (self.whitening.transform(x) @ self.ica.unmixing.T) * self.scale


def sample_occurrences(blocks: np.ndarray, n_tokens: int, special_ids, seed: int) -> np.ndarray:
    """`n_tokens` token occurrences of a seeded sample of whole blocks (rows of `blocks`, in corpus
    order), special tokens left out: the rows Section 5.3 stacks, one per occurrence."""
    blocks = np.asarray(blocks)
    if blocks.ndim != 2 or len(blocks) == 0:
        raise UserError(f"blocks must be a non-empty (n_blocks, seq_len) array, got shape {blocks.shape}")
    order = np.random.default_rng(seed).permutation(len(blocks))
    n_blocks = max(1, -(-n_tokens // blocks.shape[1]))
    ids = blocks[np.sort(order[:n_blocks])].ravel()
    return ids[~np.isin(ids, list(special_ids))][:n_tokens]


def fit_word_ica(embedding: np.ndarray, sample_token_ids: np.ndarray, pca: PCAConfig = PCAConfig(),
                 config: ICAConfig = ICAConfig()) -> WordICA:
    """Section 5.3 end to end: one row per token occurrence, whiten (Eq. 5), unmix (Eq. 6-7).

    Rows of one token are identical, so each distinct token is used once with its occurrence count
    as weight: the same estimate as stacking every occurrence, at the cost of the distinct tokens.
    """
    embedding = _as_matrix(embedding, "embedding matrix")
    ids = np.asarray(sample_token_ids)
    if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
        raise UserError("sample_token_ids must be a non-empty 1-D integer array of token ids "
                        f"(one per occurrence), got dtype {ids.dtype} and shape {ids.shape}")
    if ids.min() < 0 or ids.max() >= embedding.shape[0]:
        raise UserError(f"sample_token_ids hold ids outside [0, {embedding.shape[0]}) of the embedding "
                        f"(min {ids.min()}, max {ids.max()}); the sample and the model disagree on the vocabulary")
    tokens, counts = np.unique(ids, return_counts=True)
    x = embedding[tokens]                                           # (distinct, D)
    whitening = fit_whitening(x, pca, counts)
    p = whitening.transform(x)                                      # (distinct, d)
    result = fit_ica(p, config, counts)
    scale = np.ones(pca.d)
    if config.standardize:
        y = p @ result.unmixing.T                                   # (distinct, d)
        v = counts / counts.sum()
        mean = v @ y
        std = np.sqrt(v @ (y - mean) ** 2)
        skew = v @ (y - mean) ** 3
        scale = np.where(skew < 0, -1.0, 1.0) / std
    return WordICA(whitening=whitening, ica=result, scale=scale)


# ---------------------------------------------------------------------- groups: Figs. 5-7, Table 3


def fig5_data(components: np.ndarray, token_ids: np.ndarray, tokens: list[str], train_counts: np.ndarray,
              top_n: int = 500) -> pd.DataFrame:
    """The heatmap of Fig. 5: the top_n most frequent words x d components, long format.

    components: (words, d) rows for `token_ids`; tokens: the vocabulary strings indexed by token id.
    Columns: word_index (0 = most frequent), token_id, token, component, value.
    """
    components, token_ids = _check_components(components, token_ids)
    counts = _counts_for(train_counts, token_ids)
    order = frequency_order(counts, token_ids)[:top_n]
    d = components.shape[1]
    return pd.DataFrame({
        "word_index": np.repeat(np.arange(len(order)), d),
        "token_id": np.repeat(token_ids[order], d),
        "token": np.repeat(np.asarray(tokens, dtype=object)[token_ids[order]], d),
        "component": np.tile(np.arange(d), len(order)),
        "value": components[order].ravel(),
    })


def membership(components: np.ndarray, threshold: float = 2.5) -> np.ndarray:
    """(words, d) bool: word in component j's group when |y_j| > threshold."""
    return np.abs(np.asarray(components)) > threshold


def fig6_data(components: np.ndarray, threshold: float = 2.5) -> tuple[pd.DataFrame, dict[str, float]]:
    """Fig. 6: how many words belong to k groups, plus the paper's three numbers.

    Returns (histogram with columns n_groups, n_words, share; summary with share_one, share_none,
    mean_groups, share_within_1 -- the last is Fig. 5's "about 80% of values within [-1, 1]").
    """
    y = np.asarray(components)
    if y.ndim != 2 or y.shape[0] == 0:
        raise UserError(f"components must be a non-empty (words, d) matrix, got shape {y.shape}")
    k = membership(y, threshold).sum(axis=1)
    hist = np.bincount(k, minlength=y.shape[1] + 1)
    last = max(int(k.max()), 1)
    table = pd.DataFrame({"n_groups": np.arange(last + 1), "n_words": hist[: last + 1],
                          "share": hist[: last + 1] / len(k)})
    summary = {"share_one": float((k == 1).mean()), "share_none": float((k == 0).mean()),
               "mean_groups": float(k.mean()), "share_within_1": float((np.abs(y) <= 1).mean()),
               "n_words": int(len(k))}
    return table, summary


def group_members(components: np.ndarray, token_ids: np.ndarray, tokens: list[str], train_counts: np.ndarray,
                  threshold: float = 2.5) -> pd.DataFrame:
    """Every (group, member) pair; the data of Fig. 7 (word lists or clouds sized by frequency).

    Columns: component, token_id, token, value, count (training frequency), typicality (1 = the
    member with the largest |y_j|).
    """
    components, token_ids = _check_components(components, token_ids)
    counts = _counts_for(train_counts, token_ids)
    word, comp = np.nonzero(membership(components, threshold))
    df = pd.DataFrame({"component": comp, "token_id": token_ids[word],
                       "token": np.asarray(tokens, dtype=object)[token_ids[word]],
                       "value": components[word, comp], "count": counts[word]})
    df["abs"] = df["value"].abs()
    df = df.sort_values(["component", "abs", "token_id"], ascending=[True, False, True], kind="stable")
    df["typicality"] = df.groupby("component").cumcount() + 1
    return df.drop(columns="abs").reset_index(drop=True)


def group_names(members: pd.DataFrame, n_words: int = 5) -> pd.Series:
    """Each group's name: its n_words most typical members, comma-separated (Table 3's first column)."""
    top = members[members["typicality"] <= n_words]
    return top.groupby("component")["token"].agg(lambda s: ", ".join(s)).rename("group")


def table3(members: pd.DataFrame, tables: dict[str, pd.DataFrame], score_col: str = "score",
           min_scored: int = 5) -> pd.DataFrame:
    """Table 3: the mean preference score of each group's members per run, with its rank.

    Rows: groups with at least `min_scored` scored members in every run. Columns: component, group
    (five most typical words), n_members, then `<run>` (mean score) and `<run> rank` (1 = highest
    mean among these groups) for each run.
    """
    if members.empty:
        raise UserError("no word belongs to any group (no |y_j| above the threshold); "
                        "lower the threshold or check the ICA input")
    if not tables:
        raise UserError("table3 needs at least one preference table")
    out = pd.DataFrame({"n_members": members.groupby("component").size()})
    out.insert(0, "group", group_names(members))
    keep = pd.Series(True, index=out.index)
    for run, table in tables.items():
        if score_col not in table.columns or "token_id" not in table.columns:
            raise UserError(f"preference table of run {run!r} lacks column 'token_id' or {score_col!r}")
        indexed = table.set_index("token_id")
        if "token" in indexed.columns:
            seen = members["token_id"].map(indexed["token"])
            if (seen.notna() & (seen != members["token"])).any() or seen.isna().any():
                raise UserError(f"the preference table of run {run!r} and the ICA words disagree on the "
                                f"vocabulary; use the run whose embedding the ICA was fitted on, or one "
                                f"trained with the same tokenizer")
        s = members["token_id"].map(indexed[score_col])
        s = s[np.isfinite(s.to_numpy(dtype=float))]
        grouped = s.groupby(members.loc[s.index, "component"])
        out[run] = grouped.mean()
        keep &= grouped.size().reindex(out.index, fill_value=0) >= min_scored
    out = out[keep]
    if out.empty:
        raise UserError(f"no group has {min_scored} or more scored members in every run; "
                        f"lower min_scored or use more scored tokens")
    for run in tables:
        out[f"{run} rank"] = out[run].rank(ascending=False, method="min").astype(int)
    return out.sort_values(f"{next(iter(tables))} rank").reset_index()


def table3_agreement(table: pd.DataFrame, runs: list[str]) -> pd.DataFrame:
    """Spearman correlation of the groups' mean scores between runs (the paper: group ranks agree)."""
    missing = [r for r in runs if r not in table.columns]
    if missing or len(runs) < 2:
        raise UserError(f"table3_agreement needs at least two runs that are columns of the table; missing {missing}")
    return table[runs].corr(method="spearman")


# ---------------------------------------------------------------------- helpers


def _as_matrix(x: np.ndarray, what: str) -> np.ndarray:
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


def _check_components(components: np.ndarray, token_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    components = np.asarray(components)
    token_ids = np.asarray(token_ids)
    if components.ndim != 2 or token_ids.shape != (components.shape[0],):
        raise UserError(f"components (words, d) and token_ids (words,) disagree: shapes "
                        f"{components.shape} and {token_ids.shape}")
    return components, token_ids


def _counts_for(train_counts: np.ndarray, token_ids: np.ndarray) -> np.ndarray:
    counts = np.asarray(train_counts)
    if token_ids.size and (token_ids.max() >= counts.shape[0] or token_ids.min() < 0):
        raise UserError(f"token id {token_ids.max()} is outside the training counts (length {counts.shape[0]}); "
                        f"the counts and the vocabulary disagree")
    return counts[token_ids]
