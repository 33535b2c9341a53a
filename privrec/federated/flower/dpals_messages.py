"""What DP-ALS messages carry besides arrays (:mod:`privrec.federated.flower.dpals`): the resolved
configuration of a fit as JSON (every ALS step's message) and a candidate's release for the
clients' own projections (the automatic selection's "selection losses" round)."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

import numpy as np

# ---------------------------------------------------------------------- configuration on the wire


def _config_json(cfg) -> str:
    out = {f.name: getattr(cfg, f.name) for f in fields(cfg)}
    out["dtype"] = np.dtype(cfg.dtype).name
    return json.dumps(out)


def _config_from_json(text: str):
    from ...models.dpals import DPALSConfig

    raw = json.loads(text)
    raw["dtype"] = np.dtype(raw["dtype"])
    if raw.get("rating_range") is not None:
        raw["rating_range"] = tuple(raw["rating_range"])
    return DPALSConfig(**raw)


def _opt_int(text: str) -> int | None:
    return None if text == "" else int(text)


# ---------------------------------------------------------------------- a candidate's release

#: the release arrays a client needs to project its users (the billboard projection)
_RELEASE_ARRAYS = ("item_factors_", "item_bias_")


def _release_model(config: dict[str, Any], values: dict):
    """A DPALS holding a candidate's release, for the clients' own projections (post-processing)."""
    from ...models.dpals import DPALS

    meta = json.loads(str(config["release"]))
    model = DPALS(
        epsilon=float(meta["epsilon"]),
        feedback=str(meta["feedback"]),
        personal=str(meta["personal"]),
        unobserved_weight=float(meta["unobserved_weight"]),
        num_threads=1,
    )
    model.item_factors_ = np.asarray(values["item_factors_"])
    model.item_bias_ = np.asarray(values["item_bias_"]) if "item_bias_" in values else None
    model.global_mean_ = np.asarray(float(meta["global_mean"]))
    model.user_reg_norm_ = float(meta["user_reg_norm"])
    model.user_regularization_ = float(meta["user_regularization"])
    model.config_ = {"user_reg_exponent": float(meta["user_reg_exponent"]), "label_bound": float(meta["label_bound"])}
    return model


def _release_message(model) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(config, arrays)`` sending ``model``'s release to the clients (:func:`_release_model`)."""
    meta = {
        "epsilon": float(model.epsilon),
        "feedback": str(model.feedback),
        "personal": str(model.personal),
        "unobserved_weight": float(model.unobserved_weight),
        "global_mean": float(model.global_mean_),
        "user_reg_norm": float(model.user_reg_norm_),
        "user_regularization": float(model.user_regularization_),
        "user_reg_exponent": float(model.config_["user_reg_exponent"]),
        "label_bound": float(model.config_["label_bound"]),
    }
    arrays = {name: np.asarray(getattr(model, name)) for name in _RELEASE_ARRAYS if getattr(model, name) is not None}
    return {"release": json.dumps(meta)}, arrays
