"""One experiment = load -> split -> fit -> evaluate -> privacy report (Krichene et al., ICML 2023, App. D.1).

Shared by the CLI (``privrec fit`` / ``evaluate``) and the benchmark scripts so both report the
same numbers the same way. Methods by name (Krichene et al., App. D.1, Table 2):

* ``als`` — non-private ALS (``privrec.models.ALS``), the reference of every comparison;
* ``dpals-uniform``, ``dpals-tail``, ``ada-dpals`` — DPALS with the SSP item solver and uniform
  sampling / tail sampling / adaptive weights;
* ``dpsgd-uniform``, ``dpsgd-tail``, ``ada-dpsgd`` — the same allocations with the noisy-GD solver.

Protocols: ``random`` (80/10/10 rating split, RMSE; users projected from their train history)
and ``heldout-users`` (binarised, fold-in history / targets of held-out users, Recall@20, NDCG@20).
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._io import json_safe as json_safe  # re-exported: the CLI, benchmarks and tests use X.json_safe
from .protocols import evaluate_heldout, evaluate_ratings

METHODS = ("als", "dpals-uniform", "dpals-tail", "ada-dpals", "dpsgd-uniform", "dpsgd-tail", "ada-dpsgd")
PRIVATE_METHODS = METHODS[1:]
PROTOCOLS = ("random", "heldout-users")
DEFAULT_DATASET = "synthetic-skew"
#: datasets whose paper protocol is top-k on held-out users (Krichene et al. 2023, App. D.1); others use
#: ratings / RMSE
_TOPK_DATASETS = ("ml20m-like", "msd-like", "ml-20m", "msd", "lastfm-2k", "hetrec2011-lastfm-2k")


#: Non-private ALS reference on binarised held-out-users data. The authors' reference implementation
#: (ML20M) uses dim 64, ridge 40, gravity 0.2 on unobserved pairs, 15 sweeps, no biases / centering.
#: Ridge 40 is not the best non-private setting here: tuned on the *validation* users of ml20m-like (full size,
#: seed 0; ``python benchmarks/bench_tradeoff.py --tune-als``, grid in
#: ``benchmarks/results/tradeoff_ds-ml20m-like@1.json["als_tuning"]``) ridge 200 scores higher, so the
#: reference is a tuned ceiling rather than an under-regularised model. Test users never chose it.
HELDOUT_ALS_DEFAULTS = dict(
    biases=False, center=False, factors=64, regularization=200.0, unobserved_weight=0.2, iterations=15
)


def implicit_als_params(n_users: int, n_items: int) -> dict:
    """Settings of the non-private *ranking yardstick* for implicit feedback (the CLI's ``ALS`` row
    on held-out-users data): ``ALS(feedback="implicit")`` (Hu et al. 2008) by a fixed rule.

    The rule reads only the public shape, is fixed before any run and never looks at test users:

    * ``factors = min(64, max(8, min(n_users, n_items) // 10))`` (64, the rank of the reference
      settings, unless the data is too small to support it);
    * ``alpha = 3`` (an observed pair weighs 4, an unobserved one 1), ``regularization = 10`` with
      ``reg_exponent = 1`` (frequency-scaled ridge, normalised per side), 15 sweeps of 3
      warm-started CG steps (ALS's default solver).

    alpha and the ridge were chosen once on the *validation* users (seed 0, 15 sweeps, d = 64) of
    binarised Last.fm, ML-100K and ml20m-like (scale 0.1) from alpha in {1, 3, 10, 30} x ridge in
    {1, 3, 10, 30, 100}: the choice scores Recall@20 0.307 / 0.412 / 0.338, within 5% of the best
    explicit-ALS-with-gravity grid point on each (0.313 / 0.391 / 0.352; the tuned ALS of
    ``examples/lastfm.py`` is that grid's Last.fm winner), so the yardstick is a tuned model on
    datasets it was not tuned for rather than a straw man.
    """
    factors = int(min(64, max(8, min(int(n_users), int(n_items)) // 10)))
    return dict(
        feedback="implicit",
        factors=factors,
        alpha=3.0,
        regularization=10.0,
        reg_exponent=1.0,
        iterations=15,
    )


def make_yardstick(shape: tuple[int, int], protocol: str, params: dict | None = None, seed: int | None = 0):
    """The non-private ``ALS`` yardstick of a comparison: explicit ALS for rating prediction
    (``random`` protocol; its defaults), :func:`implicit_als_params` for held-out users (implicit
    feedback). ``params`` (e.g. the private model's ``factors`` / ``iterations``) override the
    rule; ``seed`` seeds the initial item factors (no noise is added: no privacy impact)."""
    from ..models import ALS

    kwargs: dict[str, Any] = implicit_als_params(*shape) if protocol == "heldout-users" else {}
    kwargs.update({k: v for k, v in (params or {}).items() if v is not None})
    return ALS(**kwargs, dtype="float32", random_state=seed)


#: synthetic presets whose target sizes are those of the already-binarised benchmark data (Krichene et al.
#: 2023, App. D, Table 1)
_PROCESSED_PRESETS = ("ml20m-like", "msd-like")


def default_protocol(dataset: str) -> str:
    """The paper's protocol for a dataset name (held-out users for ML20M / MSD / Last.fm)."""
    from ..data.registry import ALIASES

    name = ALIASES.get(str(dataset).lower(), str(dataset).lower()) if dataset else dataset
    return "heldout-users" if name in _TOPK_DATASETS else "random"


@dataclass
class Split:
    """A dataset split for one protocol; matrices share the item columns of ``train``."""

    protocol: str
    train: sp.csr_matrix
    test: sp.csr_matrix | None = None  # random protocol
    history: sp.csr_matrix | None = None  # held-out users: fold-in
    targets: sp.csr_matrix | None = None  # held-out users: targets
    projection: sp.csr_matrix | None = None  # random protocol: history users are projected from
    validation_history: sp.csr_matrix | None = None  # held-out users: validation fold-in (tuning only)
    validation_targets: sp.csr_matrix | None = None  # held-out users: validation targets (tuning only)
    item_ids: np.ndarray | None = None
    user_ids: np.ndarray | None = None
    item_metadata: Any = None
    info: dict = field(default_factory=dict)


def load_data(dataset: str | None = None, data_dir=None, scale: float | None = None, seed: int = 0):
    """Load a dataset by name as ``Interactions`` (``privrec.data.load_dataset``).

    ``scale`` < 1 shrinks a synthetic preset's users and interactions (catalogue kept);
    ``seed`` seeds the generator of synthetic presets.
    """
    from ..data import PRESETS, load_dataset

    name = dataset or DEFAULT_DATASET
    kwargs = {"data_dir": data_dir}
    if name in PRESETS:
        kwargs.update(scale=1.0 if scale is None else scale, random_state=seed)
    elif scale is not None and scale != 1.0:
        raise ValueError(
            f"--scale applies to the synthetic presets only ({', '.join(sorted(PRESETS))}), not to {name!r}"
        )
    return load_dataset(name, **kwargs)


def make_split(
    data, protocol: str, seed: int = 0, heldout_users: int | None = None, binarize_threshold: float | None = None
) -> Split:
    """Split ``Interactions`` by ``protocol`` with :mod:`privrec.data.splits` (Krichene et al. 2023, App. D.1).

    ``random``: 80/10/10 of the ratings; test users are projected from train + validation history (as
    in the authors' reference implementation), so ``Split.train`` (the fitting data) is the train part
    and the projection history is train + validation (``Split.info["projection"]``).
    ``heldout-users``: ``heldout_users`` validation and test users (default
    ``min(10000, n_users // 10)``); ratings binarised at > 3.5, play-count data (every value a count)
    and the presets sized like processed data (``ml20m-like``, ``msd-like``) at > 0; the test fold-in
    history and targets are used for evaluation, the validation fold (``Split.validation_history`` /
    ``validation_targets``) only for tuning. ``binarize_threshold`` overrides that threshold (e.g. 0
    for a file whose every row is a positive interaction).
    """
    from ..data.splits import heldout_users_split, random_split

    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; choose from {', '.join(PROTOCOLS)}")
    if protocol == "random":
        parts = random_split(data, random_state=seed)
        meta = dict(item_ids=data.item_ids, user_ids=data.user_ids, item_metadata=data.item_metadata)
        train = _m(parts.train)
        return Split(protocol, train, test=_m(parts.test), projection=(train + _m(parts.validation)).tocsr(), **meta)
    n_held = heldout_users if heldout_users is not None else max(1, min(10_000, data.n_users // 10))
    threshold = _binarize_threshold(data) if binarize_threshold is None else binarize_threshold
    held = heldout_users_split(data, n_held, binarize_threshold=threshold, random_state=seed)
    tr = held.train
    return Split(
        protocol,
        _m(tr),
        history=_m(held.test.history),
        targets=_m(held.test.targets),
        validation_history=_m(held.validation.history),
        validation_targets=_m(held.validation.targets),
        item_ids=tr.item_ids,
        user_ids=tr.user_ids,
        item_metadata=tr.item_metadata,
        info={"n_heldout": n_held, "binarize_threshold": threshold},
    )


def _binarize_threshold(data) -> float:
    """Ratings are binarised at > 3.5; play counts and the processed-sized presets at > 0."""
    values = np.asarray(data.matrix.data)
    counts_data = values.size > 0 and bool(np.all(values == np.round(values))) and float(values.max()) > 5.0
    # presets sized like the *processed* data (the ML20M / MSD sizes of Krichene et al., Table 1, are
    # after binarisation):
    # every interaction is a positive, so binarising again at 3.5 would shrink them below the target
    processed_sized = getattr(data, "name", None) in _PROCESSED_PRESETS
    return 0.0 if counts_data or processed_sized else 3.5


def _m(x):
    if x is None:
        return None
    return sp.csr_matrix(getattr(x, "matrix", x))


def make_model(
    method: str,
    epsilon: float | None = None,
    delta: float | None = None,
    params: dict | None = None,
    seed: int | None = None,
    protocol: str = "random",
):
    """Instantiate the estimator for ``method`` with only the parameters it accepts.

    ``seed`` fixes initialisation *and* the privacy noise of private methods (experiments only:
    a known seed voids the guarantee); ``None`` draws noise from OS entropy.
    """
    from ..models import ALS, DPALS

    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    params = {k: v for k, v in (params or {}).items() if v is not None}
    cls: type[ALS] | type[DPALS]
    kwargs: dict[str, Any]
    if method == "als":
        cls, kwargs = ALS, {}
        if protocol == "heldout-users":
            kwargs.update(HELDOUT_ALS_DEFAULTS)
    else:
        cls = DPALS
        if epsilon is None or delta is None:
            raise ValueError(f"method {method} needs --epsilon and --delta")
        kwargs = {"method": method, "epsilon": epsilon, "delta": delta}
        if protocol == "heldout-users":
            # binarised implicit data: no centering (every label is 1), gravity on unobserved pairs
            # (the authors' reference implementation, ML20M), the released noisy counts as a popularity
            # prior; the rest automatic
            kwargs.update(feedback="implicit", unobserved_weight=0.2)
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self"}
    bad = sorted(set(params) - accepted)
    if bad:
        raise ValueError(f"method {method} does not accept parameter(s): {', '.join(bad)}")
    kwargs.update(params)
    if "dtype" in accepted and "dtype" not in params:
        kwargs["dtype"] = "float32"  # a string keeps the saved parameters JSON-serialisable
    if "random_state" in accepted:
        kwargs["random_state"] = seed
    return cls(**kwargs)


def privacy_summary(model, delta: float | None = None, pld: bool = True) -> dict:
    """``epsilon_spent`` and the ledger report of a fitted model (non-private -> inf, no events).

    epsilon always comes from the accountant over the model's recorded DpEvents; ``pld=False``
    skips the (slower) PLD cross-check and reports the RDP accountant's epsilon only.
    """
    fn = getattr(model, "privacy_report", None)
    if fn is None:
        return {"epsilon_spent": "inf", "privacy_events": {"events": [], "epsilon": "inf", "note": "non-private"}}
    ledger = getattr(model, "ledger_", None)
    if not pld and ledger is not None:
        report = ledger.report(
            delta if delta is not None else model.delta,
            include_pld=False,
            accountant=getattr(model, "accountant", "rdp"),
        )
    else:
        report = fn()
    eps = report.get("epsilon", report.get("epsilon_rdp"))
    return {"epsilon_spent": eps, "privacy_events": report}


def evaluate_split(model, split: Split, reference=None, k: int = 20, paper_sliced: bool = False) -> dict:
    """Metrics of a fitted model on a :class:`Split` (protocols module); held-out users are ranked
    at ``k``, or at ``k = n_items`` on a smaller catalogue (the keys name the k used, ``recall@12``)."""
    if split.protocol == "random":
        history = split.projection if split.projection is not None else split.train
        return evaluate_ratings(model, split.train, split.test, reference=reference, history=history)
    return evaluate_heldout(
        model, split.train, split.history, split.targets, k=k, paper_sliced=paper_sliced, reference=reference
    )


def run_experiment(
    split: Split,
    method: str,
    epsilon=None,
    delta=None,
    params=None,
    seed=None,
    reference=None,
    evaluate: bool = True,
    dataset: str | None = None,
    paper_sliced: bool = False,
    pld: bool = True,
    show_progress: bool = False,
    fitted: tuple | None = None,
) -> tuple[Any, dict]:
    """Fit ``method`` on ``split.train`` and evaluate it; returns ``(model, result dict)``.

    ``fitted = (model, fit_seconds)`` skips the fit and evaluates a model already fitted on
    ``split.train`` with the same method / parameters / seed (e.g. the winner of a validation grid).

    The result holds ``dataset, method, protocol, epsilon, delta, epsilon_spent, privacy_events,
    metrics, sliced, fit_seconds`` (+ ``eval_seconds``), ready for ``json.dumps``.
    """
    if delta is None and method != "als":
        delta = default_delta(split)
    if fitted is not None:
        model, fit_s = fitted
    else:
        model = make_model(method, epsilon, delta, params, seed, split.protocol)
        t0 = time.perf_counter()
        if "show_progress" in inspect.signature(model.fit).parameters:
            model.fit(split.train, show_progress=bool(show_progress))  # the model's own tqdm bar over its sweeps
        else:
            model.fit(split.train)
        fit_s = time.perf_counter() - t0
    out = {
        "dataset": dataset,
        "method": method,
        "protocol": split.protocol,
        "epsilon": None if method == "als" else epsilon,
        "delta": None if method == "als" else delta,
        "n_users": int(split.train.shape[0]),
        "n_items": int(split.train.shape[1]),
        "n_train": int(split.train.nnz),
        "fit_seconds": round(fit_s, 4),
        **privacy_summary(model, delta, pld=pld),
    }
    if evaluate:
        t1 = time.perf_counter()
        ev = evaluate_split(model, split, reference=reference, paper_sliced=paper_sliced)
        out.update(
            metrics=ev["metrics"],
            sliced=ev["sliced"],
            bucket_items=ev["bucket_items"],
            eval_seconds=round(time.perf_counter() - t1, 4),
        )
    return model, out


def default_delta(split: Split) -> float:
    """Krichene et al. 2023, App. D.1: delta = 1e-5 for rating prediction, 1/n (n = training users) for top-k."""
    if split.protocol == "random":
        return 1e-5
    return 1.0 / max(2, split.train.shape[0])
