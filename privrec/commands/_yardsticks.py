"""The yardsticks a model is compared with, and the ranking metrics that compare them.

The trivial baseline (the training global mean for rating prediction, the exact popularity
ranking for top-k), the popularity ranking of the fit's own released noisy counts (private, no
extra cost) and non-private ALS (fitted when the training data is small enough or with
``--compare-als``); Recall@20 / NDCG@20 of explicit ratings beside the RMSE, relevant = held-out
ratings at or above a threshold (``--relevance-threshold``, default the top quarter of the rating
scale). Their metrics are computed on the exact held-out data, and all but the noisy-count ranking
are fitted on the exact training data: the output marks them non-private.

Issue 43: every model is ranked as its ``recommend`` serves it (:func:`model_ranking`; DPALS ranks
explicit ratings by exposure, not by predicted rating). On explicit ratings non-private ALS is two
rows: explicit ALS for the RMSE (on the declared rating scale: :mod:`privrec.models.als`) and,
for Recall@20 / NDCG@20, ``ALS(feedback="implicit")`` fitted on the training ratings at or above
the relevance threshold (:func:`ranking_yardstick_params`), the ranking yardstick a practitioner
would run; a rating regressor's ranking is none (Recall@20 0.001 on the demo).

What they cost (issue 44): every ranking goes through :mod:`privrec.evaluation.topk` (users in
chunks sized from the 512 MiB evaluation memory budget; the popularity rankers, which have no
factors, without scoring at all). The ALS yardstick's ranking metrics score at most
:data:`YARDSTICK_SCORE_ENTRIES` (test user, item) pairs: on a wide catalogue they use a uniform
sample of the test users (seeded by ``--seed``; ``--yardstick-users`` sets the size, 0 = all), and
the output states the sample size next to the ALS row.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..evaluation import experiment as X
from ..evaluation import ranking_metrics
from ..evaluation.metrics import ranking_k
from ..evaluation.protocols import item_bias_of, item_factors_of, project_users
from ._fitting import _fit_model
from ._running import CommandError

#: training matrices with fewer stored ratings than this get the non-private ALS comparison by default
ALS_COMPARISON_MAX_NNZ = 2_000_000
#: k of the ranking metrics
TOP_K = 20
#: default relevance threshold of explicit ratings: the top quarter of the rating scale (4 on 1-5)
RELEVANCE_QUANTILE = 0.75
#: (test user x item) scores the ALS yardstick's ranking metrics compute at most by default: 2^31,
#: i.e. every test user up to a 20,000-user x 100,000-item evaluation; beyond, a uniform sample of
#: ``YARDSTICK_SCORE_ENTRIES // n_items`` test users (about 7,000 users on a 300,000-item catalogue)
YARDSTICK_SCORE_ENTRIES = 1 << 31


def _compare_args(g) -> None:
    g.add_argument(
        "--relevance-threshold",
        dest="relevance_threshold",
        type=float,
        default=None,
        help="explicit ratings: a held-out rating at or above this is relevant for Recall@20 (default: the "
        "top quarter of the rating scale -- the model's declared rating range, else the training ratings' "
        "range -- i.e. 4 on 1-5)",
    )
    g.add_argument(
        "--compare-als",
        dest="compare_als",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also fit non-private ALS as a reference (default: only when the training data has fewer "
        f"than {ALS_COMPARISON_MAX_NNZ:,} ratings)",
    )
    g.add_argument(
        "--yardstick-users",
        dest="yardstick_users",
        type=int,
        default=None,
        metavar="N",
        help="test users on which the non-private ALS yardstick's ranking metrics are computed: a uniform "
        "sample seeded by --seed (default: all of them up to 2^31 scored (user, item) pairs, else as many "
        "as fit that; 0 = all)",
    )


def _yardstick_seed(args) -> int:
    """Seed of the non-private ALS yardstick's initial factors: the public ``--seed`` (it adds no
    noise, so a known seed costs nothing), so ``fit`` and ``evaluate`` refit the same yardstick."""
    return int(getattr(args, "seed", 0) or 0)


class _Trivial:
    """Non-private yardstick read by the evaluation protocols: no factors, only offsets.

    Ratings: the training global mean. Held-out users: items ranked by exact training counts.
    """

    def __init__(self, train: sp.csr_matrix, protocol: str):
        n_users, n_items = train.shape
        self.item_factors_ = np.zeros((n_items, 0), dtype=np.float32)
        if protocol == "random":
            self.name = "training global mean"
            self.global_mean_ = float(np.mean(train.data)) if train.nnz else 0.0
            self.item_bias_ = None
        else:
            self.name = "popularity (exact training counts)"
            self.global_mean_ = 0.0
            self.item_bias_ = (_exact_counts(train) / max(1, n_users)).astype(np.float32)

    def _project_users(self, rows):
        return np.zeros((rows.shape[0], 0), dtype=np.float32), None


class _Popularity(_Trivial):
    """A ranker without factors: every user's unseen items by one per-item score (e.g. counts)."""

    def __init__(self, scores, name: str):
        scores = np.asarray(scores, dtype=np.float32)
        self.name = name
        self.item_factors_ = np.zeros((scores.size, 0), dtype=np.float32)
        self.global_mean_ = 0.0
        self.item_bias_ = scores


def _exact_counts(train: sp.csr_matrix) -> np.ndarray:
    return np.diff(sp.csc_matrix(train).indptr).astype(np.float64)


def relevance_threshold(model, train: sp.csr_matrix, given: float | None = None) -> float:
    """The rating at or above which a held-out rating is relevant (explicit feedback).

    ``given`` if set; else the top quarter of the rating scale, ``low + 0.75 (high - low)``: 4 on a
    1-5 scale. The scale is the model's declared ``rating_range`` when it has one, else the range of
    the training ratings (an exact statistic: the threshold is a non-private figure).
    """
    if given is not None:
        if not math.isfinite(given):
            raise CommandError(f"--relevance-threshold must be a finite number, got {given}")
        return float(given)
    declared = getattr(model, "rating_range", None)
    if declared is not None:
        lo, hi = (float(v) for v in declared)
    elif train.nnz:
        lo, hi = float(train.data.min()), float(train.data.max())
    else:
        return 0.0
    return lo + RELEVANCE_QUANTILE * (hi - lo)


def _relevant(test: sp.csr_matrix, threshold: float) -> sp.csr_matrix:
    """The held-out ratings at or above ``threshold``, as 1s."""
    out = sp.csr_matrix(test, dtype=np.float32, copy=True)
    out.data = (out.data >= threshold).astype(np.float32)
    out.eliminate_zeros()
    return out


def ranking_metrics_of(
    ranker, split, threshold: float | None = None, k: int = TOP_K, users=None, fold_in_relevant: bool = False
) -> dict:
    """Recall@k and NDCG@k of a fitted model (or a :class:`_Popularity` ranker) on the split's held-out data.

    Held-out users: their targets, their fold-in history excluded (as the protocol's own metric).
    Random split of explicit ratings: relevant = held-out ratings ``>= threshold``; each user is
    projected from the same history as for the RMSE (training + validation ratings, whose items are
    excluded from the candidates). Scores are those of ``model.recommend`` (the per-user offsets do
    not change a user's ranking). ``users``: evaluate these rows only (e.g. the
    yardstick's sample, :func:`evaluation_sample`), else every user with a target.
    ``fold_in_relevant``: project each user from their history's ratings ``>= threshold`` only (the
    positives an implicit-feedback model was fitted on); every rated item is still excluded.
    A catalogue of fewer than ``k`` items is evaluated at ``k = n_items``
    (:func:`privrec.evaluation.metrics.ranking_k`), and the keys name that k (``recall@12``).
    """
    if split.protocol == "random":
        history = split.projection if split.projection is not None else split.train
        targets = _relevant(split.test, -math.inf if threshold is None else threshold)
    else:
        history, targets = split.history, split.targets
    k = ranking_k(k, targets.shape[1])
    with_target = np.flatnonzero(np.diff(targets.indptr) > 0)
    users = with_target if users is None else np.intersect1d(with_target, np.asarray(users, dtype=np.int64))
    if users.size == 0:
        return {f"recall@{k}": math.nan, f"ndcg@{k}": math.nan, "ranking_users": 0}
    rows = history[users]
    fold_in = _relevant(rows, threshold) if fold_in_relevant and threshold is not None else rows
    U = project_users(ranker, fold_in)
    V, bias = model_ranking(ranker)
    m = ranking_metrics(U, V, targets[users], rows, ks=(k,), item_bias=bias)
    return {f"recall@{k}": m[f"recall@{k}"], f"ndcg@{k}": m[f"ndcg@{k}"], "ranking_users": m["n_users"]}


def model_ranking(ranker) -> tuple[np.ndarray, np.ndarray | None]:
    """``(item factors, item term)`` such that ``<u, factors_i> + term_i`` orders the items exactly as
    the ranker's own ``recommend`` does (issue 43).

    A model's ``recommend`` need not rank by predicted rating: DPALS ranks explicit ratings by
    exposure, ``log(exposure_i) + (r_hat_ui - mean) / sigma_y`` (:mod:`privrec.models.exposure`).
    Scoring it here by predicted rating (``item_bias_`` and the factors) evaluated a ranking no user
    is served -- on the demo at eps = 5, Recall@20 0.21 against 0.59 for ``recommend``, below the
    popularity of its own released counts (0.58). The decomposition is read off the model's own
    scoring function (:func:`privrec.serving._terms.ranking_terms`: scale of the inner product,
    item term; the user term does not change a user's order). Rankers without a scoring function
    (:class:`_Popularity`) rank by their item scores."""
    if hasattr(ranker, "_score_all"):
        from ..serving._terms import ranking_terms

        try:
            terms = ranking_terms(ranker)
        except ValueError:
            pass  # not an inner product plus an item term: fall back to the factors and biases
        else:
            V = np.asarray(terms.factors, dtype=np.float32) * np.float32(terms.linear_scale)
            return V, np.asarray(terms.item_term, dtype=np.float32)
    return item_factors_of(ranker), item_bias_of(ranker)


def _ranked_users(split, threshold: float | None) -> np.ndarray:
    """The test users whose ranking is evaluated (those with at least one relevant target)."""
    if split.protocol == "random":
        targets = _relevant(split.test, -math.inf if threshold is None else threshold)
    else:
        targets = split.targets
    return np.flatnonzero(np.diff(targets.indptr) > 0)


def evaluation_sample(n_users: int, n_items: int, seed: int, size: int | None = None) -> np.ndarray | None:
    """The yardstick's evaluation users: ``None`` (all ``n_users``) when they fit
    :data:`YARDSTICK_SCORE_ENTRIES` scores (or ``size`` is 0 or at least ``n_users``), else the
    sorted positions of a uniform sample of ``size`` (default ``YARDSTICK_SCORE_ENTRIES // n_items``)
    of them, drawn with ``seed`` (a public seed: the sample adds no noise and has no privacy role)."""
    if size is None:
        size = max(1, YARDSTICK_SCORE_ENTRIES // max(int(n_items), 1))
    elif size < 0:
        raise CommandError(f"--yardstick-users must be 0 (all) or a positive number of users, got {size}")
    if size == 0 or size >= n_users:
        return None
    rng = np.random.default_rng(seed)  # sampling of evaluation users, not privacy noise
    return np.sort(rng.choice(n_users, size=size, replace=False))


def _sample_note(n_sampled: int, n_all: int, seed: int, given: int | None) -> str:
    why = "--yardstick-users" if given else f"at most {YARDSTICK_SCORE_ENTRIES:,} scored (user, item) pairs"
    return f"ranking metrics on {n_sampled:,} of {n_all:,} test users (uniform sample, seed {seed}; {why})"


def _heldout_sample(split, rows: np.ndarray):
    """``split`` with the held-out users reduced to ``rows`` (their fold-in history and targets)."""
    from dataclasses import replace

    return replace(split, history=split.history[rows], targets=split.targets[rows])


def ranking_yardstick_params(positives: sp.csr_matrix) -> dict:
    """Settings of the non-private *ranking* yardstick of explicit ratings: ``ALS(feedback="implicit")``
    (Hu et al. 2008) fitted on the training ratings at or above the relevance threshold, as 1s.

    The rule of :func:`privrec.evaluation.experiment.implicit_als_params` (alpha 3, ridge 10 with
    ``reg_exponent`` 1, 15 sweeps), with the rank set by the positives instead of the shape: about one
    parameter per positive, ``factors = min(64, max(8, nnz / (n_users + n_items)))``. Chosen on the
    validation ratings (training part fitted, validation part ranked; never the test part): the demo
    (``synthetic-skew``, 10.6 positives per user) scores Recall@20 0.683 / 0.680 / 0.550 / 0.336 at
    8 / 16 / 32 / 64 factors (exact popularity 0.570), ML-100K (47 per user) 0.397 / 0.421 / 0.402 /
    0.375 (popularity 0.206): the shape's rule (64 on both) overfits the sparse demo below popularity.
    """
    n_users, n_items = positives.shape
    per_row = positives.nnz / max(1, n_users + n_items)
    return dict(
        feedback="implicit",
        factors=int(min(64, max(8, per_row))),
        alpha=3.0,
        regularization=10.0,
        reg_exponent=1.0,
        iterations=15,
    )


def _ranking_yardstick(split, threshold: float | None, overrides: dict, seed: int, users, same: str) -> dict:
    """The ranking yardstick of explicit ratings (:func:`ranking_yardstick_params`, ``overrides`` on top),
    fitted on the training ratings ``>= threshold`` and evaluated as every ranker here: relevant =
    held-out ratings ``>= threshold``, each user folded in from their own history's positives, every
    rated item excluded."""
    from ..models import ALS

    positives = _relevant(split.train, -math.inf if threshold is None else threshold)
    kwargs = {**ranking_yardstick_params(positives), **overrides}
    t0 = time.perf_counter()
    model = ALS(**kwargs, dtype="float32", random_state=seed).fit(positives, show_progress=False)
    fit_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    metrics = ranking_metrics_of(model, split, threshold, users=users, fold_in_relevant=True)
    t = "" if threshold is None else f" >= {threshold:g}"
    return {
        "name": f"ALS implicit (Hu et al. 2008) on training ratings{t}" + same,
        "private": False,
        "params": kwargs,
        "config": dict(model.config_),
        "seed": seed,
        "metrics": metrics,
        "sliced": {},
        "fit_seconds": round(fit_seconds, 4),
        "eval_seconds": round(time.perf_counter() - t0, 4),
    }


def yardstick_als_params(params: dict, model, explicit: bool) -> dict:
    """The non-private ALS yardstick's parameters: the private model's factors / iterations when given
    (a bias-only model's factors = 0 has no ALS twin) and, for explicit ratings, its declared rating
    range (the explicit ALS's rating scale: :mod:`privrec.models.als`)."""
    als_params = {k: params[k] for k in ("factors", "iterations") if params.get(k)}
    declared = getattr(model, "rating_range", None)
    if explicit and declared is not None:
        als_params = {**als_params, "rating_range": tuple(float(v) for v in declared)}
    return als_params


def _want_als(args, method: str | None, nnz: int) -> bool:
    if method == "als":
        return False
    if args.compare_als is not None:
        return bool(args.compare_als)
    return nnz < ALS_COMPARISON_MAX_NNZ


def _baselines(
    args, split, name, method, params, model=None, private_release: bool = False, threshold: float | None = None
) -> dict:
    """Yardsticks on the same split: the trivial baseline (always), the popularity ranking of the
    model's own released noisy counts (a private model that has them), the exact popularity ranking
    (explicit ratings: its Recall@20 beside the global mean's RMSE) and non-private ALS (when wanted)."""
    explicit = split.protocol == "random"
    triv = _Trivial(split.train, split.protocol)
    ev = X.evaluate_split(triv, split)
    out: dict[str, Any] = {
        "trivial": {"name": triv.name, "private": False, "metrics": ev["metrics"], "sliced": ev["sliced"]},
    }
    counts = getattr(model, "item_counts_", None)
    if private_release and counts is not None:
        pop = _Popularity(counts, "popularity (this fit's released noisy counts)")
        out["private_popularity"] = {
            "name": pop.name,
            "private": True,
            "metrics": ranking_metrics_of(pop, split, threshold),
            "sliced": {},
        }
    if explicit:
        pop = _Popularity(_exact_counts(split.train), "popularity (exact training counts)")
        out["popularity"] = {
            "name": pop.name,
            "private": False,
            "metrics": ranking_metrics_of(pop, split, threshold),
            "sliced": {},
        }
    out["als"] = None
    if _want_als(args, method, split.train.nnz):
        als_params = yardstick_als_params(params, model, explicit)
        same = " (same factors, iterations)" if any(k in als_params for k in ("factors", "iterations")) else ""
        seed = _yardstick_seed(args)
        fitted = _fit_model(split, "als", None, None, als_params, seed, False)
        given = getattr(args, "yardstick_users", None)
        n_items = split.train.shape[1]
        sample_note = None
        if explicit:
            # explicit ALS: the rating yardstick (RMSE). Its ranking (by predicted rating) is no ranking
            # yardstick -- Recall@20 0.001 on the demo; the implicit-feedback ALS below is (issue 43)
            als, res = X.run_experiment(split, "als", params=als_params, seed=seed, dataset=name, fitted=fitted)
            metrics = dict(res["metrics"])
            ranked = _ranked_users(split, threshold)
            sample = evaluation_sample(ranked.size, n_items, seed, given)
            if sample is not None:
                sample_note = _sample_note(sample.size, ranked.size, seed, given)
            out["als_ranking"] = _ranking_yardstick(
                split, threshold, {k: v for k, v in als_params.items() if k != "rating_range"}, seed,
                None if sample is None else ranked[sample], same,
            )  # fmt: skip
            if sample_note is not None:
                out["als_ranking"]["evaluation_sample"] = sample_note
        else:
            n_held = split.targets.shape[0]
            sample = evaluation_sample(n_held, n_items, seed, given)
            ev_split = split if sample is None else _heldout_sample(split, sample)
            if sample is not None:
                sample_note = _sample_note(sample.size, n_held, seed, given)
            als, res = X.run_experiment(ev_split, "als", params=als_params, seed=seed, dataset=name, fitted=fitted)
            metrics = dict(res["metrics"])
        kind = " (explicit ratings)" if explicit else " implicit (Hu et al. 2008)"
        out["als"] = {
            "name": f"ALS{kind}" + same,
            "private": False,
            "params": als_params,
            "config": dict(getattr(als, "config_", {}) or {}),
            "seed": seed,
            "metrics": metrics,
            "sliced": res["sliced"],
            "fit_seconds": res["fit_seconds"],
            "eval_seconds": res.get("eval_seconds"),
        }
        if sample_note is not None:  # explicit: the note of the ALS ranking yardstick's rows, printed with ALS's
            out["als"]["evaluation_sample"] = sample_note
    elif method != "als" and args.compare_als is None:
        out["als_skipped"] = (
            f"training data has {split.train.nnz:,} ratings (>= {ALS_COMPARISON_MAX_NNZ:,}); "
            "pass --compare-als to fit it anyway"
        )
    return out


def _add_ranking(res: dict, model, split, args) -> float | None:
    """Explicit ratings (random protocol): add Recall@20 to ``res["metrics"]`` beside the RMSE and
    return the relevance threshold (``None`` for the held-out-users protocol, which ranks already)."""
    if split.protocol != "random":
        return None
    t0 = time.perf_counter()
    threshold = relevance_threshold(model, split.train, getattr(args, "relevance_threshold", None))
    res["metrics"] = {**res["metrics"], **ranking_metrics_of(model, split, threshold)}
    res["relevance_threshold"] = threshold
    if "eval_seconds" in res:
        res["eval_seconds"] = round(res["eval_seconds"] + time.perf_counter() - t0, 4)
    return threshold
