"""The stages of a DPALS fit that every backend calls (the local fit, Dask, Flower), as a mixin of
:class:`~privrec.models.DPALS`: the rating checks, the pipeline and the events it plans (for
calibration and the ledger check), the per-user allocation, the item step's batch and solver, the
ridges (from public values and released statistics only) and the non-private user step.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..pipeline import Plan, PrivatePipeline
from ..privacy import clip_rows, make_rng
from ..solvers import PrivateSolver, TaskBatch, make_solver
from ..solvers.ridge import frequency_regularization, scaled_regularization
from ..tuning.rule import empirical_bayes_item_ridge, spectral_ridge
from ._dpals_typing import DPALSMixinBase
from .als import half_step
from .dpals_config import DPALSConfig, check_rating_span
from .dpals_release import task_weights
from .inputs import check_rating_range


class DPALSStagesMixin(DPALSMixinBase):
    """Rating checks, pipeline and planned events, allocation, item batch and solver, ridges and the
    user step of :class:`~privrec.models.DPALS` (see :mod:`privrec.models.dpals_fit` for their order)."""

    # ------------------------------------------------------------------ rating checks
    def _rating_range(self) -> tuple[float, float] | None:
        return check_rating_range(self.rating_range)

    def _check_ratings(self, R: sp.csr_matrix, cfg: DPALSConfig) -> None:
        """Ratings outside the declared range are an error; beyond ``rating_bound`` (no range
        declared) they are clipped by the mechanisms, which is said once as a warning."""
        if R.nnz:
            self._check_rating_span(float(R.data.min()), float(R.data.max()), cfg)

    @staticmethod
    def _check_rating_span(lo_v: float, hi_v: float, cfg: DPALSConfig) -> None:
        """The rule of :meth:`_check_ratings` from the data's smallest and largest rating (a backend that
        holds the data in blocks reduces the two numbers first)."""
        check_rating_span(lo_v, hi_v, cfg.rating_range, cfg.rating_bound, stacklevel=5)

    # ------------------------------------------------------------------ pipeline and planned events
    def _make_solver(self, cfg: DPALSConfig, z: float, reg_items=0.0, init=None, schedule=1.0) -> PrivateSolver:
        """The item-step solver at training noise multiplier ``z`` (shared by calibration and fit)."""
        gx = cfg.feature_norm
        common = dict(
            noise_multiplier=z,
            budget=cfg.budget,
            max_norm=gx,
            label_bound=cfg.label_bound,
            reg=reg_items,
            unobserved_weight=cfg.unobserved_weight,
            global_ratio=cfg.global_ratio,
            dtype=cfg.dtype,
        )
        if cfg.solver == "ssp":
            return make_solver("ssp", gramian_ratio=cfg.gramian_ratio, projection=cfg.item_projection, **common)
        return make_solver(
            "noisy_gd",
            iterations=cfg.gd_iterations,
            radius=cfg.label_bound / gx,
            schedule=schedule,
            init=init,
            **common,
        )

    def planned_events(self, count_scale: float, train_scale: float, cfg: DPALSConfig | None = None) -> Plan:
        """[(label, DpEvent)] that a private fit records, from the two noise scales alone.

        Used by calibration (so epsilon is computed over exactly this structure) and by ``fit``
        (which checks the recorded events against it). Without ``cfg``: the settings of the fitted
        shape (the public roster and catalogue sizes), or of the default shape before a fit.
        """
        if cfg is None:
            fitted = getattr(self, "config_", None) or {}
            shape = (int(fitted["n_users"]), int(fitted["n_items"])) if "n_users" in fitted else None
            cfg = self._resolve_config(shape)
        return self._pipeline(cfg, None).planned_events(count_scale, train_scale)

    def _train_plan(self, cfg: DPALSConfig, s: float) -> Plan:
        """Training events at scale ``s``: the item solver's events at every ALS step."""
        if not cfg.iterations:
            return []
        events = self._make_solver(cfg, s).labelled_events()
        return [(f"ALS step {t}: {label}", ev) for t in range(1, cfg.iterations + 1) for label, ev, _ in events]

    def _pipeline(self, cfg: DPALSConfig, rng) -> PrivatePipeline:
        return PrivatePipeline(
            epsilon=cfg.epsilon,
            delta=cfg.delta,
            pre_labels=cfg.pre_labels,
            train_plan=lambda s: self._train_plan(cfg, s),
            count_fraction=cfg.count_fraction,
            accountant=cfg.accountant,
            rng=rng,
            mean_ratio=cfg.mean_ratio,
        )

    # ------------------------------------------------------------------ allocation and the item batch
    def _allocate(self, cfg: DPALSConfig, R: sp.csr_matrix, counts: np.ndarray, rng) -> sp.csr_matrix:
        """Per-user weights aligned with ``R`` (via the pipeline's allocation); all ones when non-private."""
        pipe = self._pipeline(cfg, make_rng(rng))
        kind = cfg.allocation if cfg.private else "full"
        return pipe.allocate(R, counts, kind, cfg.budget, cfg.mu, dtype=cfg.dtype)

    @staticmethod
    def _task_weights(cfg: DPALSConfig, counts: np.ndarray, n_users: int) -> np.ndarray:
        """Public estimate of each task's typical weight omega_i (:func:`.dpals_release.task_weights`)."""
        return task_weights(cfg, counts, n_users)

    def item_batch(
        self, cfg: DPALSConfig, R: sp.csr_matrix, W: sp.csr_matrix, user_factors: np.ndarray, counts, n_users: int
    ) -> TaskBatch:
        """The item step's multi-task batch: task = item, units = users (Krichene et al., Alg. 3, line 5)."""
        if not cfg.private:
            return TaskBatch.from_csr(R, W, user_factors, transpose=True)
        counts = np.maximum(np.asarray(counts, dtype=np.float64), 1.0)
        return TaskBatch.from_csr(
            R, W, user_factors, transpose=True, task_sizes=counts, task_weights=self._task_weights(cfg, counts, n_users)
        )

    # ------------------------------------------------------------------ ridges, user step, item solver
    @staticmethod
    def _released_ridges(cfg: DPALSConfig, counts_h, n_users: int) -> DPALSConfig:
        """``cfg`` with the ridges its rule sets from released values: under ``reg_rule ==
        "spectral"`` both sides get :func:`privrec.tuning.spectral_ridge` of the trained items'
        noisy counts and the public roster (post-processing; every backend calls this once the
        head is chosen, before the first user step)."""
        if cfg.reg_rule != "spectral":
            return cfg
        ridge = spectral_ridge(counts_h, n_users)
        return dataclasses.replace(cfg, reg=ridge, user_reg=ridge)

    @staticmethod
    def _item_regularization(cfg: DPALSConfig, counts, train_scale: float) -> tuple[np.ndarray, float]:
        """Per-item ridge of the item step and its normaliser (public: released counts and the
        calibrated noise scale only): ``reg * (n + 1)^e`` normalised as in :class:`ALS`
        (``reg_rule == "constant"``), or the empirical-Bayes ridge of a private bias model
        (:func:`privrec.tuning.empirical_bayes_item_ridge`, which gives its derivation)."""
        if cfg.reg_rule != "empirical-bayes":
            return frequency_regularization(counts, cfg.reg, cfg.reg_exponent)
        return empirical_bayes_item_ridge(counts, float(train_scale) * math.sqrt(cfg.budget), cfg.bias_feature), 1.0

    @staticmethod
    def _user_regularization(cfg: DPALSConfig, user_counts) -> tuple[np.ndarray, float]:
        """Per-user ridge of the user step and its normaliser.

        In a private fit a user's ridge may depend only on public values and that user's own
        count: the usual normaliser sum(n) / sum(n (n+1)^e) is a statistic of *every* user's
        count, so removing one user would move every other user's embedding (and with it the
        item step's statistics) beyond the declared sensitivity. Private fits therefore use the
        unnormalised ``user_reg * (n + 1)^e`` (normaliser 1, which is also what the billboard
        projection uses after loading); ``epsilon = inf`` keeps the normalisation of :class:`ALS`.
        """
        names = ("user_regularization", "user_reg_exponent")
        if cfg.private:
            return scaled_regularization(user_counts, cfg.user_reg, cfg.user_reg_exponent, names=names), 1.0
        return frequency_regularization(user_counts, cfg.user_reg, cfg.user_reg_exponent, names=names)

    def _user_step(self, cfg: DPALSConfig, centered: sp.csr_matrix, V: np.ndarray, b_items, reg_users, warm=None):
        """Non-private user step on the current item side: ``(U, b_users, solution)``; rows of U
        clipped when private, ``solution`` the unclipped (users, d [+ 1 bias]) solve to pass back
        as ``warm`` at the next step.

        ``cfg.user_solver == "cg"`` with a ``warm`` start: ``cfg.cg_steps`` conjugate-gradient
        steps from it; otherwise exact (Cholesky). Row j depends only on user j's ratings,
        ``reg_users[j]``, the (released) item side and row j of ``warm`` (user j's own previous
        solution), so removing a user leaves every other row unchanged (the coupling the
        item-step sensitivity assumes). The user bias enters the item step only through the
        (clipped) labels.
        """
        cg = cfg.user_solver == "cg" and warm is not None
        U, b_users = half_step(
            centered,
            V,
            fixed_bias=b_items,
            global_mean=0.0,
            reg_rows=reg_users,
            unobserved_weight=cfg.unobserved_weight,
            with_bias=cfg.biases,
            solver="cg" if cg else "cholesky",
            x0=warm if cg else None,
            cg_steps=cfg.cg_steps,
            num_threads=self.num_threads,
        )
        solution = U if b_users is None else np.hstack([U, b_users[:, None]])
        if cfg.private and U.shape[1]:
            U = clip_rows(U, cfg.max_norm).astype(cfg.dtype, copy=False)
        return U, b_users, solution

    def _item_solver(self, cfg: DPALSConfig, z, reg_items, V, b_items, batch) -> PrivateSolver:
        if cfg.solver == "ssp":  # the bias feature's noisy Gramian entries feed the exposure term
            ssp: Any = self._make_solver(cfg, z, reg_items)
            return dataclasses.replace(ssp, keep_diagonal=bool(cfg.biases))
        # noisy GD: constant per-task step 1 / L_i with L_i = Gamma_x^2 * (public estimate of
        # sum_j w_ij, from noisy counts and task weights) + reg_i + alpha_0 Gamma_x^2 n: an estimate
        # of the task Hessian's largest eigenvalue built from public values only (so the step
        # sizes cost no privacy); iterates stay in the solver's ball whatever the step.
        gx2 = cfg.feature_norm**2
        if b_items is not None:
            V = np.hstack([V, (b_items / cfg.bias_feature)[:, None].astype(V.dtype)])
        L = gx2 * batch.task_sizes * batch.task_weights + reg_items + cfg.unobserved_weight * gx2 * batch.n_units
        step = 1.0 / np.maximum(L, 1e-12)
        return self._make_solver(cfg, z, reg_items, init=V, schedule=lambda t, s=step: s)
