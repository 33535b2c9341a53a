"""How a fitted :class:`~privrec.models.DPALS` scores and projects (post-processing of the release,
free), as a mixin: ``score`` (with the private-selection warning), the ``personal`` and
``ranking`` modes, the ranking scores of ``recommend`` (exposure-aware for explicit ratings,
:mod:`privrec.models.exposure`) and the billboard projection of a user's own ratings
(:mod:`privrec.models.billboard`).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from .._validation import check_epsilon
from ..solvers.ridge import scaled_regularization
from ._dpals_typing import DPALSMixinBase
from .als import half_step
from .billboard import shrunk_projection
from .dpals_config import binarised as _binarised
from .exposure import exposure_scores


class DPALSScoringMixin(DPALSMixinBase):
    """``score``, the ``personal`` / ``ranking`` modes, ranking scores and the billboard projection
    of :class:`~privrec.models.DPALS`."""

    def score(self, X, y=None) -> float:
        """The base class's negative RMSE of held-out ratings (:meth:`FactorizationModel.score`).

        A private model (finite ``epsilon``) scored by scikit-learn's model selection
        (``GridSearchCV``, ``cross_val_score``, ...) warns once with
        :class:`~privrec.models._base.PrivateSelectionWarning`: the scores and the choice among
        candidates spend privacy that no ledger counts (use :func:`privrec.tuning.select_private`).
        """
        from ._base import warn_private_selection

        warn_private_selection(self)
        return super().score(X, y)

    def _personal_mode(self) -> str:
        """``"loo"`` or ``"fixed"`` (see the ``personal`` parameter)."""
        if self.personal != "auto":
            return str(self.personal)
        private = not math.isinf(check_epsilon(self.epsilon))
        return "loo" if private and self.feedback != "implicit" else "fixed"

    def _ranking_mode(self) -> str:
        """``"exposure"`` or ``"rating"`` (see the ``ranking`` parameter)."""
        if self.feedback == "implicit":
            return "rating"
        if self.ranking != "auto":
            return str(self.ranking)
        return "exposure" if getattr(self, "item_counts_", None) is not None else "rating"

    def _score_all(self, uvec, ubias):
        """Ranking scores of :meth:`recommend` (see the ``ranking`` parameter)."""
        scores = super()._score_all(uvec, ubias)
        if self._ranking_mode() != "exposure":
            return scores
        # the rating noise sigma_y = label_bound / 2 of the bias model's empirical-Bayes prior
        noise = 0.5 * float((getattr(self, "config_", None) or {}).get("label_bound") or 2.0)
        exposure, counts = getattr(self, "item_exposure_", None), getattr(self, "item_counts_", None)
        return exposure_scores(scores, self._global(), noise, exposure, counts)

    def _project_users(self, rows: sp.csr_matrix):
        """Billboard projection (Krichene et al., ICML 2023, Remark D.1): a ridge fit of a user's own
        ratings on the released item side (factors and biases); returns ``(user_factors, user_bias)``.
        With ``personal="loo"`` the user's ridge on the personal part is their own leave-one-out
        choice (:func:`privrec.models.billboard.shrunk_projection`)."""
        if self.feedback == "implicit":
            rows = _binarised(rows)
        e = float(self.config_["user_reg_exponent"])
        norm = float(getattr(self, "user_reg_norm_", 1.0))
        reg = scaled_regularization(np.diff(rows.indptr), float(self.user_regularization_), e, norm)
        with_bias = self._item_bias() is not None and self.feedback != "implicit"
        if not with_bias and self.item_factors_.shape[1] == 0:  # popularity prior only: nothing per user
            return np.zeros((rows.shape[0], 0), dtype=self.item_factors_.dtype), None
        if with_bias and self._personal_mode() == "loo" and not float(self.unobserved_weight):
            U, b, _ = shrunk_projection(rows, self.item_factors_, self._item_bias(), self._global(), reg)
            return U, b
        return half_step(
            rows,
            self.item_factors_,
            self._item_bias() if with_bias else None,
            self._global(),
            reg,
            float(self.unobserved_weight),
            with_bias,
            "cholesky",
            num_threads=self.num_threads,
        )
