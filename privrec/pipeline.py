"""The one private-fit pipeline shared by DP-ALS and the multi-task estimators.

Krichene et al. (ICML 2023): App. D.1 (private counts and centering), Sec. 4 (adaptive weights),
Algorithm 3 (the alternating fit) and Thm 3.3 / Sec. 2.2 (the accounting). The stages, in the only
order data flows through them:

1. **plan** -- the labelled DpEvents of the whole fit, from public settings and two noise scales
   (``c`` for pre-processing, ``s`` for training); :meth:`PrivatePipeline.calibrate` finds the
   scales with :func:`privrec.privacy.calibrate_with_split` so that the composition meets
   (epsilon, delta) under the chosen accountant;
2. **counts** (:meth:`~PrivatePipeline.release_counts`) and **centering**
   (:meth:`~PrivatePipeline.release_mean`) -- Gaussian releases recorded in the ledger;
3. **head** (:meth:`~PrivatePipeline.head`) and **allocation**
   (:meth:`~PrivatePipeline.allocate`) -- post-processing of the released counts and each user's
   own row, no privacy cost;
4. **solve** -- the caller runs its solver(s) and records each result (:meth:`~PrivatePipeline.record`);
5. **ledger check** (:meth:`~PrivatePipeline.finish`) -- the recorded events must equal the plan,
   so calibration and accounting cannot drift apart.

With ``epsilon = inf`` the pipeline is exact: counts and mean are computed without noise or
sampling, weights are all ones, and nothing is recorded except the non-private solver events.

Every per-user sample (counts, mean, uniform / tail allocation) is drawn with a secret key from
``rng`` and the user's stable identity (``user_keys``: :func:`privrec.allocation.stable_user_keys`
of the users' ids; the row index for a bare matrix, whose row index is the id), so removing one
user changes no other user's sample.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import dp_accounting
import numpy as np
import scipy.sparse as sp

from . import allocation
from .privacy import PrivacyLedger, calibrate_noise_multiplier, calibrate_with_split, compose, gaussian_event
from .privacy.calibration import SplitCalibration
from .privacy.mechanisms import Release

#: labelled events of a plan: [(label, DpEvent)]
Plan = list[tuple[str, dp_accounting.DpEvent]]

ALLOCATIONS = ("uniform", "tail", "adaptive", "full")


class PrivatePipeline:
    """Counts -> centering -> head -> allocation -> calibrated plan -> solve -> ledger check.

    Parameters
    ----------
    epsilon, delta : the target guarantee (``epsilon = inf``: the exact, non-private pipeline).
    pre_labels : labels of the pre-processing releases, in order; each is one Gaussian at the
        count scale ``c`` (e.g. ``["item counts", "global mean: sum", "global mean: count"]``).
    train_plan : ``s -> [(label, DpEvent)]``, the training events at training scale ``s``
        (empty list when nothing is trained).
    count_fraction : share of the budget for pre-processing (see ``calibrate_with_split``).
    accountant : ``"pld"`` or ``"rdp"`` (calibration and the report use the same one).
    rng : the noise generator (``None`` = OS entropy; a known seed voids the guarantee).
    """

    def __init__(
        self,
        *,
        epsilon: float,
        delta: float,
        pre_labels: list[str],
        train_plan: Callable[[float], Plan],
        count_fraction: float,
        accountant: str = "rdp",
        rng: np.random.Generator,
        mean_ratio: float = 1.0,
    ):
        self.epsilon = float(epsilon)
        self.delta = float(delta)
        self.pre_labels = list(pre_labels)
        self.train_plan = train_plan
        self.count_fraction = float(count_fraction)
        self.accountant = accountant
        self.rng = rng
        #: noise multiplier of the global-mean releases relative to the counts' (> 1: the scalar
        #: mean needs far less precision than the per-item counts, so it takes a smaller share)
        self.mean_ratio = float(mean_ratio)
        self.private = not math.isinf(self.epsilon)
        self.ledger = PrivacyLedger()
        self.count_scale = 0.0
        self.train_scale = 0.0

    # ------------------------------------------------------------------ 1. plan
    def planned_events(self, count_scale: float, train_scale: float) -> Plan:
        """The fit's events at the two scales (pre-processing first, then training)."""
        pre = [(label, gaussian_event(count_scale * self._pre_ratio(label))) for label in self.pre_labels]
        return pre + list(self.train_plan(train_scale))

    def _pre_ratio(self, label: str) -> float:
        """Multiplier of a pre-processing release relative to the count scale."""
        return self.mean_ratio if label.startswith("global mean") else 1.0

    def calibrate(self) -> SplitCalibration:
        """Noise scales meeting (epsilon, delta) over exactly the planned events (0 and 0 when not private)."""
        if not self.private:
            return SplitCalibration(0.0, 0.0, self.count_fraction, math.inf, self.delta)

        def build_count(c: float) -> dp_accounting.DpEvent:
            return compose(gaussian_event(c * self._pre_ratio(label)) for label in self.pre_labels)

        def build_train(s: float) -> dp_accounting.DpEvent:
            return compose(ev for _, ev in self.train_plan(s))

        trains = bool(self.train_plan(1.0))
        if not trains:  # nothing trained (e.g. a popularity prior): pre-processing takes it all
            c = calibrate_noise_multiplier(self.epsilon, self.delta, build_count, self.accountant)
            cal = SplitCalibration(c, 0.0, 1.0, math.nan, self.delta)
        elif not self.pre_labels:
            cal = calibrate_with_split(self.epsilon, self.delta, 0.0, None, build_train, accountant=self.accountant)
        else:
            cal = calibrate_with_split(
                self.epsilon, self.delta, self.count_fraction, build_count, build_train, accountant=self.accountant
            )
        self.count_scale, self.train_scale = cal.count_scale, cal.train_scale
        return cal

    def use_calibration(self, cal: SplitCalibration | None) -> SplitCalibration:
        """Take the scales of an earlier :meth:`calibrate` of the same settings (a fit's plan);
        calibrates when ``cal`` is None."""
        if cal is None:
            return self.calibrate()
        self.count_scale, self.train_scale = cal.count_scale, cal.train_scale
        return cal

    # ------------------------------------------------------------------ 2. counts, centering
    def release_counts(
        self,
        user_items: sp.csr_matrix,
        count_sample: int,
        label: str = "item counts",
        user_keys: np.ndarray | None = None,
    ) -> np.ndarray:
        """Per-column user counts: noisy and sampled when private (App. D.1), exact otherwise.

        ``user_keys``: one stable sampling key per row (:func:`privrec.allocation.stable_user_keys`
        of the users' ids), so each user's sample is independent of the other users; ``None``: the
        row index (the id of a bare matrix)."""
        if not self.private:
            return np.diff(user_items.tocsc().indptr).astype(np.float64)
        return self.release_sampled_counts(
            lambda key: allocation.sampled_item_counts(user_items, count_sample, key, user_keys=user_keys),
            count_sample,
            label,
        )

    def release_sampled_counts(
        self, sampled_counts: Callable[[int], np.ndarray], count_sample: int, label: str = "item counts"
    ) -> np.ndarray:
        """The private counts from ``sampled_counts(key)`` -- the exact per-item counts of the per-user
        samples drawn with sampling ``key`` (computed in one piece or summed over blocks of users)."""
        exact = sampled_counts(allocation.sampling_key(self.rng))
        stat = allocation.release_item_counts(exact, count_sample, self.count_scale, self.rng, label=label)
        self.record(stat)
        return np.asarray(stat.value, dtype=np.float64)

    def release_mean(
        self,
        user_items: sp.csr_matrix,
        count_sample: int,
        rating_bound: float,
        rating_range: tuple[float, float] | None = None,
        label: str = "global mean",
        user_keys: np.ndarray | None = None,
    ) -> float:
        """Global mean rating: noisy (two Gaussian events) when private, exact otherwise
        (``user_keys`` as :meth:`release_counts`)."""
        if not self.private:
            return float(user_items.data.mean(dtype=np.float64)) if user_items.nnz else 0.0

        def sampled_sum(key: int, half: float, mid: float) -> tuple[float, float]:
            shifted = (
                user_items
                if not mid
                else sp.csr_matrix(
                    (user_items.data - mid, user_items.indices, user_items.indptr), shape=user_items.shape
                )
            )
            return allocation.sampled_rating_sum(shifted, count_sample, key, half, user_keys=user_keys)

        return self.release_sampled_mean(sampled_sum, count_sample, rating_bound, rating_range, label)

    def release_sampled_mean(
        self,
        sampled_sum: Callable[[int, float, float], tuple[float, float]],
        count_sample: int,
        rating_bound: float,
        rating_range: tuple[float, float] | None = None,
        label: str = "global mean",
    ) -> float:
        """The private mean from ``sampled_sum(key, half, mid)`` -- (sum of the sampled ratings minus
        ``mid`` clipped to ``half``, number sampled). With a declared ``rating_range`` the mean is
        estimated around its (public) midpoint: half the bound, so half the sensitivity (the offset
        is post-processing)."""
        if rating_range:
            mid, half = (rating_range[0] + rating_range[1]) / 2.0, (rating_range[1] - rating_range[0]) / 2.0
        else:
            mid, half = 0.0, rating_bound
        total, n = sampled_sum(allocation.sampling_key(self.rng), half, mid)
        scale = self.count_scale * self._pre_ratio(label)
        stat = allocation.release_global_mean(total, n, count_sample, scale, half, self.rng, label=label)
        self.record(stat)
        return float(stat.value) + mid

    # ------------------------------------------------------------------ 3. head, allocation
    @staticmethod
    def head(counts: np.ndarray, item_frac: float | None) -> np.ndarray:
        """Indices of the trained columns: the top ``item_frac`` by released count, or all."""
        if item_frac is None:
            return np.arange(np.asarray(counts).size)
        return allocation.head_items(counts, item_frac)

    def allocate(
        self,
        user_items: sp.csr_matrix,
        counts: np.ndarray,
        kind: str,
        budget: float,
        mu: float = 0.0,
        dtype=np.float32,
        user_keys: np.ndarray | None = None,
        **adaptive_options,
    ) -> sp.csr_matrix:
        """Per-entry weights aligned with ``user_items`` with every row's sum of squares <= budget.

        ``kind``: ``"uniform"`` / ``"tail"`` (sample ``int(budget)`` entries per row),
        ``"adaptive"`` (weights ∝ count^-mu, Krichene et al. Sec. 4; ``adaptive_options`` are
        passed on, e.g. ``mode`` / ``n_users``) or ``"full"`` (all ones: only for a non-private fit).
        ``user_keys`` (sampled allocations): as :meth:`release_counts`.
        """
        if kind not in ALLOCATIONS:
            raise ValueError(f"allocation must be one of {ALLOCATIONS}, got {kind!r}")
        if kind == "full":
            if self.private:
                raise ValueError("the 'full' allocation (all weights 1) has no per-user bound: non-private fits only")
            return sp.csr_matrix(
                (np.ones(user_items.nnz, dtype=dtype), user_items.indices, user_items.indptr), shape=user_items.shape
            )
        key = self.allocation_key(kind)
        if kind == "uniform":
            return allocation.uniform_weights(user_items, int(budget), dtype=dtype, key=key, user_keys=user_keys)
        if kind == "tail":
            return allocation.tail_weights(user_items, counts, int(budget), dtype=dtype, key=key, user_keys=user_keys)
        return allocation.adaptive_weights(user_items, counts, mu, budget, dtype=dtype, **adaptive_options)

    def allocation_key(self, kind: str) -> int | None:
        """The sampling key of a ``uniform`` / ``tail`` allocation (drawn here, in the pipeline's
        order), ``None`` for the deterministic ones; blocks of users pass it with their users' keys."""
        return allocation.sampling_key(self.rng) if self.private and kind in ("uniform", "tail") else None

    # ------------------------------------------------------------------ 4-5. record, check
    def record(self, release: Release, prefix: str = "") -> None:
        """Record a release's events in the ledger (labels prefixed, e.g. ``"ALS step 2: "``)."""
        release.record(self.ledger, prefix=prefix)

    def finish(self) -> PrivacyLedger:
        """Check the recorded events against the calibrated plan and return the ledger."""
        if self.private:
            check_ledger(self.ledger, self.planned_events(self.count_scale, self.train_scale))
        return self.ledger


def check_ledger(ledger: PrivacyLedger, planned: Plan) -> None:
    """``RuntimeError`` unless the ledger's (label, event) sequence equals the plan."""
    recorded = [(e.label, e.event) for e in ledger.entries]
    if recorded != planned:
        raise RuntimeError(
            "internal error: recorded privacy events differ from the calibrated plan "
            f"({len(recorded)} recorded, {len(planned)} planned)"
        )
