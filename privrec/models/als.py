"""Non-private alternating least squares for explicit ratings (WALS), and an ``implicit`` wrapper.

Krichene et al. (ICML 2023), App. D.1 (loss of Algorithm 3 without noise), with the non-private WALS
settings of the authors' reference implementation.
``ALS`` minimises over user factors u, item factors v and optional biases

    sum_{(j,i) rated} (mu + b_j + c_i + <u_j, v_i> - y_ji)^2
        + sum_j reg_j (|u_j|^2 + b_j^2) + sum_i reg_i (|v_i|^2 + c_i^2)
        + alpha_0 * sum_{all j, i} <u_j, v_i>^2                        (unobserved weight / gravity)

with mu the training mean (``center=True``), b / c user / item biases (``biases=True``) and the
frequency-scaled ridge reg_r = regularization * (n_r + 1)^reg_exponent * Z, Z chosen per side so
that sum_r n_r * reg_r / regularization = sum_r n_r (the normalisation of the authors' reference implementation).
Every half-sweep is a batch of ridge regressions solved with batched BLAS (:mod:`privrec.solvers.ridge`).

Users or items without ratings get zero factors and zero bias (so their prediction is ``mu``).

**Rating scale** (issue 43). The ridge acts on the factors, whose size grows as the square root of
the ratings': the same ridge on ratings five times larger is five times weaker, and ALS then
overfits (ratings in [-10, 10] on a Jester-like set: test RMSE 6.00 against the global mean's
5.12). Explicit ratings are therefore fitted on the scale the defaults were tuned on: divided by
``s = span / REFERENCE_RATING_SPAN`` (the span of the declared ``rating_range``, else of the
training ratings, over 4, the span of 1-5 stars), with the fitted factors multiplied back by
``sqrt(s)`` and the biases and mean by ``s``. The fit on any scale is then the 1-5 fit rescaled
(on 1-5 data ``s = 1``: unchanged); ``rating_scale`` sets ``s`` by hand (1 = the data's own units).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._constraints import FINITE, NON_NEGATIVE, NON_NEGATIVE_INT, POSITIVE, POSITIVE_INT, StrOptions
from .._optional import require
from .._params import Hyperparameters, param
from .._validation import check_random_state_seed
from ..privacy import make_rng
from ..solvers.memory import check_fit_memory
from ..solvers.ridge import _blas_single_thread, frequency_regularization, scaled_regularization, solve_rows
from ._base import FactorizationModel, check_fit_matrix, check_rating_range
from .fit_memory import als_memory_options

_SOLVERS = ("cholesky", "cg")

#: span of the rating scale the explicit defaults were tuned on (1-5 stars, ML-100K): other scales
#: are fitted divided by ``span / REFERENCE_RATING_SPAN`` (:meth:`ALS.fit`, the module docstring)
REFERENCE_RATING_SPAN = 4.0


def check_exponent(value, name: str = "reg_exponent") -> float:
    """A finite real number (the frequency-scaling exponent)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not math.isfinite(value)
    ):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def _augment(factors: np.ndarray, with_bias: bool) -> np.ndarray:
    """[factors, 1]: the constant column lets the other side's bias be solved jointly."""
    if not with_bias:
        return factors
    return np.hstack([factors, np.ones((factors.shape[0], 1), dtype=factors.dtype)])


def gravity_gramian(fixed_factors: np.ndarray, unobserved_weight: float, width: int) -> np.ndarray | None:
    """alpha_0 * F^T F padded with zeros to ``width`` (bias coordinates carry no gravity)."""
    if unobserved_weight == 0:
        return None
    d = fixed_factors.shape[1]
    f64 = fixed_factors.astype(np.float64, copy=False)
    G = np.zeros((width, width), dtype=np.float64)
    G[:d, :d] = unobserved_weight * (f64.T @ f64)
    return G.astype(fixed_factors.dtype)


def half_step(
    matrix: sp.csr_matrix,
    fixed_factors: np.ndarray,
    fixed_bias: np.ndarray | None,
    global_mean: float,
    reg_rows: np.ndarray,
    unobserved_weight: float,
    with_bias: bool,
    solver: str = "cholesky",
    x0: np.ndarray | None = None,
    cg_steps: int = 3,
    num_threads: int | None = None,
):
    """Solve all rows of ``matrix`` (rows x fixed-side) with the fixed side's factors held constant.

    Returns ``(factors, bias)`` of the rows (``bias`` is None when ``with_bias`` is False).
    """
    d = fixed_factors.shape[1]
    dtype = fixed_factors.dtype
    targets = matrix.data.astype(dtype, copy=True)
    if global_mean:
        targets -= dtype.type(global_mean)
    if with_bias and fixed_bias is not None:
        targets -= fixed_bias[matrix.indices].astype(dtype, copy=False)
    fixed = _augment(fixed_factors, with_bias)
    grav = gravity_gramian(fixed_factors, unobserved_weight, fixed.shape[1])
    if x0 is not None and with_bias and x0.shape[1] == d:
        x0 = np.hstack([x0, np.zeros((x0.shape[0], 1), dtype=dtype)])
    sol = solve_rows(
        matrix.indptr, matrix.indices, targets, fixed, reg_rows, grav, solver, x0, cg_steps, num_threads=num_threads
    )
    if with_bias:
        return np.ascontiguousarray(sol[:, :d]), np.ascontiguousarray(sol[:, d])
    return sol, None


def implicit_values(matrix: sp.csr_matrix) -> sp.csr_matrix:
    """Implicit feedback as stored for the confidence-weighted solve: non-negative values (counts,
    clicks), explicit zeros dropped (a zero is no interaction: preference 0, confidence 1)."""
    if matrix.nnz and float(matrix.data.min()) < 0:
        raise ValueError(
            "feedback='implicit' needs non-negative values (play counts, clicks, 1 for a positive); "
            f"got {float(matrix.data.min()):g}"
        )
    if matrix.nnz and not np.all(matrix.data):
        matrix = matrix.copy()
        matrix.eliminate_zeros()
    return matrix


def implicit_half_step(
    matrix: sp.csr_matrix,
    fixed_factors: np.ndarray,
    reg_rows: np.ndarray,
    alpha: float,
    solver: str = "cholesky",
    x0: np.ndarray | None = None,
    cg_steps: int = 3,
    num_threads: int | None = None,
) -> np.ndarray:
    """Confidence-weighted ALS half-step (Hu, Koren & Volinsky 2008, eq. 4) for all rows of ``matrix``.

    Row r's solution is ``(F^T F + F_r^T (C_r - I) F_r + reg_r I)^{-1} F_r^T C_r p_r`` with
    ``c = 1 + alpha * value`` on the row's stored entries (preference ``p = 1``) and confidence 1,
    preference 0 everywhere else. The Gramian trick: ``F^T F`` over *all* fixed-side rows is formed
    once per half-step (one d x d GEMM) and enters :func:`~privrec.solvers.ridge.solve_rows` as the
    shared extra Gramian; each row then only touches its stored entries, as the weighted ridge

        sum_{c in row r} w_rc (<x, f_c> - t_rc)^2 + reg_r |x|^2 + x^T (F^T F) x,
        w_rc = c_rc - 1 = alpha * value_rc,   t_rc = c_rc / (c_rc - 1),

    whose normal equations are exactly the ones above (``w t = c``). Rows without entries get 0.
    """
    conf = alpha * matrix.data.astype(np.float64)
    targets = (1.0 + conf) / conf
    f64 = fixed_factors.astype(np.float64, copy=False)
    gram = (f64.T @ f64).astype(fixed_factors.dtype)
    return solve_rows(
        matrix.indptr,
        matrix.indices,
        targets.astype(fixed_factors.dtype),
        fixed_factors,
        reg_rows,
        gram,
        solver,
        x0,
        cg_steps,
        num_threads=num_threads,
        weights=conf,
    )


class ALS(Hyperparameters, FactorizationModel):
    """Non-private alternating least squares: explicit ratings (the baseline of Krichene et al., ICML
    2023, App. D.1) or, with ``feedback="implicit"``, confidence-weighted implicit-feedback ALS (Hu,
    Koren & Volinsky, ICDM 2008).

    ``feedback="implicit"`` minimises

        sum_{all u, i} c_ui (p_ui - <x_u, y_i>)^2 + sum_u reg_u |x_u|^2 + sum_i reg_i |y_i|^2

    with preference ``p_ui = 1`` for a stored value ``r_ui > 0`` (0 otherwise) and confidence
    ``c_ui = 1 + alpha * r_ui`` (1 for the unobserved pairs): every unobserved pair is a weak
    negative. The values are used as they are (play counts give confidences growing with the
    count, as in the paper; binarise or log-scale very large counts first). Each half-sweep uses
    the Gramian trick of the paper (:func:`implicit_half_step`): ``Y^T Y`` is formed once and each
    row only touches its stored entries, so a sweep costs O(nnz d^2 + (n_users + n_items) d^3)
    (less with ``solver="cg"``). No biases, no centring (``biases`` / ``center`` do not apply and
    ``config_`` says so), and ``unobserved_weight`` must stay 0 (the unobserved weight is 1 by
    construction: tune ``alpha``). Predictions are preference scores for ranking, not ratings.

    Parameters
    ----------
    factors : embedding dimension d.
    regularization : ridge strength (before frequency scaling).
    reg_exponent : frequency-scaling exponent e; reg_r ∝ (n_r + 1)^e, normalised per side (0 = plain ridge).
    unobserved_weight : gravity alpha_0 >= 0; alpha_0 * (fixed-side Gramian) is added to every system
        (explicit feedback only).
    iterations : number of sweeps (user step then item step).
    biases : learn user and item biases (explicit feedback only).
    center : subtract the training mean rating (``global_mean_``; explicit feedback only).
    feedback : ``"explicit"`` (ratings, the default) or ``"implicit"`` (see above).
    alpha : confidence slope of implicit feedback, ``c = 1 + alpha * r`` (ignored for explicit
        ratings). The default 3 with ``regularization`` 10-30 and ``reg_exponent`` 1 was within 5%
        of the best validation Recall@20 of a ridge / gravity grid of explicit ALS on binarised
        Last.fm, ML-100K and ml20m-like (validation users only; see
        :func:`privrec.evaluation.experiment.implicit_als_params`).
    solver : ``"cg"`` (default: ``cg_steps`` = 3 warm-started conjugate-gradient steps per
        half-sweep, as implicit does; ML-100K test RMSE identical to the exact solve to 1e-4) or
        ``"cholesky"`` (exact: batched direct solves of the normal equations, or of the equivalent
        L x L dual system for rows with fewer ratings than factors).
    init_scale : std of the random initial item factors.
    dtype : float32 (default) or float64.
    random_state : seed of the initial item factors (ALS adds no noise, so no privacy impact).
    num_threads : worker threads of the batched solves (``None`` = usable cores).
    rating_range : ``None`` or the public ``(low, high)`` rating scale; ``fit`` warns
        (``RatingRangeWarning``) when ratings fall outside it. Its span sets the rating scale.
    rating_scale : ``None`` (automatic) or ``s > 0``: explicit ratings are fitted divided by ``s``
        and the factors / biases scaled back (module docstring), so ``regularization`` is stated for
        ratings of span 4 (1-5 stars). Automatic: the span of ``rating_range`` when declared, else
        of the training ratings, divided by 4 (1 on 1-5 data, 5 on [-10, 10], 1.125 on [0.5, 5]);
        1 fits the ratings in their own units. Ignored by ``feedback="implicit"``.

    Defaults were tuned on the ML-100K validation split (random 80/10/10, seed 0): see
    ``tests/test_models_als.py`` for the measured RMSE.

    Attributes
    ----------
    user_factors_, item_factors_, user_bias_, item_bias_, global_mean_, user_reg_norm_
    (normaliser of the user-side frequency ridge, reused by ``recalculate_user`` / ``transform``),
    item_reg_norm_ (the item side's, reused by ``recalculate_item`` / ``partial_fit_items``),
    rating_scale_ (the ``s`` the ratings were divided by; 1 for implicit feedback),
    user_ids_ / item_ids_ (id maps when fitted with ids); ``user_factors`` / ``item_factors``
    are implicit's names for the factor arrays; config_ (the resolved settings, see :meth:`describe`).
    """

    _saved_arrays = (
        "item_factors_",
        "user_factors_",
        "item_bias_",
        "user_bias_",
        "global_mean_",
        "user_reg_norm_",
        "item_reg_norm_",
        "rating_scale_",
    )

    factors: int = param(POSITIVE_INT, default=32)
    regularization: float = param(NON_NEGATIVE, default=20.0)
    reg_exponent: float = param(FINITE, default=1.0)
    unobserved_weight: float = param(NON_NEGATIVE, default=0.0)
    iterations: int = param(NON_NEGATIVE_INT, default=15)
    biases: bool = param("boolean", default=True)
    center: bool = param("boolean", default=True)
    feedback: str = param(StrOptions({"explicit", "implicit"}), default="explicit")
    alpha: float = param(POSITIVE, default=3.0)
    solver: str = param(StrOptions(set(_SOLVERS)), default="cg")
    cg_steps: int = param(POSITIVE_INT, default=3)
    init_scale: float = param(NON_NEGATIVE, default=0.1)
    dtype: Any = param(default=np.float32)  # float32 / float64, checked in _validate
    random_state: Any = param(default=None)  # check_random_state_seed
    num_threads: int | None = param(POSITIVE_INT, None, default=None)
    show_progress: bool | None = param("boolean", None, default=None)  # None: a bar unless scikit-learn calls fit
    rating_range: tuple[float, float] | None = param(default=None)  # check_rating_range (finite low < high)
    rating_scale: float | None = param(POSITIVE, None, default=None)  # None: from the rating span (docstring)

    # ------------------------------------------------------------------ validation
    def _validate(self):
        """Constraint table, then the rules it cannot express (finite exponent, seed, range, dtype)."""
        self._validate_params()
        check_exponent(self.reg_exponent)
        check_random_state_seed(self.random_state)
        check_rating_range(self.rating_range)
        if self.rating_scale is not None and not math.isfinite(self.rating_scale):
            raise ValueError(f"rating_scale must be a finite number > 0 or None, got {self.rating_scale!r}")
        dt = np.dtype(self.dtype)
        if dt not in (np.float32, np.float64):
            raise ValueError(f"dtype must be float32 or float64, got {dt}")
        return dt

    def _init_item_factors(self, n_items: int, dtype) -> np.ndarray:
        rng = make_rng(self.random_state)
        return (rng.standard_normal((n_items, self.factors)) * self.init_scale).astype(dtype)

    def _rating_scale(self, R: sp.csr_matrix) -> float:
        """``s`` of the fit (module docstring): ``rating_scale`` if set; else the span of the declared
        ``rating_range``, else of the training ratings, over :data:`REFERENCE_RATING_SPAN`; 1 for
        implicit feedback and for ratings without a span (a single value)."""
        if self.feedback == "implicit":
            return 1.0
        if self.rating_scale is not None:
            return float(self.rating_scale)
        declared = check_rating_range(self.rating_range)
        if declared is not None:
            span = float(declared[1]) - float(declared[0])
        elif R.nnz:
            span = float(R.data.max()) - float(R.data.min())
        else:
            span = 0.0
        return span / REFERENCE_RATING_SPAN if span > 0 and math.isfinite(span) else 1.0

    def _fitted_scale(self) -> float:
        """The fitted ``rating_scale_`` (1 for a model saved before it existed)."""
        scale = getattr(self, "rating_scale_", None)
        return 1.0 if scale is None else float(scale)

    # ------------------------------------------------------------------ fit
    def _resolved(self) -> dict[str, Any]:
        """The settings the fit uses (``config_``): the parameters, with what implicit feedback fixes
        (no biases, no centring, every unobserved pair weighted 1) stated as resolved values."""
        implicit = self.feedback == "implicit"
        if implicit and self.unobserved_weight:
            raise ValueError(
                "feedback='implicit' weights every unobserved (user, item) pair 1 (Hu et al. 2008) and has no "
                f"separate unobserved_weight (got {self.unobserved_weight!r}); tune alpha, the confidence of the "
                "observed pairs, instead"
            )
        return {
            "feedback": str(self.feedback),
            "factors": int(self.factors),
            "iterations": int(self.iterations),
            "regularization": float(self.regularization),
            "reg_exponent": float(self.reg_exponent),
            "alpha": float(self.alpha) if implicit else None,
            "unobserved_weight": 1.0 if implicit else float(self.unobserved_weight),
            "biases": bool(self.biases) and not implicit,
            "center": bool(self.center) and not implicit,
            "solver": str(self.solver),
            "cg_steps": int(self.cg_steps),
            "init_scale": float(self.init_scale),
            "dtype": np.dtype(self.dtype).name,
            "rating_range": None if self.rating_range is None else [float(v) for v in self.rating_range],
            "rating_scale": None if implicit or self.rating_scale is None else float(self.rating_scale),
            "private": False,
        }

    # ------------------------------------------------------------------ fit
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
        """Fit on users x items ratings: a sparse matrix (CSR / CSC / COO), a ``privrec.data.Interactions``
        or a long-format DataFrame (columns ``user_col`` / ``item_col`` / ``rating_col``); ``items`` /
        ``users`` declare the item catalogue and user roster (:mod:`privrec.models.inputs`).

        implicit 0.7 conventions: ``show_progress`` (``None``: the constructor's value) shows a tqdm
        bar with one step per sweep; ``callback(iteration, elapsed_seconds, loss)`` is called after
        every sweep (``loss`` is ``None``: the training loss is not computed); ``y`` is ignored
        (scikit-learn's convention). Returns ``self``.
        """
        inp = self._fit_input(
            user_items, show_progress, callback, items=items, users=users, strict_catalogue=strict_catalogue,
            columns=(user_col, item_col, rating_col), y=y,
        )  # fmt: skip
        show_progress, callback = inp.show_progress, inp.callback
        dtype = self._validate()
        cfg = self._resolved()
        implicit = self.feedback == "implicit"
        R = check_fit_matrix(inp.matrix)
        if implicit:
            R = implicit_values(R)
        declared = check_rating_range(self.rating_range)
        if declared is not None:
            self._check_rating_range(R, *declared, stacklevel=4)  # user code -> fit wrapper -> fit -> here
        check_fit_memory(
            R.shape[0],
            R.shape[1],
            self.factors,
            dtype.itemsize,
            "ALS",
            **als_memory_options(self),
        )
        scale = self._rating_scale(R)  # the resolved value is rating_scale_ (config_ keeps the parameter)
        if scale != 1.0:  # fit on the reference scale (module docstring); scaled back below
            R = R.astype(dtype, copy=True)
            R.data = (R.data.astype(np.float64) / scale).astype(dtype)
        RT = R.T.tocsr()
        RT.sort_indices()
        n_users, n_items = R.shape
        mu = float(R.data.mean(dtype=np.float64)) if cfg["center"] and R.nnz else 0.0
        reg_u, norm_u = frequency_regularization(np.diff(R.indptr), self.regularization, self.reg_exponent)
        reg_i, norm_i = frequency_regularization(np.diff(RT.indptr), self.regularization, self.reg_exponent)
        V = self._init_item_factors(n_items, dtype)
        U = np.zeros((n_users, self.factors), dtype=dtype)
        biases = cfg["biases"]
        bu = np.zeros(n_users, dtype=dtype) if biases else None
        bi = np.zeros(n_items, dtype=dtype) if biases else None
        from tqdm.auto import tqdm

        solver, steps, threads = self.solver, self.cg_steps, self.num_threads
        alpha, alpha0 = self.alpha, self.unobserved_weight
        with tqdm(total=self.iterations, disable=not show_progress, desc="ALS", unit="sweep") as progress:
            for it in range(self.iterations):
                t0 = time.perf_counter()
                if implicit:
                    U = implicit_half_step(R, V, reg_u, alpha, solver, U, steps, threads)
                    V = implicit_half_step(RT, U, reg_i, alpha, solver, V, steps, threads)
                else:
                    U, bu = half_step(R, V, bi, mu, reg_u, alpha0, biases, solver, U, steps, threads)
                    V, bi = half_step(RT, U, bu, mu, reg_i, alpha0, biases, solver, V, steps, threads)
                progress.update(1)
                if callback is not None:
                    callback(it, time.perf_counter() - t0, None)
        if scale != 1.0:  # back to the data's units: <sqrt(s) u, sqrt(s) v> = s <u, v>
            root = dtype.type(math.sqrt(scale))
            U, V = U * root, V * root
            bu = None if bu is None else bu * dtype.type(scale)
            bi = None if bi is None else bi * dtype.type(scale)
            mu *= scale
        self.global_mean_ = np.asarray(mu, dtype=np.float64)
        self.user_factors_ = U
        self.item_factors_ = V
        self.user_bias_ = bu
        self.item_bias_ = bi
        self.rating_scale_ = np.asarray(scale, dtype=np.float64)
        self.user_reg_norm_ = np.asarray(norm_u, dtype=np.float64)
        self.item_reg_norm_ = np.asarray(norm_i, dtype=np.float64)
        self.config_ = cfg
        return self._fitted(inp)

    def _exact_rows(self, rows: sp.csr_matrix, fixed: np.ndarray, fixed_bias, norm) -> tuple:
        """Exact solves of ``rows`` against the fitted ``fixed`` side: ``(factors, bias)``, with
        the frequency ridge normalised by ``norm``, the fit's normaliser of the rows' side."""
        if self.feedback == "implicit":
            rows = implicit_values(sp.csr_matrix(rows))
        reg = scaled_regularization(np.diff(rows.indptr), self.regularization, self.reg_exponent, norm)
        if self.feedback == "implicit":
            return implicit_half_step(rows, fixed, reg, self.alpha, num_threads=self.num_threads), None
        mean, alpha0 = self._global(), self.unobserved_weight
        scale = self._fitted_scale()
        if scale == 1.0:
            return half_step(rows, fixed, fixed_bias, mean, reg, alpha0, self.biases, num_threads=self.num_threads)
        # the fit's solve on the reference scale (module docstring), then back to the data's units
        dt = np.asarray(fixed).dtype
        rows = sp.csr_matrix(rows, dtype=dt, copy=True)
        rows.data = (rows.data.astype(np.float64) / scale).astype(dt)
        root = math.sqrt(scale)
        fixed = (np.asarray(fixed, dtype=np.float64) / root).astype(dt)
        fixed_bias = None if fixed_bias is None else (np.asarray(fixed_bias, dtype=np.float64) / scale).astype(dt)
        X, b = half_step(rows, fixed, fixed_bias, mean / scale, reg, alpha0, self.biases, num_threads=self.num_threads)
        return (X * root).astype(dt), (None if b is None else (b * scale).astype(dt))

    def _project_users(self, rows: sp.csr_matrix):
        return self._exact_rows(rows, self.item_factors_, self._item_bias(), self.user_reg_norm_)

    def _solve_items(self, rows: sp.csr_matrix):
        """Exact item step (items x users ``rows``) on the fitted user side: ``(factors, item_bias)``.

        With the training column of an item this reproduces its fitted factor (the last half-sweep
        of ``fit`` is this solve)."""
        norm = getattr(self, "item_reg_norm_", None)
        if self.reg_exponent and norm is None:
            raise ValueError("this ALS model file predates item_reg_norm_ (needed for the item ridge): refit it")
        U = np.asarray(self.user_factors_)
        if U.shape[0] != rows.shape[1]:
            raise ValueError(f"item_users has {rows.shape[1]} user columns, but the model has {U.shape[0]} users")
        return self._exact_rows(rows, U, self._user_bias(), 1.0 if norm is None else norm)


class ImplicitALS(Hyperparameters, FactorizationModel):
    """Thin wrapper around ``implicit.cpu.als.AlternatingLeastSquares`` with privrec's API.

    Implicit-feedback ALS (confidence 1 + alpha * r). Parameters mirror implicit's;
    ``num_threads`` = 0 uses all cores. Non-private, no biases. Fitting it, and projecting users
    it was not fitted on, need the ``implicit`` package: the optional extra ``pip install
    'privrec[implicit]'`` (privrec's own ``ALS`` and ``DPALS`` follow implicit's API without it).
    """

    _saved_arrays = ("item_factors_", "user_factors_")

    factors: int = param(POSITIVE_INT, default=64)
    regularization: float = param(NON_NEGATIVE, default=0.01)
    alpha: float = param(POSITIVE, default=1.0)
    iterations: int = param(NON_NEGATIVE_INT, default=15)
    use_cg: bool = param("boolean", default=True)
    num_threads: int = param(NON_NEGATIVE_INT, default=0)
    show_progress: bool | None = param("boolean", None, default=None)  # None: a bar unless scikit-learn calls fit
    dtype: Any = param(default=np.float32)  # implicit checks it
    random_state: Any = param(default=None)  # implicit checks it

    def _make_inner(self):
        implicit_als = require("implicit.cpu.als", "ImplicitALS (a wrapper of implicit's ALS)")

        self._validate_params()
        return implicit_als.AlternatingLeastSquares(
            factors=self.factors,
            regularization=self.regularization,
            alpha=self.alpha,
            dtype=np.dtype(self.dtype).type,
            use_cg=self.use_cg,
            iterations=self.iterations,
            num_threads=self.num_threads,
            random_state=self.random_state,
        )

    def _is_implicit_feedback(self) -> bool:
        return True

    def _resolved(self) -> dict[str, Any]:
        """The settings of the fit (``config_``): implicit's parameters (confidence 1 + alpha * r)."""
        return {
            "backend": "implicit.cpu.als.AlternatingLeastSquares",
            "feedback": "implicit",
            "factors": int(self.factors),
            "iterations": int(self.iterations),
            "regularization": float(self.regularization),
            "alpha": float(self.alpha),
            "use_cg": bool(self.use_cg),
            "dtype": np.dtype(self.dtype).name,
            "private": False,
        }

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
        """Fit implicit's ALS (same inputs as :meth:`ALS.fit`; ``show_progress`` / ``callback`` are
        passed to implicit)."""
        inp = self._fit_input(
            user_items, show_progress, callback, items=items, users=users, strict_catalogue=strict_catalogue,
            columns=(user_col, item_col, rating_col), y=y,
        )  # fmt: skip
        show_progress, callback = inp.show_progress, inp.callback
        R = check_fit_matrix(inp.matrix)
        with _blas_single_thread():  # implicit wants OpenBLAS single-threaded (it threads itself)
            inner = self._make_inner()
            inner.fit(R, show_progress=show_progress, callback=callback)
        self._inner = inner
        self.user_factors_ = np.asarray(inner.user_factors)
        self.item_factors_ = np.asarray(inner.item_factors)
        self.config_ = self._resolved()
        return self._fitted(inp)

    def _synced_inner(self):
        """implicit's model holding this model's current factors (they change with partial fits)."""
        inner = getattr(self, "_inner", None)
        if inner is None:  # loaded from disk
            with _blas_single_thread():
                inner = self._make_inner()
            self._inner = inner
        d = self.item_factors_.shape[1]
        uf = getattr(self, "user_factors_", None)
        if inner.item_factors is not self.item_factors_:
            inner.item_factors = self.item_factors_
            inner._YtY = inner._item_norms = None
        uf = np.zeros((0, d), dtype=self.item_factors_.dtype) if uf is None else uf
        if inner.user_factors is not uf:
            inner.user_factors = uf
            inner._XtX = inner._user_norms = None
        return inner

    def _project_users(self, rows: sp.csr_matrix):
        factors = self._synced_inner().recalculate_user(np.arange(rows.shape[0]), rows)
        return np.atleast_2d(np.asarray(factors)), None

    def _solve_items(self, rows: sp.csr_matrix):
        factors = self._synced_inner().recalculate_item(np.arange(rows.shape[0]), rows)
        return np.atleast_2d(np.asarray(factors)), None
