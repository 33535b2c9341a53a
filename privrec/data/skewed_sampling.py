"""Who rates what in the synthetic low-rank data (:func:`privrec.data.synthetic.low_rank_interactions`):
a heavy-tailed number of items per user, a Zipf-Mandelbrot item popularity whose exponent is
calibrated so that the *expected* share of the top 10% of items matches a target, and successive
sampling of each user's distinct items from that law (with the candidate oversampling the taste
selection needs). Names are importable from :mod:`privrec.data.synthetic` too.
"""

from __future__ import annotations

import math

import numpy as np


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


def _top_share(items: np.ndarray, n_items: int) -> float:
    """Measured share of the observations held by the top 10% of items."""
    c = np.sort(np.bincount(items, minlength=n_items))[::-1]
    total = c.sum()
    return float(c[: max(1, int(math.ceil(0.1 * n_items)))].sum() / total) if total else 0.0


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
