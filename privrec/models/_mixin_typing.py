"""What the mixins of :class:`~privrec.models.FactorizationModel` (ranking, similarity, prediction,
projection, persistence) read from the model they are mixed into, declared once for the type
checker.

At run time :class:`MixinBase` is ``object``: a mixin's bases, and so the model's method
resolution order, are exactly as without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import scipy.sparse as sp

    class MixinBase:
        item_factors_: Any
        user_factors_: Any
        epsilon: Any

        @property
        def n_items_(self) -> int: ...

        def _check_fitted(self) -> None: ...

        def _is_private(self) -> bool: ...

        def get_params(self, deep: bool = True) -> dict[str, Any]: ...

        def _item_bias(self) -> Any: ...

        def _user_bias(self) -> Any: ...

        def _global(self) -> float: ...

        def _is_implicit_feedback(self) -> bool: ...

        def _project_users(self, user_items: sp.csr_matrix) -> Any: ...

        def _entries(self, X: Any) -> Any: ...

        def _check_vocabulary_growth(self, which: str, n_new: int, n_old: int) -> Any: ...

        def recalculate_item(self, itemid: Any, item_users: Any) -> Any: ...

else:
    MixinBase = object
