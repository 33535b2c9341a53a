"""Seeded synthetic data (no network): multi-task regression and skewed low-rank ratings.

Two generators, both following the experimental setup of Krichene et al. (ICML 2023):

* :func:`multitask_regression` — the paper's Appendix C task: m regression tasks in dimension d,
  n users, user features ``u_j`` and task parameters ``theta_i`` drawn from N(0, I) and projected
  onto the unit ball, labels ``y_ij = <u_j, theta_i> + noise``, task probabilities ``q_i`` drawn
  from the power law with pdf ``a x^(a-1)`` on [0, 1] (``a`` in {1, 2}) and rescaled so that
  ``sum_i q_i = tasks_per_user`` (20); pair (i, j) observed with probability ``q_i``; a random
  80/20 split of the observations.
* :func:`low_rank_interactions` — a users x items matrix with planted low-rank ground truth, a
  heavy-tailed number of items per user and a Zipf item popularity whose exponent is calibrated
  so that the *expected* share of interactions held by the top 10% of items matches a target
  (e.g. 86% for MovieLens-20M, Krichene et al., Sec. 5). Presets mirror the paper's benchmarks in users,
  items and interactions (:data:`PRESETS`).

The generators match published dataset *statistics*; nothing in them is tuned towards any
algorithm. The seed is for reproducible experiments (these are data, not privacy noise).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from privrec._validation import check_fraction, check_int, check_positive
from privrec.data.interactions import Interactions
from privrec.privacy.clipping import project_ball

# ---------------------------------------------------------------------------------------------
# (a) Appendix C multi-task regression


@dataclass
class TaskExamples:
    """Observations grouped by task (CSR-like), directly usable to build a solver ``TaskBatch``.

    Task ``i``'s examples are positions ``indptr[i]:indptr[i+1]``; example ``e`` belongs to user
    ``feature_ids[e]`` (the privacy unit; its feature row is ``features[feature_ids[e]]``) and has
    label ``labels[e]``. Within a task, users are sorted.
    """

    indptr: np.ndarray
    feature_ids: np.ndarray
    labels: np.ndarray

    @property
    def n_tasks(self) -> int:
        return len(self.indptr) - 1

    @property
    def n_examples(self) -> int:
        return len(self.labels)

    @property
    def task_counts(self) -> np.ndarray:
        return np.diff(self.indptr)

    def task_ids(self) -> np.ndarray:
        """Task index of every example."""
        return np.repeat(np.arange(self.n_tasks, dtype=np.int32), np.diff(self.indptr))

    def to_csr(self, n_users: int) -> sp.csr_matrix:
        """Tasks x users CSR of labels (note: a label exactly 0.0 would be a stored zero)."""
        return sp.csr_matrix((self.labels, self.feature_ids, self.indptr), shape=(self.n_tasks, n_users))


@dataclass
class MultiTaskRegression:
    """Output of :func:`multitask_regression` (Krichene et al. 2023, Appendix C)."""

    features: np.ndarray  # (n_users, d) user features u_j, ||u_j|| <= 1
    task_params: np.ndarray  # (n_tasks, d) true theta_i, ||theta_i|| <= 1
    task_probs: np.ndarray  # (n_tasks,) q_i, sum = tasks_per_user (before clipping at 1)
    train: TaskExamples
    test: TaskExamples
    params: dict = field(default_factory=dict)


def multitask_regression(
    n_users: int = 10_000,
    n_tasks: int = 100,
    dim: int = 5,
    power: float = 1.0,
    tasks_per_user: float = 20.0,
    noise_std: float = 1e-3,
    train_fraction: float = 0.8,
    random_state=0,
    dtype=np.float32,
) -> MultiTaskRegression:
    """Generate the multi-task regression data of Krichene et al. (ICML 2023), Appendix C.

    ``power`` is the exponent ``a`` of the task-probability law (pdf ``a x^(a-1)``, i.e. a Beta(a, 1)
    draw; the paper uses a in {1, 2}). The paper's label noise is N(0, sigma_F^2) with sigma_F = 1e-3
    (variance 1e-6), hence the default ``noise_std=1e-3``. A pair
    (task i, user j) is observed with probability ``min(q_i, 1)``; observations are split at
    random into ``train_fraction`` / rest.
    """
    params: dict[str, Any] = dict(  # the checked arguments, also recorded in the result
        n_users=check_int(n_users, "n_users", 1),
        n_tasks=check_int(n_tasks, "n_tasks", 1),
        dim=check_int(dim, "dim", 1),
        power=check_positive(power, "power"),
        tasks_per_user=check_positive(tasks_per_user, "tasks_per_user"),
        noise_std=check_positive(noise_std, "noise_std", allow_zero=True),
        train_fraction=check_fraction(train_fraction, "train_fraction", closed_high=False),
    )
    n_users, n_tasks, dim, power, tasks_per_user, noise_std, train_fraction = params.values()
    if tasks_per_user > n_tasks:
        raise ValueError(f"tasks_per_user ({tasks_per_user}) cannot exceed n_tasks ({n_tasks})")
    rng = np.random.default_rng(random_state)
    features = project_ball(rng.standard_normal((n_users, dim)), 1.0, inplace=True).astype(dtype)
    task_params = project_ball(rng.standard_normal((n_tasks, dim)), 1.0, inplace=True).astype(dtype)
    raw = rng.beta(power, 1.0, size=n_tasks)
    q = raw * (tasks_per_user / raw.sum())
    q_eff = np.minimum(q, 1.0)
    # observation mask, tasks x users, generated in chunks of tasks to bound memory
    tasks_l, users_l = [], []
    chunk = max(1, int(2_000_000 // max(n_users, 1)))
    for s in range(0, n_tasks, chunk):
        mask = rng.random((min(chunk, n_tasks - s), n_users)) < q_eff[s : s + chunk, None]
        t, u = np.nonzero(mask)
        tasks_l.append(t + s)
        users_l.append(u)
    tasks = np.concatenate(tasks_l).astype(np.int64)
    users = np.concatenate(users_l).astype(np.int32)
    if len(tasks) == 0:
        raise ValueError("no observation was generated; increase tasks_per_user or n_users")
    dots = np.einsum("ij,ij->i", features[users].astype(np.float64), task_params[tasks].astype(np.float64))
    labels = (dots + noise_std * rng.standard_normal(len(tasks))).astype(dtype)
    is_train = rng.random(len(tasks)) < train_fraction

    def group(sel):
        t = tasks[sel]
        indptr = np.zeros(n_tasks + 1, dtype=np.int64)
        np.cumsum(np.bincount(t, minlength=n_tasks), out=indptr[1:])
        return TaskExamples(indptr, users[sel], labels[sel])  # np.nonzero order: task-major, users sorted

    return MultiTaskRegression(features, task_params, q, group(is_train), group(~is_train), params=params)


# ---------------------------------------------------------------------------------------------
# (b) low-rank interactions with popularity skew


@dataclass(frozen=True)
class Preset:
    """Target statistics of a synthetic benchmark dataset (Krichene et al. 2023, App. D, Table 1)."""

    n_users: int
    n_items: int
    n_interactions: int
    top10_share: float  # expected share of interactions held by the top 10% of items
    min_per_user: int
    values: str = "ratings"  # "ratings" (0.5..5 half stars), "stars" (integers 1..5) or "counts" (>= 1)
    user_sigma: float = 1.4  # log-normal spread of items per user (heavy-tailed activity)
    max_user_fraction: float = 0.35  # cap on a user's share of all items
    description: str = ""
    signal: float = 0.7  # weight of the planted low-rank part in the values (0 = biases only)
    affinity: float | None = None  # taste-driven observation (None = DEFAULT_AFFINITY, 0 = taste-blind)
    noise_std: float = 0.5  # rating noise

    def _generator_arguments(self) -> dict[str, Any]:
        """The keyword arguments of :func:`low_rank_interactions` this preset sets besides the sizes."""
        out = {
            f: getattr(self, f)
            for f in ("top10_share", "min_per_user", "values", "user_sigma", "max_user_fraction", "signal", "noise_std")
        }
        if self.affinity is not None:
            out["affinity"] = self.affinity
        return out


PRESETS: dict[str, Preset] = {
    # ML-10M (Lee et al. 2013 protocol): 69,878 x 10,677, 10,000,054 ratings, every user >= 20 ratings.
    # Its top-10% share is not stated in the paper; we reuse ML-20M's 86% (assumption).
    "ml10m-like": Preset(
        69_878, 10_677, 10_000_054, 0.86, 20, description="MovieLens-10M-sized ratings (Krichene et al. 2023, Table 1)"
    ),
    # ML-20M after Liang et al. preprocessing: 136,677 x 20,108, ~10.0M interactions, users >= 5 items,
    # top 10% of items hold 86% of the data (Krichene et al. 2023, Sec. 5).
    "ml20m-like": Preset(
        136_677,
        20_108,
        9_990_000,
        0.86,
        5,
        description="MovieLens-20M (processed, Liang et al. 2018)-sized, top-10% items hold ~86%",
    ),
    # MSD Taste Profile after Liang et al. filtering: 571,355 x 41,140, 33.63M; users >= 20 songs.
    # Its top-10% share is not stated in the paper; 0.86 again (assumption).
    "msd-like": Preset(
        571_355,
        41_140,
        33_633_450,
        0.86,
        20,
        values="counts",
        max_user_fraction=0.1,
        description="Million Song Dataset (filtered)-sized play counts",
    ),
    # Small embedded default: generates in well under a second.
    "synthetic-skew": Preset(
        5_000, 2_000, 100_000, 0.86, 5, max_user_fraction=0.2, description="small skewed ratings, the embedded default"
    ),
    # A wide product catalogue (issue 44): the shape of a real product-rating set (22k users x 296k
    # items, 922k ratings 1-5): few users per item, ~40 ratings per user, Zipf item popularity (the
    # top 10% of items hold about half the ratings: most items are rated a handful of times).
    "wide-catalogue": Preset(
        25_000,
        300_000,
        1_000_000,
        0.5,
        10,
        values="stars",
        user_sigma=1.0,
        max_user_fraction=0.01,
        description="wide product catalogue: ~40 ratings 1-5 per user, Zipf item popularity",
    ),
    # Generators that test the configuration rule (issue 24): no interaction structure at all (the
    # truth is global mean + user bias + item bias, and which items a user rates ignores taste), so
    # the best model is the bias model; and a strongly personal one (large planted low-rank part,
    # taste-driven observation), where a personal model should beat it.
    "synthetic-biases": Preset(
        30_000,
        3_000,
        600_000,
        0.86,
        5,
        max_user_fraction=0.2,
        signal=0.0,
        affinity=0.0,
        description="skewed ratings with no interaction structure (biases only), large enough that the rule admits a rank",
    ),
    "synthetic-structured": Preset(
        20_000,
        1_000,
        600_000,
        0.6,
        10,
        max_user_fraction=0.2,
        signal=1.5,
        affinity=3.0,
        noise_std=0.3,
        description="skewed ratings with a strong planted rank-8 structure and taste-driven observation",
    ),
}


@dataclass
class LowRankData:
    """Output of :func:`low_rank_interactions`: the data plus its planted ground truth.

    Ratings follow ``clip(round_half(global_mean + user_bias + item_bias + signal * <U_u, V_i> +
    N(0, noise_std^2)), 0.5, 5)`` (half-star steps; ``values="stars"``: rounded to the integers
    1..5 instead); counts follow ``1 + Poisson(exp(0.3 +
    0.5 user_bias + 0.5 item_bias + signal * <U_u, V_i>))``. ``expected`` gives the noiseless score
    (before rounding / Poisson) for any (user, item) pair. Indexing equals ``interactions``'.
    """

    interactions: Interactions
    user_factors: np.ndarray
    item_factors: np.ndarray
    user_bias: np.ndarray
    item_bias: np.ndarray
    global_mean: float
    signal: float
    popularity: np.ndarray  # sampling probability of each item
    exponent: float  # calibrated Zipf exponent

    def expected(self, users, items) -> np.ndarray:
        u = np.asarray(users)
        i = np.asarray(items)
        dots = np.einsum("ij,ij->i", self.user_factors[u], self.item_factors[i])
        return self.global_mean + self.user_bias[u] + self.item_bias[i] + self.signal * dots


def _user_degrees(rng, n_users, n_items, total, min_per_user, sigma, max_fraction) -> np.ndarray:
    cap = max(min_per_user, int(max_fraction * n_items))
    if total < n_users * min_per_user:
        raise ValueError(f"n_interactions={total} is below n_users * min_per_user = {n_users * min_per_user}")
    if total > n_users * cap:
        raise ValueError(f"n_interactions={total} exceeds what {n_users} users x {cap} items per user allow")
    extra = rng.lognormal(0.0, sigma, size=n_users)
    budget = total - n_users * min_per_user
    room = cap - min_per_user
    x = np.zeros(n_users)
    free = np.ones(n_users, dtype=bool)
    for _ in range(50):  # water-filling: scale the free users until the cap binds nowhere
        remaining = budget - x[~free].sum()
        x[free] = extra[free] * (remaining / extra[free].sum())
        over = free & (x > room)
        if not over.any():
            break
        x[over] = room
        free &= ~over
    k = np.floor(x).astype(np.int64)
    short = int(budget - k.sum())
    if short > 0:
        eligible = np.flatnonzero(k < room)
        k[rng.choice(eligible, size=short, replace=False)] += 1
    return k + min_per_user


def _expected_top_share(
    p_groups: np.ndarray, c_groups: np.ndarray, k_bins: np.ndarray, w_bins: np.ndarray, n_top_groups: int
) -> float:
    """Expected top-10% share when each user draws k distinct items by successive sampling.

    Items come in groups of ``c_groups`` items with (mean) probability ``p_groups``, most popular
    first; the first ``n_top_groups`` groups are exactly the top 10%. Uses the Poissonisation
    approximation: item j is included with probability ``1 - exp(-p_j t)`` where t solves
    ``sum_j (1 - exp(-p_j t)) = k`` (solved by bisection for all user bins at once).
    """
    t = _poisson_draws(p_groups, c_groups, k_bins)
    incl = 1.0 - np.exp(-np.outer(t, p_groups))
    counts = (w_bins[:, None] * incl).sum(axis=0) * c_groups
    return float(counts[:n_top_groups].sum() / counts.sum())


def _poisson_draws(p_groups: np.ndarray, c_groups: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Number of iid draws t with ``sum_j (1 - exp(-p_j t)) = k`` (expected distinct items = k)."""
    m = c_groups.sum()
    k = np.asarray(k, dtype=np.float64)

    def distinct(t):
        return m - (c_groups * np.exp(-np.outer(t, p_groups))).sum(axis=1)

    lo = np.zeros(len(k))
    hi = np.ones(len(k))
    for _ in range(200):  # grow the upper bracket
        short = distinct(hi) < k
        if not short.any():
            break
        hi = np.where(short, hi * 4, hi)
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        below = distinct(mid) < k
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    return hi


def _rank_groups(n_items: int, top: int) -> np.ndarray:
    """Start ranks of ~400 log-spaced popularity-rank groups; ``top`` is always a group start."""
    starts = np.unique(np.r_[0, top, np.floor(np.logspace(0, np.log10(n_items), 400)).astype(np.int64) - 1])
    return starts[(starts >= 0) & (starts < n_items)]


HEAD_OFFSET_FRACTION = 0.002


def _zipf(m: int, a: float) -> np.ndarray:
    """Zipf-Mandelbrot law ``p_r ∝ (r + c)^-a`` with head offset ``c = 0.002 m``.

    A pure Zipf law (c = 0) puts the top item in ~99% of users' histories at ML-20M's skew; with
    the offset the most popular item reaches ~45% of users, close to ML-20M's most-rated movie
    (rated by about half of the users), while the calibrated exponent still fixes the top-10% share.
    """
    p = (np.arange(1, m + 1, dtype=np.float64) + HEAD_OFFSET_FRACTION * m) ** (-a)
    return p / p.sum()


MAX_EXPONENT = 3.0


def calibrate_exponent(k: np.ndarray, n_items: int, top10_share: float) -> tuple[float, float]:
    """Zipf exponent giving the target expected top-10% share under per-user distinct sampling.

    Returns ``(exponent, expected_share)``. When heavy users saturate the head so that the target
    is out of reach even at :data:`MAX_EXPONENT`, that exponent and its (lower) share are returned.
    Users are grouped in up to 48 quantile bins of their item count and items in ~400 log-spaced
    popularity-rank groups (the top-10% boundary is a group edge), which keeps this fast.
    """
    top = max(1, int(math.ceil(0.1 * n_items)))
    order = np.sort(np.asarray(k, dtype=np.int64))
    edges = np.unique(np.quantile(order, np.linspace(0, 1, 49)).astype(np.int64))
    idx = np.clip(np.searchsorted(edges, order, side="right") - 1, 0, len(edges) - 1)
    w = np.bincount(idx).astype(np.float64)
    kb = np.bincount(idx, weights=order) / np.maximum(w, 1)
    keep = w > 0
    w, kb = w[keep], kb[keep]
    starts = _rank_groups(n_items, top)
    c = np.diff(np.r_[starts, n_items]).astype(np.float64)
    n_top = int(np.searchsorted(starts, top))

    def share(a):
        pg = np.add.reduceat(_zipf(n_items, a), starts) / c
        return _expected_top_share(pg, c, kb, w, n_top)

    lo, hi = 0.0, MAX_EXPONENT
    if share(hi) < top10_share:
        return hi, share(hi)  # saturation: the target cannot be reached; use the steepest law allowed
    if share(lo) >= top10_share:
        return lo, share(lo)
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        if share(mid) < top10_share:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-3:
            break
    a = 0.5 * (lo + hi)
    return a, share(a)


def _sample_distinct(rng, k: np.ndarray, p: np.ndarray, bulk_rounds: int = 3) -> np.ndarray:
    """Per user u, ``k[u]`` distinct items drawn by successive sampling from ``p`` (vectorised).

    Successive sampling = the first k distinct items of an iid stream from ``p`` (equivalently,
    the k smallest of ``Exp(1) / p_j``). Bulk rounds draw, per user, as many iid items as give the
    deficit in expectation (Poissonisation first, then ``deficit / unheld mass``), drop items
    already held and in-batch repeats (keeping draw order) and keep at most the deficit, which is
    exactly a continuation of the stream. Users still short afterwards (heavy users needing the
    tail) are completed exactly with exponential keys over the items they do not hold, in blocks.
    Returns the sorted keys ``user * n_items + item``.
    """
    n_users = len(k)
    m = len(p)
    cdf = np.cumsum(p)
    cdf /= cdf[-1]
    held_keys = np.empty(0, dtype=np.int64)
    have = np.zeros(n_users, dtype=np.int64)
    held_mass = np.zeros(n_users)
    for rnd in range(bulk_rounds):
        deficit = k - have
        if not deficit.any():
            break
        need = np.flatnonzero(deficit > 0)
        if rnd == 0:
            # as many draws as give k distinct items in expectation (Poissonisation)
            ps = np.sort(p)[::-1]
            starts = _rank_groups(m, 1)
            c = np.diff(np.r_[starts, m]).astype(np.float64)
            kv = np.flatnonzero(np.bincount(deficit[need]))  # distinct deficits, without hashing
            t = _poisson_draws(np.add.reduceat(ps, starts) / c, c, kv)
            draws = np.ceil(t[np.searchsorted(kv, deficit[need])]).astype(np.int64)
        else:
            remaining = np.clip(1.0 - held_mass[need], 1e-6, 1.0)
            draws = np.ceil(deficit[need] * 1.2 / remaining + 2).astype(np.int64)
        draws = np.minimum(draws, 4 * deficit[need] + 10)
        # users in chunks of about ``_CHUNK`` draws to bound memory (users are independent)
        bounds = np.searchsorted(np.cumsum(draws), np.arange(_CHUNK, draws.sum() + _CHUNK, _CHUNK))
        taken = []
        lo = 0
        for hi in np.unique(np.r_[bounds + 1, len(need)]):
            hi = min(int(hi), len(need))
            if hi <= lo:
                continue
            take = _bulk_round(rng, need[lo:hi], draws[lo:hi], deficit, cdf, held_keys, m)
            tu = take // m
            have += np.bincount(tu, minlength=n_users)
            held_mass += np.bincount(tu, weights=p[take - tu * m], minlength=n_users)
            taken.append(take)
            lo = hi
        held_keys = np.concatenate([held_keys] + taken)  # disjoint by construction
        del taken
        held_keys.sort()  # in place: no second full-size copy
    deficit = k - have
    short = np.flatnonzero(deficit > 0)
    if short.size:
        extra = []
        hu = held_keys // m
        block = max(1, int(4_000_000 // m))
        for b in range(0, len(short), block):
            us = short[b : b + block]
            keyv = rng.exponential(size=(len(us), m)) / np.maximum(p, 1e-300)
            lo_ = np.searchsorted(hu, us, side="left")
            cnt = np.searchsorted(hu, us, side="right") - lo_
            sel = np.repeat(lo_ - np.r_[0, np.cumsum(cnt)[:-1]], cnt) + np.arange(cnt.sum())
            keyv[np.repeat(np.arange(len(us)), cnt), held_keys[sel] - hu[sel] * m] = np.inf
            d = deficit[us]
            kmax = int(d.max())
            part = (
                np.argpartition(keyv, kmax - 1, axis=1)[:, :kmax] if kmax < m else np.tile(np.arange(m), (len(us), 1))
            )
            part_keys = np.take_along_axis(keyv, part, axis=1)
            part = np.take_along_axis(part, np.argsort(part_keys, axis=1), axis=1)
            mask = np.arange(kmax)[None, :] < d[:, None]
            rows = np.repeat(us, d)
            extra.append(rows * np.int64(m) + part[mask])
        held_keys = np.concatenate([held_keys] + extra)
        del extra
        held_keys.sort()
    return held_keys


_CHUNK = 4_000_000


def _bulk_round(rng, need, draws, deficit, cdf, held_keys, m) -> np.ndarray:
    """One bulk round for the users ``need``: keys of the new distinct items kept (see caller)."""
    users = np.repeat(need, draws)
    items = _inverse_cdf(cdf, rng.random(len(users)))
    keys = users * np.int64(m) + items
    del items
    pos = np.flatnonzero(~_sorted_contains(held_keys, keys)) if held_keys.size else np.arange(len(keys))
    # first occurrence of each new key in draw order (stable sort by key, then back to draw order)
    o = pos[np.argsort(keys[pos], kind="stable")]
    ko = keys[o]
    first = o[np.r_[True, ko[1:] != ko[:-1]]] if len(o) else o
    del o, ko
    pos = np.sort(first)
    ku = users[pos]
    starts_u = np.flatnonzero(np.r_[True, ku[1:] != ku[:-1]]) if len(ku) else ku
    rank = np.arange(len(ku)) - np.repeat(starts_u, np.diff(np.r_[starts_u, len(ku)]))
    return keys[pos[rank < deficit[ku]]]


def _inverse_cdf(cdf: np.ndarray, r: np.ndarray) -> np.ndarray:
    """``searchsorted(cdf, r, side="right")`` (clipped to the last item) via a guide table.

    A table over ``G`` equal bins of [0, 1) gives each uniform a start index that is never past the
    answer; draws then step forward while ``cdf[idx] <= r`` (few steps: head items own whole bins).
    Same result as the binary search, several times faster on tens of millions of draws.
    """
    m = len(cdf)
    g = int(min(1 << 22, max(1 << 16, 8 * m)))
    guide = np.searchsorted(cdf, np.arange(g) / g, side="right")
    np.minimum(guide, m - 1, out=guide)
    idx = guide[(r * g).astype(np.int64)]
    todo = np.flatnonzero(cdf[idx] <= r)
    while todo.size:
        idx[todo] += 1
        np.minimum(idx, m - 1, out=idx)
        todo = todo[(cdf[idx[todo]] <= r[todo]) & (idx[todo] < m - 1)]
    return idx


def _sorted_contains(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Membership of ``keys`` in the sorted array ``sorted_keys`` (binary search, no hashing)."""
    idx = np.searchsorted(sorted_keys, keys)
    np.minimum(idx, len(sorted_keys) - 1, out=idx)
    return sorted_keys[idx] == keys


#: default taste affinity tau of :func:`low_rank_interactions` (log-weight sd of the observation law)
DEFAULT_AFFINITY = 2.0
#: default candidate oversampling factor of :func:`low_rank_interactions`
DEFAULT_OVERSAMPLE = 3.0


def _top_share(items: np.ndarray, n_items: int) -> float:
    """Measured share of the observations held by the top 10% of items."""
    c = np.sort(np.bincount(items, minlength=n_items))[::-1]
    total = c.sum()
    return float(c[: max(1, int(math.ceil(0.1 * n_items)))].sum() / total) if total else 0.0


#: candidates scored and ranked per block of users in :func:`_affinity_select` (bounds its memory)
_SELECT_BLOCK = 1 << 22


def _affinity_select(
    rng, cand_keys: np.ndarray, k: np.ndarray, uf: np.ndarray, vf: np.ndarray, affinity: float, n_items: int
) -> np.ndarray:
    """Keep ``k[u]`` of user u's candidates, a weighted sample without replacement ∝ ``exp(affinity <U_u, V_i>)``.

    Gumbel-top-k: the ``k[u]`` largest ``affinity * <U_u, V_i> + Gumbel`` per user, found with a
    sort over (user, -key) (no per-user loop). Users are processed in contiguous blocks of about
    :data:`_SELECT_BLOCK` candidates to bound memory; the Gumbel draws are taken in candidate
    order, so the result does not depend on the block size. ``cand_keys`` are sorted
    ``user * n_items + item``; so is the result.
    """
    len(cand_keys)
    n_users = len(k)
    # start of each user's candidates (cand_keys is sorted by user), without an n-sized user array
    ustart = np.searchsorted(cand_keys, np.arange(n_users + 1, dtype=np.int64) * np.int64(n_items))
    # block edges at user boundaries, each block about _SELECT_BLOCK candidates (one heavy user at least)
    edges = [0]
    while edges[-1] < n_users:
        u0 = edges[-1]
        u1 = int(np.searchsorted(ustart, ustart[u0] + _SELECT_BLOCK, side="right")) - 1
        edges.append(min(n_users, max(u1, u0 + 1)))
    out = []
    for u0, u1 in zip(edges[:-1], edges[1:]):
        c0, c1 = int(ustart[u0]), int(ustart[u1])
        if c1 == c0:
            continue
        ck = cand_keys[c0:c1]
        users = ck // n_items
        nb = c1 - c0
        score = np.empty(nb, dtype=np.float64)
        i = ck - users * n_items
        dots = np.einsum("ij,ij->i", uf[users], vf[i])
        del i
        score[:] = affinity * dots + rng.gumbel(size=nb)
        del dots
        # one float sort on user + a decreasing map of the key into [0, 0.999) (same order as lexsort on
        # (user, -key) up to ties of the float64 map; users < 2^31 leave >= 20 bits for the key)
        np.clip(score, -700, 700, out=score)
        np.exp(score, out=score)
        score += 1.0
        np.divide(0.999, score, out=score)
        comp = users.astype(np.float64)
        comp += score
        del score
        order = np.argsort(comp, kind="quicksort")
        del comp
        us = users[order]
        rank = np.arange(nb) - (ustart[us] - c0)
        keep = order[rank < k[us]]
        del order, us, rank, users
        keep.sort()  # candidates are sorted, so sorted positions give sorted keys
        out.append(ck[keep])
        del keep
    return np.concatenate(out) if out else cand_keys[:0].copy()


def _candidate_counts(k, n_items, top10_share, affinity, oversample, cap):
    """Candidate counts per user, calibrated Zipf exponent, its expected share and the oversampling used.

    ``ceil(c * k_u)`` candidates, never more than ``max(k_u, cap)`` (the per-user activity cap, so
    heavy users do not take the whole catalogue). When the share target is out of reach at
    ``c = oversample`` (heavy users' candidate sets saturate the head) ``c`` is lowered, by
    bisection down to 1, to the largest value that still reaches it (the taste signal is then
    weaker, the popularity skew is kept).
    """
    if affinity == 0:
        return (k,) + calibrate_exponent(k, n_items, top10_share) + (1.0,)
    cap = min(n_items, cap)

    def at(c):
        kc = np.maximum(k, np.minimum(np.ceil(c * k).astype(np.int64), cap))
        return (kc,) + calibrate_exponent(kc, n_items, top10_share) + (c,)

    best = at(oversample)
    if best[2] >= top10_share - 0.005 or oversample == 1.0:
        return best
    lo, hi = 1.0, oversample
    best = at(lo)
    if best[2] < top10_share - 0.005:
        return best
    for _ in range(6):
        mid = 0.5 * (lo + hi)
        cand = at(mid)
        if cand[2] >= top10_share - 0.005:
            lo, best = mid, cand
        else:
            hi = mid
    return best


def low_rank_interactions(
    n_users: int,
    n_items: int,
    n_interactions: int,
    top10_share: float = 0.86,
    min_per_user: int = 5,
    values: str = "ratings",
    rank: int = 8,
    signal: float = 0.7,
    noise_std: float = 0.5,
    user_sigma: float = 1.4,
    max_user_fraction: float = 0.35,
    affinity: float = DEFAULT_AFFINITY,
    oversample: float = DEFAULT_OVERSAMPLE,
    random_state=0,
    name: str = "synthetic",
) -> LowRankData:
    """Skewed low-rank interactions with planted ground truth (statistics of Krichene et al. 2023, Table 1).

    * items per user: ``min_per_user`` + log-normal(0, ``user_sigma``) scaled to the total and
      capped at ``max_user_fraction * n_items`` (heavy-tailed activity);
    * item popularity: Zipf-Mandelbrot ``p_r ∝ (r + 0.002 n_items)^-a`` over a random permutation
      of the items, ``a`` calibrated (:func:`calibrate_exponent`) so that the expected share of the
      top 10% of items is ``top10_share``;
    * values from planted factors ``U (n_users, rank)``, ``V (n_items, rank)`` with N(0, rank^-1/2)
      entries (so ``<U_u, V_i>`` has unit variance) and N(0, 0.35^2) biases (see
      :class:`LowRankData`);
    * which pairs are observed depends on popularity *and* on the planted taste: user u's items are
      drawn without replacement with probability approximately ∝ ``p_i * exp(affinity * <U_u, V_i>)``:
      ``ceil(oversample * k_u)`` distinct candidates (at most ``max(k_u, max_user_fraction *
      n_items)``) by successive sampling from the popularity law, then ``k_u`` of them by a
      weighted sample without replacement with weights ``exp(affinity * <U_u, V_i>)``
      (Gumbel-top-k, :func:`_affinity_select`). The Zipf exponent is calibrated for the candidate
      counts (a uniform thinning keeps the share); ``oversample`` is lowered when the share target
      would otherwise be out of reach (:func:`_candidate_counts`; e.g. to 1.56 for ``ml10m-like``).
      The affinity spreads item marginals a little, so the measured share is stored in
      ``info["top10_share"]`` (0.844 for ``ml20m-like``, target 0.86) and the oversampling used in
      ``info["oversample"]``. Real interaction data is personalised (what you watch depends on your
      taste). With ``affinity=0`` the observation is missing completely at random given popularity
      (no oversampling: each user's items are successive draws from the popularity law).

    ``affinity`` (tau, default :data:`DEFAULT_AFFINITY` = 2) was chosen for realism, not for any
    algorithm, before any private run: the criterion is that non-private ALS clearly beats the
    popularity ranker on held-out users of ``ml20m-like``, as on real ML-20M (Recall@20 about 0.36
    vs about 0.15, Liang et al. 2018); at 0, popularity is the best ranker of which items are
    observed. Measured at full size: ALS 0.315 vs popularity 0.226 (with the earlier taste-blind
    generator popularity, 0.271, beat ALS; at 5% of the users and tau = 0 they tie, 0.273 / 0.271).
    """
    n_users = check_int(n_users, "n_users", 1)
    n_items = check_int(n_items, "n_items", 1)
    n_interactions = check_int(n_interactions, "n_interactions", 1)
    top10_share = check_fraction(top10_share, "top10_share")
    min_per_user = check_int(min_per_user, "min_per_user", 1)
    rank = check_int(rank, "rank", 1)
    affinity = check_positive(affinity, "affinity", allow_zero=True)
    oversample = check_positive(oversample, "oversample")
    if oversample < 1:
        raise ValueError(f"oversample must be >= 1, got {oversample}")
    if values not in ("ratings", "stars", "counts"):
        raise ValueError(f"values must be 'ratings', 'stars' or 'counts', got {values!r}")
    rng = np.random.default_rng(random_state)
    k = _user_degrees(rng, n_users, n_items, n_interactions, min_per_user, user_sigma, max_user_fraction)
    # candidates per user: k itself when observation ignores taste, else oversampled (capped)
    k_cand, a, expected_share, oversample = _candidate_counts(
        k, n_items, top10_share, affinity, oversample, max(min_per_user, int(max_user_fraction * n_items))
    )
    if expected_share < top10_share - 0.01:
        warnings.warn(
            f"top-10% share {top10_share} is out of reach for {n_users} users x {n_items} items with "
            f"{n_interactions} interactions (heavy users saturate the head); expected share is "
            f"{expected_share:.3f} at the steepest exponent {a}",
            UserWarning,
            stacklevel=2,
        )
    perm = rng.permutation(n_items)  # popularity rank r -> item index perm[r]
    p = np.empty(n_items)
    p[perm] = _zipf(n_items, a)
    # planted factors from their own stream, so they do not depend on how pairs were sampled
    frng = np.random.default_rng(rng.integers(0, 2**63))
    scale = rank**-0.25
    uf = (frng.standard_normal((n_users, rank)) * scale).astype(np.float32)
    vf = (frng.standard_normal((n_items, rank)) * scale).astype(np.float32)
    keys = _sample_distinct(rng, k_cand, p)
    if affinity > 0:
        keys = _affinity_select(rng, keys, k, uf, vf, affinity, n_items)
    users = keys // n_items
    items = keys - users * n_items
    nnz = len(users)
    ub = (0.35 * rng.standard_normal(n_users)).astype(np.float32)
    ib = (0.35 * rng.standard_normal(n_items)).astype(np.float32)
    gm = 0.3 if values == "counts" else 3.5
    vals = np.empty(nnz, dtype=np.float32)
    step = 1 << 22
    for s in range(0, nnz, step):  # chunked to bound memory
        u, i = users[s : s + step], items[s : s + step]
        dots = np.einsum("ij,ij->i", uf[u], vf[i])
        if values == "ratings":
            score = gm + ub[u] + ib[i] + signal * dots + noise_std * rng.standard_normal(len(u)).astype(np.float32)
            vals[s : s + step] = np.clip(np.round(score * 2.0) / 2.0, 0.5, 5.0)
        elif values == "stars":
            score = gm + ub[u] + ib[i] + signal * dots + noise_std * rng.standard_normal(len(u)).astype(np.float32)
            vals[s : s + step] = np.clip(np.round(score), 1.0, 5.0)
        else:
            lam = np.exp(gm + 0.5 * ub[u] + 0.5 * ib[i] + signal * dots)
            vals[s : s + step] = 1.0 + rng.poisson(lam)
    indptr = np.zeros(n_users + 1, dtype=np.int64)
    np.cumsum(np.bincount(users, minlength=n_users), out=indptr[1:])
    matrix = sp.csr_matrix((vals, items.astype(np.int32), indptr), shape=(n_users, n_items))
    matrix.has_sorted_indices = True
    info = dict(
        source="synthetic",
        generator="low_rank_interactions",
        target_interactions=n_interactions,
        target_top10_share=top10_share,
        zipf_exponent=a,
        expected_top10_share=expected_share,
        top10_share=_top_share(items, n_items),
        affinity=affinity,
        oversample=oversample,
        values=values,
        rank=rank,
        seed=random_state,
        duplicate_rows=0,
    )
    inter = Interactions(matrix, np.arange(n_users), np.arange(n_items), name=name, info=info)
    offset = 0.0 if values == "counts" else gm
    return LowRankData(inter, uf, vf, ub, ib, offset, signal, p, a)


def generate_preset(name: str, scale: float = 1.0, random_state=0) -> LowRankData:
    """Generate a preset of :data:`PRESETS`.

    ``scale`` < 1 (for tests) shrinks the number of users and of interactions proportionally and
    keeps the item catalogue, so items per user, density, user-activity spread and the top-10%
    share target all keep their full-size values.
    """
    if name not in PRESETS:
        raise ValueError(f"unknown synthetic preset {name!r}; known: {sorted(PRESETS)}")
    scale = check_positive(scale, "scale")
    if scale > 1:
        raise ValueError(f"scale must be <= 1, got {scale}")
    pr = PRESETS[name]
    n_users = max(10, int(round(pr.n_users * scale)))
    nnz = max(n_users * pr.min_per_user, int(round(pr.n_interactions * scale)))
    data = low_rank_interactions(
        n_users, pr.n_items, nnz, **pr._generator_arguments(), random_state=random_state, name=name
    )
    data.interactions.info.update(preset=name, scale=scale)
    return data
