"""A fitted model's ranking score as one inner product, for nearest-neighbour search.

Every privrec model ranks the items for a user by a score that is affine in the user's vector ``u``
(see ``FactorizationModel._score_all`` and ``DPALS._score_all``)::

    score(u, i) = s * <u, v_i> + a_i + c * b_u

with ``v_i`` the released item factors, ``a_i`` an additive item term (item bias and global mean
for the rating models; ``log(exposure_i) + b_i / sigma_y`` for DPALS's exposure ranking,
where ``s = 1 / sigma_y``, ``sigma_y = label_bound / 2``), ``b_u`` the user's bias and ``s``, ``c`` constants. The standard
trick turns this into one inner product: item ``i`` becomes ``x_i = [s * v_i, a_i]`` and the
query ``q_u = [u, 1]``, so that ``<q_u, x_i> = score(u, i) - c * b_u``; the user term does not
change the ranking and is added back to the reported scores.

:func:`ranking_terms` reads ``s``, ``a`` and ``c`` off the model's own scoring function (a zero
query, a unit user bias and a probe vector) and checks the decomposition on a second probe, so
it follows whatever the model's ranking is (e.g. ``DPALS(ranking="rating")`` vs ``"exposure"``)
instead of restating it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: relative tolerance of the decomposition check (scores are float32)
_TOLERANCE = 1e-3


@dataclass(frozen=True)
class RankingTerms:
    """``score(u, i) = linear_scale * <u, v_i> + item_term[i] + bias_scale * b_u`` (see the module docstring)."""

    factors: np.ndarray  # (n_items, d) released item factors
    linear_scale: float
    item_term: np.ndarray  # (n_items,) float64
    bias_scale: float

    @property
    def n_items(self) -> int:
        return int(self.factors.shape[0])

    def items(self) -> np.ndarray:
        """``(n_items, d + 1)`` float32 rows ``[linear_scale * v_i, item_term[i]]``."""
        out = np.empty((self.n_items, self.factors.shape[1] + 1), dtype=np.float32)
        out[:, :-1] = self.factors * np.float32(self.linear_scale)
        out[:, -1] = self.item_term
        return out

    def queries(self, uvec: np.ndarray) -> np.ndarray:
        """``(b, d + 1)`` float32 rows ``[u, 1]``."""
        uvec = np.asarray(uvec, dtype=np.float32)
        uvec = uvec.reshape(uvec.shape[0] if uvec.ndim == 2 else -1, self.factors.shape[1])
        out = np.ones((uvec.shape[0], uvec.shape[1] + 1), dtype=np.float32)
        out[:, :-1] = uvec
        return out

    def user_offset(self, ubias, n: int) -> np.ndarray:
        """``bias_scale * b_u`` for ``n`` users (zeros without user biases)."""
        if ubias is None:
            return np.zeros(n, dtype=np.float32)
        return (np.asarray(ubias, dtype=np.float64) * self.bias_scale).astype(np.float32)


def ranking_terms(model) -> RankingTerms:
    """The decomposition of ``model``'s ranking score (module docstring); ``ValueError`` if the model's
    scoring is not of that form (then serve it with its own exact ``recommend``)."""
    model._check_fitted()
    V = np.asarray(model.item_factors_)
    d = V.shape[1]
    dtype = V.dtype

    def scores(u, ub=None) -> np.ndarray:
        return np.asarray(model._score_all(u.astype(dtype), ub), dtype=np.float64)

    zero = np.zeros((1, d), dtype=dtype)
    item_term = scores(zero)[0]
    bias = scores(zero, np.ones(1, dtype=dtype))[0] - item_term
    bias_scale = float(np.median(bias)) if bias.size else 0.0
    rng = np.random.default_rng(0)  # probe vectors of the check, not privacy noise
    probes = rng.standard_normal((2, d)).astype(dtype)
    linear_scale = 1.0
    if d:
        dots = probes[:1] @ V.T
        diff = scores(probes[:1])[0] - item_term
        denom = float(np.dot(dots[0], dots[0]))
        linear_scale = float(np.dot(diff, dots[0]) / denom) if denom > 0 else 1.0
    terms = RankingTerms(V, linear_scale, item_term, bias_scale)
    expected = scores(probes[1:], np.full(1, 0.5, dtype=dtype))[0]
    got = terms.queries(probes[1:]) @ terms.items().T + terms.user_offset([0.5], 1)[:, None]
    err = float(np.max(np.abs(got[0] - expected), initial=0.0))
    if err > _TOLERANCE * (1.0 + float(np.max(np.abs(expected), initial=0.0))) or not np.allclose(
        bias, bias_scale, rtol=_TOLERANCE, atol=_TOLERANCE
    ):
        raise ValueError(
            f"{type(model).__name__} ranks items by a score that is not an inner product plus an item term "
            f"(decomposition error {err:.3g}); serve it with its exact recommend()"
        )
    return terms
