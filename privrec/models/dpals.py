"""DPALS: alternating least squares with user-level DP item factors (Krichene et al., ICML 2023, Alg. 3).

Pipeline of :meth:`DPALS.fit` (every noisy release is recorded in ``ledger_``):

1. pre-processing (Krichene et al., App. D.1) through :mod:`privrec.allocation`: noisy item counts (each user
   contributes at most ``count_sample`` sampled items), optionally a noisy global mean for
   centering, optionally a head restriction to the top ``item_frac`` items by noisy count, and
   the per-user allocation (uniform sampling, tail sampling, or adaptive weights with exponent
   ``mu``), which enforces ``sum_i w_ij^2 <= budget`` for every user;
2. ``iterations`` ALS steps: non-private user step (``user_solver``: exact, then warm-started CG),
   user embeddings clipped to ``max_norm``, then the private item step with
   :mod:`privrec.solvers` (SSP, Algorithm 1, for ``dpals-*`` / ``ada-dpals``; full-batch noisy
   GD, Algorithm 2, for ``dpsgd-*`` / ``ada-dpsgd``);
3. release of the item factors only. ``user_factors_`` is the billboard projection (Krichene et al.,
   Remark D.1) of the training users onto the released item factors, kept for evaluation
   convenience; it is not part of the release and :meth:`save` does not write it.

Noise calibration: the events of the whole fit are planned by :meth:`DPALS.planned_events` from
two scales (pre-processing ``c`` and training ``s``); ``privrec.privacy.calibrate_with_split``
picks them so counts take ``count_fraction`` of the RDP budget and the total meets ``epsilon``
at ``delta``. ``fit`` records the events the mechanisms actually return and checks that they are
identical to the plan, so calibration and accounting cannot drift apart.

``epsilon = inf`` switches privacy off entirely: exact counts and mean, no sampling (all
weights 1), no clipping and the exact solver, so the fit with ``user_solver="cholesky"`` equals
:class:`ALS` (``solver="cholesky"``) with the same settings. Items outside the trained head (``item_frac``) get zero
factors, and so do items with no training data when ``epsilon = inf``. In a private fit, whether
an item has any data is itself private, so every trained item gets a factor from its noisy
statistics (an unseen item's factor is pure noise, shrunk by the ridge). Noise defaults to OS entropy; a fixed ``random_state`` makes runs reproducible but
voids the guarantee for anyone who knows the seed.

This module holds the estimator: its parameters, ``plan`` (:mod:`privrec.models.dpals_plan`) and
``fit`` (input, plan, run: :mod:`privrec.models.dpals_fit`). Its other concerns are mixed in from
their own modules: the stages every backend calls (:mod:`privrec.models.dpals_stages`), scoring and
projection (:mod:`privrec.models.dpals_scoring`), the privacy report and the file metadata
(:mod:`privrec.models.dpals_file`); names they took from here are still importable from here.
"""

from __future__ import annotations

import dataclasses
from numbers import Real
from typing import Any

import numpy as np

from .._constraints import (
    DELTA,
    EPSILON,
    FINITE,
    FRACTION,
    NON_NEGATIVE,
    NON_NEGATIVE_INT,
    OPEN_FRACTION,
    POSITIVE,
    POSITIVE_INT,
    Interval,
    StrOptions,
)
from .._io import json_safe  # noqa: F401 (re-exported)
from .._params import Hyperparameters, param
from .._validation import check_delta, check_epsilon  # noqa: F401 (re-exported)
from ..pipeline import Plan, PrivatePipeline  # noqa: F401 (re-exported)
from ..privacy import clip_rows, make_rng  # noqa: F401 (re-exported)
from ..solvers import PrivateSolver, TaskBatch, make_solver  # noqa: F401 (re-exported)
from ..solvers.ridge import frequency_regularization, scaled_regularization  # noqa: F401 (re-exported)
from ..tuning.auto import selects_rank
from ..tuning.rule import empirical_bayes_item_ridge, spectral_ridge  # noqa: F401 (re-exported)
from ._base import FactorizationModel, check_fit_matrix
from .als import half_step  # noqa: F401 (re-exported)
from .billboard import shrunk_projection  # noqa: F401 (re-exported)
from .dpals_config import METHODS, DPALSConfig, check_rating_span, release_statement, resolve_config  # noqa: F401 (re-exported)
from .dpals_config import binarised as _binarised  # noqa: F401 (re-exported)
from .dpals_file import DPALSFileMixin
from .dpals_fit import run_fit
from .dpals_plan import plan_of
from .dpals_release import task_weights  # noqa: F401 (re-exported)
from .dpals_scoring import DPALSScoringMixin
from .dpals_stages import DPALSStagesMixin
from .exposure import exposure_scores  # noqa: F401 (re-exported)
from .inputs import check_rating_range  # noqa: F401 (re-exported)
from .release import ReleaseHolder


class DPALS(ReleaseHolder, Hyperparameters, DPALSStagesMixin, DPALSScoringMixin, DPALSFileMixin, FactorizationModel):
    """User-level DP alternating least squares (AdaDPALS / DPALS / AM-DPSGD; Krichene et al., ICML 2023, Alg. 3).

    Parameters
    ----------
    method : one of ``dpals-uniform``, ``dpals-tail``, ``ada-dpals``, ``dpsgd-uniform``,
        ``dpsgd-tail``, ``ada-dpsgd``.
    epsilon, delta : target (epsilon, delta) user-level DP of the released item factors
        (``epsilon = inf``: non-private, see module docstring).
    factors : embedding dimension.
    iterations : ALS steps T; ``None`` -> 2 / 3 / 4 for epsilon near 1 / 5 / 20 (as tuned for ML10M by
        the authors' reference implementation).
    budget : per-user budget beta (= k items for uniform / tail sampling); the authors' reference
        implementation uses 100.
    mu : exponent of the adaptive weights (``ada-*``), omega_i ∝ nhat_i^-mu; ``None`` -> 0 for
        the bias model (``factors = 0``: weights that do not depend on the noisy counts, see
        docs/algorithms.md), 0.25 otherwise (validation splits of ML-100K and ml10m-like; the
        paper's range is 1/4..1/2 for factor models).
    biases : learn an item bias (released, see below) and a user bias (computed by each user from
        their own ratings: free). The item bias is the coefficient of a constant feature
        ``bias_scale * max_norm`` appended to every user's clipped embedding in the private item
        step, so it is estimated jointly with the item factors from the *same* noisy statistics
        (no extra DpEvent). With ``epsilon = inf`` the constant is 1 and the fit equals
        :class:`ALS` with ``biases=True``.
    regularization, reg_exponent : item-side ridge reg * (n + 1)^e normalised as in :class:`ALS`,
        with n the *noisy* counts (the ridge must be public). ``None`` -> automatic (see
        :func:`auto_config`; the private bias model's is the empirical-Bayes ridge of the released
        counts, :func:`privrec.tuning.empirical_bayes_item_ridge`).
    user_regularization, user_reg_exponent : user-side ridge ``user_regularization * (n_u + 1)^e``
        from user u's own count only (no cross-user normaliser in a private fit, so removing one
        user moves no other user's embedding). ``None`` -> automatic. For the implicit
        head-restricted rank, leaving *both* ridges at ``None`` sets both to
        :func:`privrec.tuning.spectral_ridge` of the released counts (one threshold for the two
        sides); giving either one takes that one as given and the other from :func:`auto_config`
        (30).
    accountant : ``"pld"`` (default: tighter, so less noise for the same guarantee) or ``"rdp"``;
        used for calibration and for ``privacy_report()["epsilon"]``.
    unobserved_weight : gravity alpha_0; its global user Gramian gets its own noise
        (multiplier ``global_ratio`` x the training scale).
    max_norm : clip of user embeddings (Gamma_x); ``None`` -> 0.2 at eps near 1, 0.5 above (the
        reference implementation's tuned values).
    center : subtract a noisy global mean (two extra pre-processing events); ``None`` -> True for
        explicit ratings, False for implicit feedback.
    feedback : ``"explicit"`` (ratings; RMSE) or ``"implicit"`` (play counts, clicks: every stored
        entry is a positive and is binarised to 1; use ``unobserved_weight > 0``). With implicit
        feedback and ``biases=True`` the item term is a popularity prior, the released noisy
        item counts divided by the (public) number of users -- free post-processing -- and
        recommendations rank items by prior + <u, v_i>; with ``factors = 0`` this is the private
        popularity ranker.
    rating_bound : public bound on |rating| (clips ratings for the mean); used when ``rating_range``
        is None, and then ratings beyond it are clipped with a warning.
    rating_range : public ``(low, high)`` of valid ratings (e.g. ``(1, 5)`` for MovieLens 100K,
        ``(0.5, 5)`` for ML-10M): ratings outside it are a ``ValueError``; it sets
        ``rating_bound = max(|low|, |high|)`` and, when centering, the label clip ``(high - low) / 2``.
        Public: it must come from the data's documentation, not from the data.
    label_bound : clip of (centered) labels in the item step; ``None`` -> rating_bound / 2 when
        centering, else rating_bound.
    item_frac : keep only the top fraction of items by noisy count (``None`` = automatic, 1.0 = all
        items; the rule restricts large implicit-feedback problems to the top 10%). The
        head is selected from the already released counts (free post-processing; the extra count release
        of the authors' reference implementation is not needed). On a privately selected item axis
        the automatic head is 10% of the released noisy catalogue size, in items
        (:func:`privrec.allocation.partition.release_catalogue_size`).
    count_fraction : share of the RDP budget for pre-processing; ``None`` ->
        ``privrec.privacy.default_count_fraction(epsilon)`` (paper: 12% at 1, 14% at 5, 20% at 20).
    count_sample : items per user sampled for the counts; ``None`` -> ``budget``, or 50 for the
        implicit popularity ranker (``factors = 0``), whose release is the counts alone.
    gramian_ratio, global_ratio : (``None`` -> automatic) SSP noise multipliers of local / global Gramians relative to
        the right-hand sides (the sigma ratios s1/s2, s0/s2 of the authors' reference implementation).
    gd_iterations : inner steps of noisy GD per ALS step (``dpsgd-*``).
    init_scale : std of the random (data-independent) initial item factors.
    user_solver, cg_steps : the non-private user step. ``"cg"`` (default): from the second
        ALS step on, ``cg_steps`` conjugate-gradient steps warm-started at each user's previous
        solution (as ``implicit``'s CG solver and :class:`ALS` do; about 4x cheaper than forming and
        factoring every user's Gramian); the first user step has no previous solution and is
        solved exactly. ``"cholesky"``: every user step exact. Either way user j's embedding
        depends only on user j's data and the released item side, which is what the item-step
        sensitivity needs. Validation utility is unchanged within noise (ml10m-like and
        ml20m-like at eps = 5; figures in CHANGELOG.md).
    item_projection : how the item step makes a noisy Gramian that is not positive definite
        solvable (SSP methods; post-processing of the release, so the guarantee is the same).
        ``"shift"`` (default): raise its eigenvalues by the calibrated noise's spectral edge
        (AdaSSP's eigenvalue shift, Wang 2018) and solve by Cholesky; ``"eigen"``: the exact
        PSD projection of Krichene et al. 2023, Alg. 1 (one eigendecomposition per item, about 9x the cost at
        64 factors). Validation utility of both in docs/performance.md.
    ranking : how :meth:`recommend` scores items. ``"exposure"`` (the ``"auto"`` choice for explicit
        ratings): ``log(exposure_i) + (r_ui - mean) / sigma_y``, i.e. the log of the item's released
        noisy weighted count (``item_exposure_``, or ``max(nhat_i, 1)`` of the released counts
        without one: how likely a user is to consume item i at all -- which items a user rates is
        the strongest ranking signal, and the counts are already released) plus a log-odds of
        liking it, ``sigma_y = label_bound / 2`` the rating noise of the bias model's prior
        (:mod:`privrec.models.exposure`); see docs/algorithms.md. ``"rating"``: the predicted rating (a rating predictor is not a
        ranker: the noisy biases of rarely rated items float to the top). Implicit feedback always
        ranks by prior + <u, v_i>.
    personal : how each user uses the released personal (low-rank) part when projected
        (billboard, free). ``"loo"`` (the ``"auto"`` choice for private explicit fits): each user
        keeps the joint fit of embedding and bias (as ``"fixed"``) or uses the bias alone,
        whichever has the smaller exact leave-one-out error on their own ratings, so released
        factors that carry only noise reduce the user's predictions to the bias model
        (:func:`privrec.models.billboard.shrunk_projection`). A user who drops the personal part
        has a zero embedding: ``similar_users`` gives that user similarity 0 to everybody. ``"fixed"``: the joint ridge fit with
        ``user_regularization`` (as :class:`ALS`; the ``"auto"`` choice at epsilon = inf and for
        implicit feedback).
    dtype : float32 (default) or float64.
    random_state : ``None`` (OS entropy, private) or a seed (experiments only; voids the
        guarantee if the seed is known).
    num_threads : worker threads of the (non-private) user-step solves (``None`` = usable cores).
    axes : what a private fit does when the user roster or the item catalogue is not declared (a
        DataFrame / CSV input without ``users=`` / ``items=``). ``"release"`` (the default, as
        ``privrec fit --ratings``): release them first -- a noisy user count and a private item
        selection (Gopi et al., ICML 2020) -- plan from them and state the guarantee for adding or
        removing one user; on data with few users per item the selection may keep few items, or
        none (a ``ValueError`` that says so): declare the catalogue then. ``"warn"``: fit on the
        data's axes under zero-out, with a
        :class:`~privrec.models.inputs.UserRosterWarning` / ``ItemCatalogueWarning`` (those axes
        are then not covered). Declared axes are used as given either way; a bare matrix's shape
        is its caller's declaration.

    Attributes: ``item_factors_`` (the release), ``global_mean_`` (noisy when centering),
    ``ledger_``, ``noise_scales_``, ``trained_items_``, ``user_factors_`` (projection, not
    released), ``fit_timings_`` (seconds: ``preprocess``, per-step ``steps`` and the user step's share of
    each, ``user_steps``, and ``projection``).
    """

    _saved_arrays = ("item_factors_", "item_bias_", "global_mean_", "item_counts_", "item_exposure_")

    @property
    def _releases_axes(self) -> bool:
        """Whether a fit whose roster or catalogue is undeclared releases them first (``axes="release"``:
        add/remove DP, :mod:`privrec.models.dpals_axes`) instead of warning."""
        return self.axes == "release"

    method: str = param(StrOptions(set(METHODS)), default="ada-dpals")
    epsilon: float = param(EPSILON, default=5.0)
    delta: float = param(DELTA, default=1e-5)
    factors: int | None = param(NON_NEGATIVE_INT, None, default=None)
    iterations: int | None = param(POSITIVE_INT, None, default=None)
    budget: float | None = param(POSITIVE, None, default=None)
    mu: float | None = param(Interval(Real, 0, 1, closed="both"), None, default=None)
    biases: bool = param("boolean", default=True)
    bias_scale: float = param(POSITIVE, default=1.0)
    regularization: float | None = param(NON_NEGATIVE, None, default=None)
    reg_exponent: float = param(FINITE, default=0.0)
    user_regularization: float | None = param(NON_NEGATIVE, None, default=None)
    user_reg_exponent: float | None = param(FINITE, None, default=None)
    unobserved_weight: float = param(NON_NEGATIVE, default=0.0)
    max_norm: float | None = param(POSITIVE, None, default=None)
    center: bool | None = param("boolean", None, default=None)
    feedback: str = param(StrOptions({"explicit", "implicit"}), default="explicit")
    rating_bound: float = param(POSITIVE, default=5.0)
    rating_range: tuple[float, float] | None = param(default=None)  # _rating_range (a finite (low, high) pair)
    label_bound: float | None = param(POSITIVE, None, default=None)
    item_frac: float | None = param(FRACTION, None, default=None)
    count_fraction: float | None = param(OPEN_FRACTION, None, default=None)
    count_sample: int | None = param(POSITIVE_INT, None, default=None)
    gramian_ratio: float | None = param(POSITIVE, None, default=None)
    global_ratio: float = param(POSITIVE, default=1.0)
    gd_iterations: int = param(POSITIVE_INT, default=10)
    init_scale: float = param(NON_NEGATIVE, default=0.1)
    user_solver: str = param(StrOptions({"cg", "cholesky"}), default="cg")
    item_projection: str = param(StrOptions({"eigen", "shift"}), default="shift")
    ranking: str = param(StrOptions({"auto", "exposure", "rating"}), default="auto")
    personal: str = param(StrOptions({"auto", "loo", "fixed"}), default="auto")
    cg_steps: int = param(POSITIVE_INT, default=3)
    accountant: str = param(StrOptions({"pld", "rdp"}), default="pld")
    dtype: Any = param(default=np.float32)  # float32 / float64, checked in _resolve_config
    random_state: Any = param(default=None)  # checked by check_noise_random_state
    num_threads: int | None = param(POSITIVE_INT, None, default=None)
    show_progress: bool | None = param("boolean", None, default=None)  # None: a bar unless scikit-learn calls fit
    axes: str = param(StrOptions({"release", "warn"}), default="release")

    # ------------------------------------------------------------------ resolved settings
    def _resolve_config(
        self,
        shape: tuple[int, int] | None = None,
        bias_model: bool = False,
        target: tuple | None = None,
        selected_items: bool = False,
        catalogue_size: float | None = None,
    ) -> DPALSConfig:
        """Validated, resolved settings for a ``shape = (n_users, n_items)`` fit
        (:func:`privrec.models.dpals_config.resolve_config`); ``target``: the (epsilon, delta) the
        fit is calibrated to when it is not the model's own (what is left after the axes' releases)."""
        return resolve_config(self, shape, bias_model, target, selected_items, catalogue_size)

    # ------------------------------------------------------------------ plan / fit
    def plan(self, X=None, *, shape: tuple[int, int] | None = None, users=None, items=None):
        """What :meth:`fit` will do on ``X`` -- a :class:`privrec.tuning.plan.FitPlan`: the resolved
        settings, whether the automatic selection runs (its candidates, shares and holdout), the
        noise scales and every DpEvent it will record -- from public inputs only (the settings and
        the shape: the declared roster / catalogue sizes). Nothing is fitted or spent.

        ``X``: any ``fit`` input (its shape is used, never its ratings), with the same ``users=`` /
        ``items=`` declarations the fit will get; or ``shape=(n_users, n_items)``.
        """
        return plan_of(self, X, shape=shape, users=users, items=items)

    def fit(
        self,
        user_items,
        show_progress: bool | None = None,
        callback=None,
        *,
        items=None,
        users=None,
        strict_catalogue: bool = False,
        user_col="user",
        item_col="item",
        rating_col="rating",
        y=None,
    ):
        """Fit on users x items ratings; releases ``item_factors_`` (and ``item_bias_`` with
        ``biases=True``) under the configured (epsilon, delta).

        ``user_items``: a sparse matrix (CSR / CSC / COO), an ``Interactions`` or a long DataFrame
        (columns ``user_col`` / ``item_col`` / ``rating_col``). ``items`` / ``users``: the public
        item catalogue and user roster (:mod:`privrec.models.inputs`); ``strict_catalogue``
        refuses an item axis taken from the data. ``show_progress`` (``None``: the constructor's
        value) and ``callback(iteration, elapsed_seconds, loss)`` as implicit 0.7; ``y`` is
        ignored (scikit-learn's convention).

        Runs :meth:`plan` for the input's shape (the selection, or one fit through the stages of
        :class:`privrec.pipeline.PrivatePipeline`; see the module docstring) and checks the recorded
        events against it.
        """
        inp = self._fit_input(
            user_items, show_progress, callback, items=items, users=users, strict_catalogue=strict_catalogue,
            columns=(user_col, item_col, rating_col), y=y,
        )  # fmt: skip
        R_full = check_fit_matrix(inp.matrix)
        user_keys = self._sampling_user_keys(R_full.shape[0], inp.user_ids)
        keys_from = "user ids" if inp.user_ids is not None else "row positions"
        axes = self._axes_plan(inp)
        self.axes_ = None
        if axes is None:  # declared roster and catalogue (or a bare matrix's shape, or not private)
            self._fit_matrix(
                R_full, user_keys=user_keys, show_progress=inp.show_progress, callback=inp.callback, keys_from=keys_from
            )
            return self._fitted(inp)
        from .dpals_axes import fit_released_axes

        items = fit_released_axes(self, R_full, user_keys, axes, keys_from, inp.show_progress, inp.callback)
        if items.size != R_full.shape[1]:  # the released item axis: the selected items, with their ids
            ids = inp.item_ids[items] if inp.item_ids is not None else items
            inp = dataclasses.replace(inp, item_ids=ids, given=False, axis="selection")
        return self._fitted(inp)

    def _axes_plan(self, inp):
        """The releases of ``inp``'s undeclared axes (:func:`privrec.tuning.plan.plan_axes`), or
        ``None`` when the roster and catalogue are declared (a bare matrix's shape is its caller's
        declaration)."""
        from ..tuning.plan import plan_axes

        if not self._releases_axes:
            return None
        return plan_axes(self, roster=inp.user_axis != "data", catalogue=inp.axis != "data")

    def _fit_matrix(
        self,
        R_full,
        *,
        user_keys=None,
        show_progress: bool = True,
        callback=None,
        plan=None,
        keys_from=None,
        shape=None,
    ):
        """Run the plan of a fit on the checked CSR ``R_full`` whose users have the sampling keys
        ``user_keys`` (one per row; ``None``: the row positions' keys). ``plan``: a given
        :class:`~privrec.tuning.plan.FitPlan` (default: :meth:`plan` of ``shape``, the public
        shape -- by default ``R_full``'s)."""
        from ..tuning.auto import run_automatic_selection
        from ..tuning.plan import plan_fit
        from ..tuning.selection import LocalSelectionData

        n_users, n_items = R_full.shape
        self._new_release()  # this fit's release (models/release.py)
        if user_keys is None:
            user_keys = self._sampling_user_keys(n_users)
        if plan is None:
            plan = plan_fit(self, shape or (n_users, n_items), keys=keys_from or "row positions")
        if plan.kind == "selection":
            data = LocalSelectionData(R_full, user_keys, shape=(plan.n_users, plan.n_items))
            return run_automatic_selection(self, plan, data, show_progress)
        return run_fit(self, R_full, user_keys, plan, show_progress, callback)

    def _selects_rank(self, cfg: DPALSConfig) -> bool:
        """Whether the rank is decided by accounted private selection (:func:`privrec.tuning.auto.selects_rank`)."""
        return selects_rank(self, cfg)
