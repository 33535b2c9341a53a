"""The record of a :class:`~privrec.models.DPALS` release, as a mixin: ``privacy_report`` (every
DpEvent and the guarantee it states) and what :meth:`save` writes beside the arrays and ``load``
restores (the report, the user-side ridge, the resolved settings; never a private model's noise
seed). The file format and its load-time checks: :mod:`privrec.models.model_file`.
"""

from __future__ import annotations

import math

import numpy as np

from .._io import json_safe
from .._validation import check_delta, check_epsilon
from ._dpals_typing import DPALSMixinBase
from .dpals_config import release_statement


class DPALSFileMixin(DPALSMixinBase):
    """``privacy_report`` and the file metadata of :class:`~privrec.models.DPALS`."""

    def privacy_report(self) -> dict:
        """JSON record of every DpEvent; ``epsilon`` from the calibrating accountant (PLD by default),
        ``epsilon_rdp`` / ``epsilon_pld`` both given; recompute with ``epsilon_from_report``."""
        ledger = getattr(self, "ledger_", None)
        if ledger is None:
            report = getattr(self, "privacy_report_", None)
            if report is None:
                from sklearn.exceptions import NotFittedError

                raise NotFittedError("this DPALS is not fitted yet; call fit(user_items) first")
            return report
        report = ledger.report(check_delta(self.delta), accountant=self.accountant)
        # one relation per report (RELEASE_STATEMENT's); the accountant's composition mode under its own name
        report["accountant_neighboring"] = report.pop("neighboring")
        report["method"] = self.method
        axes = getattr(self, "axes_", None) or {}
        report.update(
            release_statement(
                axes.get("roster") != "noisy count",
                axes.get("catalogue") != "private selection",
                axes.get("catalogue_released") is not None,
            )
        )
        target = check_epsilon(self.epsilon)
        report["target_epsilon"] = target if math.isfinite(target) else "inf"
        return report

    def _metadata(self) -> dict:
        return {
            "privacy_report": self.privacy_report(),
            "user_reg_norm": float(self.user_reg_norm_),
            "user_regularization": float(self.user_regularization_),
            "user_reg_exponent": float(self.config_["user_reg_exponent"]),
            "label_bound": float(self.config_["label_bound"]),
            "config": json_safe(self.config_),  # the resolved settings, for describe() / model_card()
        }

    def _saved_params(self) -> dict:
        """Parameters written with the release. A private model never carries its noise seed:
        anyone holding the file could regenerate the noise (SSP's per-chunk streams are spawned
        from the seed alone) and subtract it."""
        params = super()._saved_params()
        if not math.isinf(check_epsilon(self.epsilon)):
            params["random_state"] = None
        return params

    def _restore_metadata(self, meta: dict) -> None:
        if "privacy_report" not in meta:
            raise ValueError("DPALS model file lacks its privacy report")
        self.privacy_report_ = meta["privacy_report"]
        self.user_reg_norm_ = float(meta.get("user_reg_norm", 1.0))
        if "user_regularization" not in meta:
            raise ValueError("DPALS model file lacks its user regularization")
        self.user_regularization_ = float(meta["user_regularization"])
        saved = meta.get("config", {})  # absent from files written before describe() (issue 27)
        if not isinstance(saved, dict):
            raise ValueError("DPALS metadata 'config' must be an object of setting -> value")
        self.config_ = {
            **saved,
            "user_reg_exponent": float(meta.get("user_reg_exponent", 0.0)),
            "label_bound": float(meta.get("label_bound", 1.0)),
        }
        counts = getattr(self, "item_counts_", None)
        if counts is not None and np.shape(counts) != (self.item_factors_.shape[0],):
            raise ValueError(f"item_counts_ has shape {np.shape(counts)}, expected ({self.item_factors_.shape[0]},)")
        exposure = getattr(self, "item_exposure_", None)
        if exposure is not None and (
            np.shape(exposure) != (self.item_factors_.shape[0],) or not np.all(np.asarray(exposure) > 0)
        ):
            raise ValueError("item_exposure_ must hold one positive value per item")
        self.item_exposure_ = exposure
        self.item_counts_ = counts  # None: a file saved before counts were kept
        if getattr(self, "item_bias_", None) is None:
            self.item_bias_ = None
        self.user_bias_ = None
        self.user_factors_ = None
