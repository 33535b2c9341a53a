"""Configuration and accounted private model selection (the "configure" stage of the data flow).

:func:`select_private` compares candidate private estimators on a held-out loss released under
DP and refits the winner, with every release in one ledger (see :mod:`privrec.tuning.selection`).
"""

from .selection import PrivateSelection, holdout_mask, select_private

__all__ = ["PrivateSelection", "holdout_mask", "select_private"]
