"""Calibrating noise to a target (epsilon, delta) with the accountant, and splitting the budget.

``calibrate_noise_multiplier`` finds the smallest noise multiplier z whose composed events
satisfy epsilon(z) <= target, by bisection on the monotone map z -> epsilon(z) evaluated by the
RDP (default) or PLD accountant. The result is never above the target and within ``rtol``
(0.5% by default) of it. Several noise scales tied by fixed ratios (s0/s1/s2 in the authors'
reference implementation of Krichene et al., ICML 2023) are handled by letting ``build_event``
construct all events from one common scale.

Calibration and the ledger's report compute epsilon with the same function
(:func:`privrec.privacy.ledger.epsilon_of_event`: canonical event, PLD grid derived from it), so the
reported epsilon of a calibrated fit is never above its target. Targets below
:data:`MIN_TARGET_EPSILON` are refused, and so is a delta below what the chosen accountant resolves
(:data:`privrec.privacy.ledger.PLD_MIN_DELTA` for PLD); see ``docs/choosing-epsilon-delta.md``.

``calibrate_with_split`` spends a fraction ``count_fraction`` of the budget on pre-processing
(private counts, centering) and the rest on training. "Fraction of the budget" is measured as
in Krichene et al. (App. D.1): the share of the *RDP budget*, i.e. of the total zCDP rho = sum of
1 / (2 z_k^2) over the Gaussian releases, so the split holds at every RDP order at once.

The accountant's epsilon of each event a calibration tries is memoised for the process
(:func:`memoised_epsilon`, :data:`EPSILON_MEMO`): a refit, a grid search or a test suite that
calibrates the same events again reads the same numbers instead of recomputing them. The memo
key is the event's exact structure (every field of every nested event, floats by their bits)
with every other input of the accountant, so a memoised value is the value the accountant
returns for those inputs; ``clear_calibration_cache()`` empties it.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import attr
import dp_accounting
import numpy as np

from .._validation import check_delta, check_epsilon, check_fraction
from . import ledger
from .ledger import DEFAULT_RDP_ORDERS, check_pld_delta, epsilon_of_event
from .mechanisms import compose

#: Smallest target epsilon calibrated. Below it the noise multipliers of a fit (~5 / epsilon per
#: release, more for many releases) approach the 1e8 search bound, and such a release carries no
#: usable signal anyway; a smaller (or absurd, e.g. 1e-300) target is a ``ValueError``.
MIN_TARGET_EPSILON = 1e-4

#: Largest noise multiplier the search tries before giving up.
MAX_NOISE_MULTIPLIER = 1e8


def check_target(epsilon, delta, accountant: str = "rdp") -> tuple[float, float]:
    """``(epsilon, delta)`` of a calibration target, checked: ``ValueError`` naming ``epsilon``
    below :data:`MIN_TARGET_EPSILON` (``inf`` = no noise is fine) and naming ``delta`` below what
    ``accountant`` resolves (:func:`privrec.privacy.ledger.check_pld_delta` for PLD)."""
    eps = check_epsilon(epsilon)
    if eps < MIN_TARGET_EPSILON:
        raise ValueError(
            f"epsilon={eps:g} is below {MIN_TARGET_EPSILON:g}, the smallest target privrec calibrates "
            f"(the noise would swamp any signal and approach the accountant's limits); use "
            f"epsilon >= {MIN_TARGET_EPSILON:g}, or epsilon=inf for a non-private fit"
        )
    if accountant not in ("rdp", "pld"):
        raise ValueError(f"accountant must be 'rdp' or 'pld', got {accountant!r}")
    d = check_pld_delta(delta) if accountant == "pld" else check_delta(delta)
    return eps, d


# Share of the RDP budget spent on item counts in the experiments of Krichene et al. (ICML 2023), App. D.1.
_COUNT_FRACTION_BY_EPSILON = ((1.0, 0.12), (5.0, 0.14), (20.0, 0.20))


def default_count_fraction(epsilon: float) -> float:
    """Paper's share of the budget spent on counts: 12% at eps=1, 14% at 5, 20% at 20.

    Linear interpolation in log(epsilon) between those points, constant outside them.
    """
    eps = check_epsilon(epsilon)
    if math.isinf(eps):
        return _COUNT_FRACTION_BY_EPSILON[-1][1]
    xs = np.log([e for e, _ in _COUNT_FRACTION_BY_EPSILON])
    ys = [f for _, f in _COUNT_FRACTION_BY_EPSILON]
    return float(np.interp(math.log(eps), xs, ys))


def calibrate_noise_multiplier(
    target_epsilon: float,
    delta: float,
    build_event: Callable[[float], dp_accounting.DpEvent],
    accountant: str = "rdp",
    orders=DEFAULT_RDP_ORDERS,
    neighboring: str = "add_or_remove_one",
    rtol: float = 0.005,
    max_iterations: int = 200,
    epsilon_fn: Callable[[dp_accounting.DpEvent], float] | None = None,
) -> float:
    """Smallest noise multiplier z with epsilon(build_event(z)) <= target_epsilon.

    ``target_epsilon = inf`` returns 0.0 (no noise). ``ValueError`` for a target below
    :data:`MIN_TARGET_EPSILON` or a delta the accountant does not resolve (:func:`check_target`),
    and if no z up to 1e8 reaches the target (e.g. a non-private event inside ``build_event``, or
    a target below the RDP accountant's floor at this delta). ``epsilon_fn`` replaces the
    accountant call (event -> epsilon at ``delta``) for callers with their own accounting
    convention; the bisection is the same. The returned z satisfies
    ``epsilon_of_event(build_event(z), delta, accountant, ...) <= target_epsilon`` exactly as a
    ledger report computes it.
    """
    if epsilon_fn is None:
        target, delta = check_target(target_epsilon, delta, accountant)
    else:
        target, delta = check_target(target_epsilon, delta, "rdp")
    if math.isinf(target):
        return 0.0

    def eps(z: float) -> float:
        if epsilon_fn is not None:
            return float(epsilon_fn(build_event(z)))
        return memoised_epsilon(build_event(z), delta, accountant, orders, neighboring)

    hi = 1.0
    if accountant == "pld" and epsilon_fn is None:
        # PLD is tighter than RDP, so the (cheap) RDP calibration is an upper bracket: start there
        try:
            hi = calibrate_noise_multiplier(
                target, delta, build_event, "rdp", orders, neighboring, rtol, max_iterations
            )
        except Exception:  # events RDP cannot compose (Poisson sampling under replace-one): plain search
            hi = 1.0
        if hi <= 0:
            return hi
    e_hi = eps(hi)
    while e_hi > target:
        hi *= 2.0
        if hi > MAX_NOISE_MULTIPLIER:
            floor = "" if epsilon_fn is not None or accountant != "rdp" else _rdp_floor_note(e_hi, delta)
            raise ValueError(
                f"cannot reach epsilon={target:g} at delta={delta:g}: the noise multiplier would exceed "
                f"{MAX_NOISE_MULTIPLIER:g}{floor}"
            )
        e_hi = eps(hi)
    lo = hi / 2.0
    e_lo = eps(lo)
    while e_lo <= target:
        hi, e_hi = lo, e_lo
        lo /= 2.0
        if lo < 1e-8:
            return hi
        e_lo = eps(lo)
    # invariant: eps(lo) > target >= eps(hi)
    for _ in range(max_iterations):
        if e_hi >= (1.0 - rtol) * target or hi - lo <= 1e-12 * hi:
            break
        mid = 0.5 * (lo + hi)
        e_mid = eps(mid)
        if e_mid > target:
            lo = mid
        else:
            hi, e_hi = mid, e_mid
    return hi


def _rdp_floor_note(epsilon_at_max_noise: float, delta: float) -> str:
    """Why the RDP accountant stalls: its conversion to (epsilon, delta) has a floor of about
    log(1/delta) / (max order - 1) whatever the noise."""
    if not math.isfinite(epsilon_at_max_noise):
        return ""
    return (
        f" (the RDP accountant cannot certify less than about {epsilon_at_max_noise:.3g} at this delta, "
        f"whatever the noise: use accountant='pld' or a larger epsilon)"
    )


def gaussian_rho(event: dp_accounting.DpEvent) -> float:
    """Total zCDP rho of a composition of plain Gaussian events: sum of 1 / (2 z^2).

    Used to measure "share of the RDP budget" (for Gaussian mechanisms RDP(alpha) = alpha * rho).
    Raises ``TypeError`` for events that are not (compositions of) plain Gaussians.
    """
    if isinstance(event, dp_accounting.GaussianDpEvent):
        return 0.5 / event.noise_multiplier**2
    if isinstance(event, dp_accounting.NoOpDpEvent):
        return 0.0
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        return event.count * gaussian_rho(event.event)
    if isinstance(event, dp_accounting.ComposedDpEvent):
        return float(sum(gaussian_rho(e) for e in event.events))
    raise TypeError(f"budget split by RDP share needs plain Gaussian events, got {type(event).__name__}")


@dataclass(frozen=True)
class SplitCalibration:
    """Result of :func:`calibrate_with_split`: the two scales and the achieved epsilon."""

    count_scale: float
    train_scale: float
    count_fraction: float
    epsilon: float
    delta: float


def calibrate_with_split(
    target_epsilon: float,
    delta: float,
    count_fraction: float,
    build_count_event: Callable[[float], dp_accounting.DpEvent] | None,
    build_train_event: Callable[[float], dp_accounting.DpEvent],
    accountant: str = "rdp",
    orders=DEFAULT_RDP_ORDERS,
    rtol: float = 0.005,
) -> SplitCalibration:
    """Calibrate pre-processing and training noise so that the composition meets the target.

    ``build_count_event(c)`` / ``build_train_event(s)`` build the events of each phase from its
    own scale. The count scale is tied to the training scale so that the counts take exactly
    ``count_fraction`` of the total rho; the common scale is then found by bisection.
    ``count_fraction = 0`` or ``build_count_event=None`` means no pre-processing events.
    """
    target, delta = check_target(target_epsilon, delta, accountant)
    # the pre-processing event builder, or None when there is no pre-processing phase
    count_builder = build_count_event if build_count_event is not None and count_fraction > 0 else None
    if count_builder is not None:
        f = check_fraction(count_fraction, "count_fraction", closed_high=False)
    else:
        f = 0.0
    if math.isinf(target):
        return SplitCalibration(0.0, 0.0, f, math.inf, delta)
    if count_builder is not None:
        rho_c1 = gaussian_rho(count_builder(1.0))
        rho_t1 = gaussian_rho(build_train_event(1.0))
        ratio = math.sqrt(rho_c1 * (1.0 - f) / (f * rho_t1))

        def build(s: float):
            return compose([count_builder(ratio * s), build_train_event(s)])

    else:
        ratio = 0.0

        def build(s: float):
            return build_train_event(s)

    s = calibrate_noise_multiplier(target, delta, build, accountant, orders, rtol=rtol)
    eps = memoised_epsilon(build(s), delta, accountant, orders)
    return SplitCalibration(ratio * s, s, f, eps, delta)


def suggested_delta(n_users: int) -> float:
    """A delta well below 1/n_users for real use: the largest power of ten <= 1 / (100 n_users).

    (With delta >= 1/n a mechanism publishing one random user's full data meets the definition.)
    """
    n = max(1, int(n_users))
    return 10.0 ** math.floor(math.log10(0.01 / n))


# ------------------------------------------------------------------------------------------
# The process-wide memo of the accountant's epsilon.
# ------------------------------------------------------------------------------------------


class _Unkeyable(TypeError):
    """A value without an exact structural key (an array, a foreign object): never memoised."""


def _value_key(value) -> Hashable:
    t = type(value)
    if attr.has(t):  # a DpEvent: its type and every field, in declaration order
        return (
            t.__module__,
            t.__qualname__,
            tuple((f.name, _value_key(getattr(value, f.name))) for f in attr.fields(t)),
        )
    if t in (float, np.float64, np.float32, np.float16):
        return (t.__name__, float(value).hex())  # the bits: -0.0 and 0.0 differ
    if value is None or t in (bool, int, str) or isinstance(value, np.integer):
        return (t.__name__, value)
    if t in (list, tuple):
        return (t.__name__, tuple(_value_key(v) for v in value))
    raise _Unkeyable(t.__name__)


def event_key(event) -> Hashable | None:
    """An exact, hashable key of a (possibly nested) DpEvent, or ``None`` if it has none.

    Two events have the same key only if they are of the same types with equal fields all the
    way down: floats compared by their bits (``float.hex``), ints, bools and strings with their
    type, lists and tuples element by element. An event holding anything else (an array, an
    object that is not a DpEvent) has no key and is never memoised.
    """
    try:
        return _value_key(event)
    except _Unkeyable:
        return None


class EpsilonMemo:
    """A bounded (least recently used first out), thread-safe memo of pure epsilon functions.

    ``get(key, compute)`` returns the value stored under ``key``, else ``compute()``, stored;
    ``key=None`` always computes. Exceptions are not stored.
    """

    def __init__(self, maxsize: int = 16384):
        self.maxsize = int(maxsize)
        self._values: OrderedDict[Hashable, float] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable | None, compute: Callable[[], float]) -> float:
        if key is None:
            return compute()
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                self.hits += 1
                return self._values[key]
        value = compute()
        with self._lock:
            self.misses += 1
            self._values[key] = value
            if len(self._values) > self.maxsize:
                self._values.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self.hits = self.misses = 0

    def info(self) -> dict[str, int]:
        """``{"hits", "misses", "size", "maxsize"}``."""
        with self._lock:
            return {"hits": self.hits, "misses": self.misses, "size": len(self._values), "maxsize": self.maxsize}


#: The process's memo of calibration epsilons (this module's and the federated calibration's).
EPSILON_MEMO = EpsilonMemo()


def clear_calibration_cache() -> None:
    """Empty :data:`EPSILON_MEMO` (and its counters)."""
    EPSILON_MEMO.clear()


def _ledger_settings() -> tuple:
    """The ledger's numeric settings (``PLD_MAX_EPSILON``, ``PLD_RELATIVE_INTERVAL``, ...) as they
    are now: part of every key, since :func:`epsilon_of_event` reads them."""
    return tuple(
        (name, value)
        for name, value in vars(ledger).items()
        if name.lstrip("_").isupper() and type(value) in (int, float, tuple)
    )


def memoised_epsilon(
    event: dp_accounting.DpEvent,
    delta: float,
    accountant: str = "rdp",
    orders=DEFAULT_RDP_ORDERS,
    neighboring: str = "add_or_remove_one",
) -> float:
    """:func:`privrec.privacy.ledger.epsilon_of_event` of these arguments, memoised in :data:`EPSILON_MEMO`.

    The key holds every input of that pure function: the event's exact structure
    (:func:`event_key`), delta, the accountant, the RDP orders, the neighbouring relation, the
    ledger's numeric settings and the function itself; an input without an exact key (an event
    holding an array) is computed afresh.
    """
    key = event_key(event)
    try:
        args = _value_key((delta, accountant, tuple(orders), neighboring))
    except TypeError:  # orders that are not a sequence of plain numbers: no exact key
        key = None
    memo_key = None if key is None else ("epsilon_of_event", epsilon_of_event, key, args, _ledger_settings())
    return EPSILON_MEMO.get(memo_key, lambda: epsilon_of_event(event, delta, accountant, orders, neighboring))
