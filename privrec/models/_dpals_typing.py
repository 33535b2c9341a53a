"""What the mixins of :class:`~privrec.models.DPALS` (:mod:`~privrec.models.dpals_stages`,
:mod:`~privrec.models.dpals_scoring`, :mod:`~privrec.models.dpals_file`) read of the model they are
mixed into, declared once for the type checker.

At run time :class:`DPALSMixinBase` is ``object``: DPALS's method resolution order holds the
mixins themselves and nothing else new.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._base import FactorizationModel
    from .dpals_config import DPALSConfig

    class DPALSMixinBase(FactorizationModel):
        method: str
        epsilon: float
        delta: float
        feedback: str
        personal: str
        ranking: str
        accountant: str
        unobserved_weight: float
        rating_range: tuple[float, float] | None
        num_threads: int | None
        config_: dict[str, Any]
        user_regularization_: float
        user_reg_norm_: float
        _resolve_config: Callable[..., DPALSConfig]  # DPALS._resolve_config

else:
    DPALSMixinBase = object
