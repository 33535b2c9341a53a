"""Rating-level cross-validation for scikit-learn's model selection: :class:`RatingSplitCV` splits
the rows of a long-format rating table, each user's ratings round-robin over the folds.
Importable from :mod:`privrec.data.frames` and :mod:`privrec.data` too.
"""

from __future__ import annotations

import numbers
from collections.abc import Hashable
from typing import Any

import numpy as np
import pandas as pd

from privrec.data.columns import ITEM_COL, RATING_COL, USER_COL, _column
from privrec.data.vocabulary import _factorize_ids


class RatingSplitCV:
    """K-fold over *ratings* within each user, for ``GridSearchCV`` / ``cross_val_score``.

    scikit-learn's model selection indexes the rows of ``X``; for a rating model the samples must
    be ratings, not users (holding out whole users and scoring them would need their factors
    projected from the held-out ratings themselves: the test data would leak into the prediction).
    So pass the ratings as a long-format DataFrame (one row per rating, columns ``user`` / ``item``
    / ``rating``: see :data:`USER_COL`); this splitter assigns each user's ratings round-robin (in a
    random order) to the folds, so every fold's test ratings belong to users who keep training
    ratings: a user with ``m >= 2`` ratings has at most ``ceil(m / n_splits) <= m - 1`` of them in
    any test fold, and a user with a single rating is never tested. The models' ``score(X)`` then
    predicts each held-out rating from the fitted user and item factors (negative RMSE).

    Example::

        from sklearn.model_selection import GridSearchCV
        from privrec.data import RatingSplitCV
        from privrec.models import ALS

        search = GridSearchCV(ALS(), {"regularization": [5.0, 20.0]}, cv=RatingSplitCV(3, random_state=0))
        search.fit(ratings_df)            # DataFrame with columns user, item, rating

    Note that choosing hyper-parameters on private data is itself a use of that data that no
    ledger accounts for (see ``privrec.tuning.auto_config``).
    """

    n_splits: int
    user_col: Hashable
    shuffle: bool
    random_state: Any  # anything numpy.random.default_rng accepts (an int seed, None, ...)

    def __init__(self, n_splits: int = 5, *, user_col=USER_COL, shuffle: bool = True, random_state=None):
        if isinstance(n_splits, bool) or not isinstance(n_splits, numbers.Integral) or n_splits < 2:
            raise ValueError(f"n_splits must be an integer >= 2, got {n_splits!r}")
        self.n_splits = int(n_splits)
        self.user_col = user_col
        self.shuffle = shuffle
        self.random_state = random_state

    def __repr__(self) -> str:
        return (
            f"RatingSplitCV(n_splits={self.n_splits}, user_col={self.user_col!r}, shuffle={self.shuffle}, "
            f"random_state={self.random_state!r})"
        )

    def get_n_splits(self, X=None, y=None, groups=None) -> int:
        return self.n_splits

    def _folds(self, X) -> np.ndarray:
        if not isinstance(X, pd.DataFrame):
            raise ValueError(
                f"RatingSplitCV splits the rows of a long-format rating DataFrame (one row per rating), got "
                f"{type(X).__name__}: scikit-learn indexes the rows of X, which for a users x items matrix are "
                f"users, not ratings. Convert with Interactions.to_pandas() and rename the columns to "
                f"{USER_COL!r}, {ITEM_COL!r}, {RATING_COL!r}"
            )
        users = _column(X, self.user_col, "user_col")
        codes, _ = _factorize_ids(users, f"user column {self.user_col!r}")
        n = len(codes)
        rng = np.random.default_rng(self.random_state)
        order = rng.permutation(n) if self.shuffle else np.arange(n)
        # rank of each rating within its user (in the shuffled order)
        by_user = order[np.argsort(codes[order], kind="stable")]
        counts = np.bincount(codes, minlength=int(codes.max()) + 1 if n else 0)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        rank = np.empty(n, dtype=np.int64)
        rank[by_user] = np.arange(n) - np.repeat(starts, counts)
        offset = rng.integers(0, self.n_splits, size=len(counts)) if self.shuffle else np.zeros(len(counts), np.int64)
        folds = (rank + offset[codes]) % self.n_splits
        folds[counts[codes] < 2] = -1  # a single rating always stays in training
        return folds

    def split(self, X, y=None, groups=None):
        """Yield ``(train_rows, test_rows)`` integer positions into the rows of ``X``."""
        folds = self._folds(X)
        rows = np.arange(len(folds))
        for k in range(self.n_splits):
            test = folds == k
            if not test.any():
                raise ValueError(
                    f"fold {k} has no test ratings: too few users with two or more ratings for n_splits={self.n_splits}"
                )
            yield rows[~test], rows[test]
