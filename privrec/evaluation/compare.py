"""Several recommenders on one split: one table and one plot (as Cornac's ``Experiment``).

:func:`compare` fits, on the same split of the same data,

* the private model (``DPALS``, default method ``ada-dpals`` with its automatic configuration) at
  each target ε, and beside each fit the **private popularity** ranking of that fit's own released
  noisy item counts (free post-processing of the same release; the private bias model is what the
  automatic configuration gives below its signal threshold, and the row's label then says
  ``bias-only``);
* the non-private yardsticks, each fitted on the exact training data: the trivial baseline
  (training global mean, RMSE), the exact popularity ranking, non-private ``ALS`` (explicit
  ratings: its RMSE; its ranking yardstick is ``ALS(feedback="implicit")`` on the training ratings
  at or above the relevance threshold, as ``privrec fit`` reports it);
* any other estimator with the ``implicit`` 0.7 / scikit-learn contract (``fit(user_items)`` and
  ``recommend(userids, user_items, N, filter_already_liked_items)`` returning ``(ids, scores)``),
  e.g. ``implicit.als.AlternatingLeastSquares``: Recall@k / NDCG@k of its own ``recommend``.

Metrics: RMSE (explicit ratings, models that predict ratings), Recall@k and NDCG@k with the
definitions of :mod:`privrec.evaluation.metrics` and the ranking of each model's ``recommend``
(:func:`privrec.commands._yardsticks.ranking_metrics_of`, the code ``privrec fit`` reports with).
Every metric is computed on the exact held-out data: it is a non-private figure, and the table
marks it so. With ``repeats`` > 1 every model is fitted that many times (fresh noise, another
initialisation) and the table shows mean ± std.

Splits: ``random`` (80/10/10 of the ratings, Lee et al. 2013), ``temporal`` (per user by timestamp,
:func:`privrec.data.splits.temporal_split`) and ``heldout-users`` (Liang et al. 2018; binarised,
the protocol of Last.fm and the ML-20M-sized presets).

The text table and the plot of a :class:`Comparison`: :mod:`privrec.evaluation.compare_report`.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from . import experiment as X
from .compare_report import _HIGHER_IS_BETTER as _HIGHER_IS_BETTER
from .compare_report import MARK as MARK
from .compare_report import WIDTH as WIDTH
from .compare_report import _cell as _cell
from .compare_report import _metric_header as _metric_header
from .compare_report import _split_words as _split_words
from .compare_report import _wrap as _wrap
from .compare_report import format_comparison, plot_comparison

#: the splits :func:`compare` accepts
SPLITS = ("random", "temporal", "heldout-users")
#: target epsilons of the private model by default
DEFAULT_EPSILONS = (1.0, 5.0, 20.0)
#: the non-private yardsticks by name (``yardsticks=`` of :func:`compare`)
YARDSTICKS = ("trivial", "popularity", "private-popularity", "als")
NON_PRIVATE_NOTE = (
    "every metric is computed on the exact held-out data, and the non-private models are fitted on the "
    "exact training data: the privacy guarantee of the private models does not cover these figures"
)


@dataclass
class Row:
    """One model of a comparison: its metrics over the runs (one value per run)."""

    name: str
    private: bool
    epsilon: float | None = None  # target epsilon of a private model
    epsilon_spent: list[float] = field(default_factory=list)  # the accountant's, per run
    metrics: dict[str, list[float]] = field(default_factory=dict)
    fit_seconds: list[float] = field(default_factory=list)
    note: str = ""

    def mean(self, metric: str) -> float:
        vals = [v for v in self.metrics.get(metric, []) if v is not None and math.isfinite(v)]
        return float(np.mean(vals)) if vals else math.nan

    def std(self, metric: str) -> float:
        vals = [v for v in self.metrics.get(metric, []) if v is not None and math.isfinite(v)]
        return float(np.std(vals)) if len(vals) > 1 else (0.0 if vals else math.nan)

    @property
    def privacy(self) -> str:
        if not self.private:
            return "non-private"
        spent = [e for e in self.epsilon_spent if math.isfinite(e)]
        eps = f"{max(spent):.3g}" if spent else "?"
        return f"private, eps {eps}" + (f" ({self.note})" if self.note else "")


@dataclass
class Comparison:
    """The result of :func:`compare`: rows in table order, the metrics, and the split's facts."""

    dataset: str
    split: str
    protocol: str
    metrics: tuple[str, ...]
    rows: list[Row]
    repeats: int
    delta: float | None
    relevance_threshold: float | None
    n_users: int
    n_items: int
    n_train: int
    n_test_users: int  # users with a relevant held-out item (the ranking metrics' users)
    seconds: float
    n_rmse_users: int = 0  # users with a held-out rating (the RMSE's users; explicit ratings)
    info: dict = field(default_factory=dict)
    k_note: str = ""  # set when the catalogue is smaller than the requested k (ranked at k = n_items)

    def row(self, name: str) -> Row:
        """The row named ``name`` (``KeyError`` when there is none)."""
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(f"no model named {name!r}; the rows are: {', '.join(r.name for r in self.rows)}")

    def to_frame(self) -> Any:
        """A pandas DataFrame: one row per model; ``<metric>`` (mean) and ``<metric>_std`` columns."""
        import pandas as pd

        records = []
        for r in self.rows:
            rec: dict[str, Any] = {"model": r.name, "privacy": r.privacy, "private": r.private, "epsilon": r.epsilon}
            for m in self.metrics:
                rec[m] = r.mean(m)
                rec[f"{m}_std"] = r.std(m)
            records.append(rec)
        return pd.DataFrame.from_records(records)

    def to_dict(self) -> dict:
        """JSON-ready: the private models' settings and spend at the top level; every exact figure
        (metrics, sizes, times) under ``non_private`` with a ``note``, as ``privrec fit --json``."""
        table = []
        for r in self.rows:
            entry: dict[str, Any] = {"name": r.name, "private": r.private}
            for m in self.metrics:
                if r.metrics.get(m):
                    entry[m] = {"mean": r.mean(m), "std": r.std(m), "runs": list(r.metrics[m])}
            entry["fit_seconds"] = list(r.fit_seconds)
            table.append(entry)
        models = [
            {"name": r.name, "private": r.private, "epsilon": r.epsilon, "epsilon_spent": list(r.epsilon_spent)}
            for r in self.rows
        ]
        return {
            "dataset": self.dataset,
            "split": self.split,
            "protocol": self.protocol,
            "metrics": list(self.metrics),
            "repeats": self.repeats,
            "delta": self.delta,
            "models": models,
            "non_private": {
                "note": NON_PRIVATE_NOTE,
                "relevance_threshold": self.relevance_threshold,
                "n_users": self.n_users,
                "n_items": self.n_items,
                "n_train": self.n_train,
                "n_test_users": self.n_test_users,
                "n_rmse_users": self.n_rmse_users,
                "seconds": round(self.seconds, 3),
                **({"ranking_k_note": self.k_note} if self.k_note else {}),
                "table": table,
            },
            **({"info": self.info} if self.info else {}),
        }

    def format(self) -> str:
        """The comparison as printable text (exact figures marked :data:`MARK`)."""
        return format_comparison(self)

    def plot(self, path) -> str:
        """One figure, one panel per metric, one bar per model (± std); needs matplotlib (the
        ``plots`` extra). The format follows the file's extension."""
        return plot_comparison(self, path)


# ---------------------------------------------------------------------------------------- splitting
def make_split(data, split: str = "random", seed: int = 0, heldout_users: int | None = None) -> X.Split:
    """The :class:`~privrec.evaluation.experiment.Split` of ``data`` (``Interactions``) for
    :func:`compare`: ``random`` and ``heldout-users`` as ``privrec fit``
    (:func:`~privrec.evaluation.experiment.make_split`); ``temporal`` per user by timestamp
    (:func:`privrec.data.splits.temporal_split`; test users projected from train + validation, as
    in the random split)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
    if split == "temporal":
        from ..data.splits import temporal_split

        parts = temporal_split(data)
        train = sp.csr_matrix(parts.train.matrix)
        return X.Split(
            "random",
            train,
            test=sp.csr_matrix(parts.test.matrix),
            projection=(train + sp.csr_matrix(parts.validation.matrix)).tocsr(),
            item_ids=data.item_ids,
            user_ids=data.user_ids,
            item_metadata=data.item_metadata,
            info={"split": "temporal"},
        )
    out = X.make_split(data, split, seed=seed, heldout_users=heldout_users)
    out.info.setdefault("split_seed", seed)
    return out


# ---------------------------------------------------------------------------------------- evaluation
def _ranking(ranker, split: X.Split, threshold: float | None, k: int, fold_in_relevant: bool = False) -> dict:
    from ..commands._yardsticks import ranking_metrics_of

    m = ranking_metrics_of(ranker, split, threshold, k=k, fold_in_relevant=fold_in_relevant)
    return {f"recall@{k}": m[f"recall@{k}"], f"ndcg@{k}": m[f"ndcg@{k}"]}


def _targets_and_history(split: X.Split, threshold: float | None) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    if split.protocol == "random":
        history = split.projection if split.projection is not None else split.train
        t = sp.csr_matrix(split.test, dtype=np.float32, copy=True)
        t.data = (t.data >= (-math.inf if threshold is None else threshold)).astype(np.float32)
        t.eliminate_zeros()
        return t, history
    return split.targets, split.history


def foreign_ranking_metrics(model, split: X.Split, threshold: float | None = None, k: int = 20) -> dict:
    """Recall@k and NDCG@k of an estimator with the ``implicit`` 0.7 contract, from its own
    ``recommend(userids, user_items, N=k, filter_already_liked_items=True)`` (batched), with the
    definitions of :mod:`privrec.evaluation.metrics`. Random / temporal splits: the training users'
    rows (their history: training + validation ratings, excluded from the candidates); held-out
    users: ``recalculate_user=True`` from their fold-in history. A catalogue of fewer than ``k``
    items is ranked at ``k = n_items`` (:func:`privrec.evaluation.metrics.ranking_k`; the keys say it)."""
    from .metrics import ranking_k
    from .topk import hits_of

    targets, history = _targets_and_history(split, threshold)
    k = ranking_k(k, targets.shape[1])
    users = np.flatnonzero(np.diff(targets.indptr) > 0)
    if users.size == 0:
        return {f"recall@{k}": math.nan, f"ndcg@{k}": math.nan}
    rows = sp.csr_matrix(history[users], dtype=np.float32)
    kwargs: dict[str, Any] = {"N": k, "filter_already_liked_items": True}
    if split.protocol != "random":
        kwargs["recalculate_user"] = True
    ids, _ = model.recommend(users, rows, **kwargs)
    ids = np.asarray(ids, dtype=np.int64).reshape(users.size, -1)[:, :k]
    if ids.shape[1] < k:
        ids = np.hstack([ids, np.full((users.size, k - ids.shape[1]), -1, dtype=np.int64)])
    hits = hits_of(ids, targets[users]).astype(np.float64)
    n_t = np.diff(targets[users].indptr).astype(np.float64)
    denom = np.minimum(k, n_t)
    disc = 1.0 / np.log2(np.arange(k, dtype=np.float64) + 2.0)
    idcg = np.cumsum(disc)[denom.astype(np.int64) - 1]
    return {
        f"recall@{k}": float(np.mean(hits.sum(axis=1) / denom)),
        f"ndcg@{k}": float(np.mean((hits * disc).sum(axis=1) / idcg)),
    }


def _rmse(model, split: X.Split) -> float:
    return float(X.evaluate_split(model, split)["metrics"]["rmse"])


def _is_privrec_model(model) -> bool:
    return hasattr(model, "_project_users") and hasattr(model, "item_factors_")


# ---------------------------------------------------------------------------------------- models
def _fresh(model, seed: int | None):
    """A new unfitted copy of ``model`` for one run: a factory is called with the run's seed; an
    estimator with ``get_params`` is cloned (its ``random_state`` set when it has one and the run is
    seeded); anything else is deep-copied."""
    if callable(model) and not hasattr(model, "fit"):
        return model(seed)
    if hasattr(model, "get_params"):
        from sklearn.base import clone

        out = clone(model)
        if seed is not None and "random_state" in out.get_params():
            out.set_params(random_state=seed)
        return out
    return copy.deepcopy(model)


def _fit(model, train: sp.csr_matrix) -> float:
    import inspect

    t0 = time.perf_counter()
    params = inspect.signature(model.fit).parameters
    if "show_progress" in params:
        model.fit(train, show_progress=False)
    else:
        model.fit(train)
    return time.perf_counter() - t0


def _run_seed(random_state: int | None, run: int) -> int | None:
    return None if random_state is None else int(random_state) + run


def compare(
    data,
    models: Mapping[str, Any] | None = None,
    *,
    epsilons: Sequence[float] = DEFAULT_EPSILONS,
    delta: float | None = None,
    method: str = "ada-dpals",
    split: str | X.Split = "random",
    seed: int = 0,
    heldout_users: int | None = None,
    repeats: int = 1,
    random_state: int | None = None,
    yardsticks: Sequence[str] = YARDSTICKS,
    private_params: Mapping[str, Any] | None = None,
    relevance_threshold: float | None = None,
    k: int = 20,
    dataset: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Comparison:
    """Fit and evaluate several models on one split; see the module docstring.

    Parameters
    ----------
    data : ``Interactions`` (e.g. ``privrec.data.load_dataset("ml-100k", data_dir=...)``) or a
        dataset name (loaded with :func:`privrec.data.load_dataset`).
    models : extra estimators by name: an unfitted estimator (cloned for each run) or a factory
        ``seed -> estimator``. privrec models are evaluated like the built-in rows (RMSE when they
        predict ratings); any other estimator by its own ``recommend`` (Recall@k, NDCG@k).
    epsilons : target ε of the private model ``DPALS(method=method)``; ``()`` for none.
    delta : target δ (default: the protocol's, 1e-5 for ratings, 1/n for held-out users).
    split : ``"random"``, ``"temporal"``, ``"heldout-users"``, or a ready
        :class:`~privrec.evaluation.experiment.Split`. ``seed`` seeds the random splits.
    repeats : fits per model; the table shows mean ± std over them.
    random_state : ``None`` (default): private noise from OS entropy, non-private initialisations
        seeded by the run number. An int seeds run ``r`` with ``random_state + r`` -- reproducible,
        and it **voids the privacy guarantee** for anyone who knows it (experiments only).
    yardsticks : which of :data:`YARDSTICKS` to include.
    private_params : extra ``DPALS`` parameters (e.g. ``{"factors": 8}`` or ``rating_range``).
    relevance_threshold : explicit ratings: a held-out rating ``>=`` this is relevant for the
        ranking metrics (default: the top quarter of the rating scale, 4 on 1-5).
    k : cut-off of Recall@k and NDCG@k; a catalogue of fewer than ``k`` items is ranked at
        ``k = n_items`` (the metric names say it, e.g. ``recall@12``, and ``k_note`` states why).
    """
    t_start = time.perf_counter()
    say = progress or (lambda _msg: None)
    if isinstance(data, str):
        dataset = dataset or data
        data = X.load_data(data)
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    eps_list = [float(e) for e in epsilons]
    bad = [e for e in eps_list if not e > 0]
    if bad:
        raise ValueError(f"every epsilon must be > 0, got {bad[0]:g}")
    unknown = sorted(set(yardsticks) - set(YARDSTICKS))
    if unknown:
        raise ValueError(f"unknown yardstick(s) {', '.join(unknown)}; choose from {', '.join(YARDSTICKS)}")
    for name, m in (models or {}).items():
        if not (hasattr(m, "fit") or callable(m)):
            raise ValueError(f"model {name!r} is neither an estimator with fit() nor a factory seed -> estimator")
    if isinstance(split, X.Split):
        sp_ = split
        split_name = str(split.info.get("split", split.protocol))
    else:
        sp_ = make_split(data, split, seed=seed, heldout_users=heldout_users)
        split_name = split
    explicit = sp_.protocol == "random"
    if explicit and sp_.train.nnz and bool(np.all(sp_.train.data == sp_.train.data[0])):
        explicit_ratings = False  # a file of 1s: nothing to predict
    else:
        explicit_ratings = explicit
    if delta is None:
        delta = X.default_delta(sp_)
    from .metrics import ranking_k, ranking_k_note

    k_note = ranking_k_note(k, sp_.train.shape[1]) or ""
    k = ranking_k(k, sp_.train.shape[1])  # a catalogue of fewer than k items: ranked at k = n_items
    from ..commands._yardsticks import relevance_threshold as _threshold

    rating_range = (private_params or {}).get("rating_range")
    holder = type("_Declared", (), {"rating_range": rating_range})()
    threshold = _threshold(holder, sp_.train, relevance_threshold) if explicit_ratings else None
    metrics: tuple[str, ...] = (("rmse",) if explicit_ratings else ()) + (f"recall@{k}", f"ndcg@{k}")

    rows: dict[str, Row] = {}

    def row(name: str, private: bool, epsilon: float | None = None, note: str = "") -> Row:
        if name not in rows:
            rows[name] = Row(name, private, epsilon, note=note)
        return rows[name]

    def record(r: Row, values: dict, seconds: float | None = None, spent: float | None = None) -> None:
        for key, v in values.items():
            r.metrics.setdefault(key, []).append(float(v))
        if seconds is not None:
            r.fit_seconds.append(round(seconds, 4))
        if spent is not None:
            r.epsilon_spent.append(float(spent))

    from ..commands._yardsticks import _exact_counts, _Popularity, _Trivial

    # yardsticks that do not depend on the run: computed once
    if "trivial" in yardsticks and explicit_ratings:
        triv = _Trivial(sp_.train, "random")
        record(row("trivial: training global mean", False), {"rmse": _rmse(triv, sp_)})
    if "popularity" in yardsticks:
        pop = _Popularity(_exact_counts(sp_.train), "popularity (exact training counts)")
        record(row(pop.name, False), _ranking(pop, sp_, threshold, k))

    for run in range(repeats):
        rs = _run_seed(random_state, run)
        for eps in eps_list:
            say(f"{method} eps={eps:g} (run {run + 1}/{repeats})")
            model = X.make_model(method, eps, delta, dict(private_params or {}), rs, sp_.protocol)
            seconds = _fit(model, sp_.train)
            label = model.describe()["label"] if hasattr(model, "describe") else method
            spent = float(X.privacy_summary(model)["epsilon_spent"])
            values = _ranking(model, sp_, threshold, k)
            if explicit_ratings:
                values["rmse"] = _rmse(model, sp_)
            name = f"{label}, target eps {eps:g}"
            record(row(name, True, eps), values, seconds, spent)
            counts = getattr(model, "item_counts_", None)
            if "private-popularity" in yardsticks and counts is not None:
                pop = _Popularity(counts, "")
                pname = f"private popularity (noisy counts of the eps {eps:g} fit)"
                record(row(pname, True, eps, note="same release"), _ranking(pop, sp_, threshold, k), None, spent)
        if "als" in yardsticks:
            als_seed = run if rs is None else rs  # the yardstick adds no noise: a known seed costs nothing
            say(f"non-private ALS (run {run + 1}/{repeats})")
            als = X.make_yardstick(sp_.train.shape, sp_.protocol, None, als_seed)
            seconds = _fit(als, sp_.train)
            if explicit_ratings:
                record(row("ALS (explicit ratings)", False), {"rmse": _rmse(als, sp_)}, seconds)
                from ..commands._yardsticks import ranking_yardstick_params
                from ..models import ALS

                positives = _positives(sp_.train, threshold)
                ranker = ALS(**ranking_yardstick_params(positives), dtype="float32", random_state=als_seed)
                seconds = _fit(ranker, positives)
                name = f"ALS implicit (Hu et al. 2008) on training ratings >= {threshold:g}"
                record(row(name, False), _ranking(ranker, sp_, threshold, k, fold_in_relevant=True), seconds)
            else:
                name = "ALS implicit (Hu et al. 2008)" if sp_.protocol == "heldout-users" else "ALS"
                record(row(name, False), _ranking(als, sp_, threshold, k), seconds)
        for name, spec in (models or {}).items():
            say(f"{name} (run {run + 1}/{repeats})")
            model = _fresh(spec, rs if rs is not None else run)
            if _is_privrec_model(model):
                seconds = _fit(model, sp_.train)
            else:  # e.g. implicit's ALS, which asks for single-threaded BLAS around its own threads
                from threadpoolctl import threadpool_limits

                with threadpool_limits(1, "blas"):
                    seconds = _fit(model, sp_.train)
            if _is_privrec_model(model):
                values = _ranking(model, sp_, threshold, k)
                if explicit_ratings and getattr(model, "feedback", "explicit") == "explicit":
                    values["rmse"] = _rmse(model, sp_)
            else:
                values = foreign_ranking_metrics(model, sp_, threshold, k)
            own_spent: float | None = None
            if getattr(model, "privacy_report", None) is not None:
                eps_spent = float(X.privacy_summary(model)["epsilon_spent"])
                own_spent = eps_spent if math.isfinite(eps_spent) else None
            record(row(name, own_spent is not None), values, seconds, own_spent)

    targets, _ = _targets_and_history(sp_, threshold)
    return Comparison(
        dataset=dataset or getattr(data, "name", None) or "data",
        split=split_name,
        protocol=sp_.protocol,
        metrics=metrics,
        rows=_ordered(list(rows.values())),
        repeats=int(repeats),
        delta=delta if eps_list else None,
        relevance_threshold=threshold,
        n_users=int(sp_.train.shape[0]),
        n_items=int(sp_.train.shape[1]),
        n_train=int(sp_.train.nnz),
        n_test_users=int(np.count_nonzero(np.diff(targets.indptr))),
        seconds=time.perf_counter() - t_start,
        n_rmse_users=int(np.count_nonzero(np.diff(sp_.test.indptr)))
        if explicit_ratings and sp_.test is not None
        else 0,
        info=dict(sp_.info),
        k_note=k_note,
    )


def _positives(train: sp.csr_matrix, threshold: float | None) -> sp.csr_matrix:
    out = sp.csr_matrix(train, dtype=np.float32, copy=True)
    out.data = (out.data >= (-math.inf if threshold is None else threshold)).astype(np.float32)
    out.eliminate_zeros()
    return out


def _ordered(rows: list[Row]) -> list[Row]:
    """Private rows first (by target ε, each fit before its popularity row), then the rest as added."""
    private = sorted(
        (r for r in rows if r.private and r.epsilon is not None),
        key=lambda r: (r.epsilon, r.name.startswith("private popularity")),
    )
    return private + [r for r in rows if r not in private]
