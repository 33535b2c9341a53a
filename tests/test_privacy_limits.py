"""The limits of the privacy parameters and of a fit's memory (issue 26, items 1-3).

* For every target epsilon >= ``MIN_TARGET_EPSILON`` and every delta the accountant resolves, the
  epsilon a report states is <= the target and ``epsilon_from_report`` recomputes it exactly;
  below those limits, a ``ValueError`` that names the parameter. Checked over a sampled grid of
  epsilon in [1e-4, 1e3] and delta in [1e-30, 0.5) (a denser sweep is marked ``slow``), and end
  to end on DPALS fits and the CLI at the targets that used to be exceeded.
* A fit's peak memory is estimated once (factor matrices, the d x d Gramians of the item chunks in
  flight and their noise, the per-user solve workspace) and an impossible fit is refused before
  anything of its size is allocated.
"""

import math
import tracemalloc

import dp_accounting
import numpy as np
import pytest
import scipy.sparse as sp

from privrec._validation import FitMemoryError
from privrec.cli import main
from privrec.models import ALS, DPALS
from privrec.privacy import (
    PrivacyLedger,
    calibrate_with_split,
    compose,
    default_count_fraction,
    epsilon_from_report,
    gaussian_event,
)
from privrec.privacy.calibration import MIN_TARGET_EPSILON
from privrec.privacy.ledger import PLD_MIN_DELTA
from privrec.solvers.memory import check_fit_memory, fit_memory

STEPS = 3


def _plan(c: float, s: float) -> list[dp_accounting.DpEvent]:
    """A DPALS-shaped fit, flat as its ledger records it: three pre-processing releases at scale c,
    then local Gramians (ratio 2) and right-hand sides at scale s in every ALS step."""
    pre = [gaussian_event(c)] * 3
    return pre + [ev for _ in range(STEPS) for ev in (gaussian_event(2 * s), gaussian_event(s))]


def _report_of_calibrated_fit(eps: float, delta: float, accountant: str) -> dict:
    """Calibrate (nested events, as DpEventBuilder composes them), record the flat list, report."""
    cal = calibrate_with_split(
        eps,
        delta,
        default_count_fraction(eps),
        lambda c: compose([gaussian_event(c)] * 3),
        lambda s: compose(_plan(1.0, s)[3:]),
        accountant=accountant,
    )
    led = PrivacyLedger()
    for i, ev in enumerate(_plan(cal.count_scale, cal.train_scale)):
        led.record(f"release {i}", ev)
    return led.report(delta, accountant=accountant)


def _check_case(eps: float, delta: float, accountant: str) -> None:
    if accountant == "pld" and delta < PLD_MIN_DELTA:
        with pytest.raises(ValueError, match=r"delta=\S+ is below 1e-13, the smallest delta the PLD accountant"):
            _report_of_calibrated_fit(eps, delta, accountant)
        return
    try:
        rep = _report_of_calibrated_fit(eps, delta, accountant)
    except ValueError as exc:
        # only the RDP accountant may be unable to certify a small target at a tiny delta (its
        # conversion has a floor), and it must say so
        assert accountant == "rdp" and "cannot reach epsilon" in str(exc), (eps, delta, exc)
        return
    assert rep["epsilon"] <= eps, (eps, delta, accountant, rep["epsilon"])
    assert epsilon_from_report(rep, rep["accountant"]) == rep["epsilon"]


def _sampled_grid(n: int, seed: int) -> list[tuple[float, float]]:
    """log-uniform epsilon in [1e-4, 1e3] and delta in [1e-30, 0.5), plus the four corners."""
    rng = np.random.default_rng(seed)
    eps = 10.0 ** rng.uniform(-4, 3, n)
    delta = 10.0 ** rng.uniform(-30, math.log10(0.5), n)
    corners = [(1e-4, 1e-13), (1e-4, 0.49), (1e3, 1e-13), (1e3, 0.49)]
    return corners + [(float(e), float(d)) for e, d in zip(eps, delta)]


@pytest.mark.parametrize("eps,delta", _sampled_grid(6, seed=26))
def test_reported_epsilon_never_exceeds_target_on_a_sampled_grid(eps, delta):
    _check_case(eps, delta, "pld")


@pytest.mark.parametrize("eps,delta", [(1e-4, 1e-30), (0.05, 1e-5), (0.5, 1e-30), (2.0, 1e-30), (1e3, 0.3)])
def test_rdp_calibration_is_within_target_or_says_it_cannot(eps, delta):
    _check_case(eps, delta, "rdp")


@pytest.mark.slow
@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_reported_epsilon_never_exceeds_target_dense_sweep(accountant):
    # about 40 calibrations per accountant (~30 s): the sampled grid above is the fast version
    eps_grid = [1e-4, 5e-4, 3e-3, 0.02, 0.2, 2.0, 30.0, 1e3]
    delta_grid = [1e-30, 1e-16, 1e-14, 1e-13, 1e-9, 1e-5, 0.01, 0.49]
    for eps in eps_grid:
        for delta in delta_grid:
            _check_case(eps, delta, accountant)


def test_targets_and_deltas_outside_the_limits_are_refused_by_name():
    for bad in (MIN_TARGET_EPSILON / 2, 1e-6, 1e-300):
        with pytest.raises(ValueError, match=r"^epsilon=\S+ is below 0\.0001"):
            _report_of_calibrated_fit(bad, 1e-5, "pld")
    with pytest.raises(ValueError, match=r"^delta=1e-16 is below 1e-13"):
        _report_of_calibrated_fit(1.0, 1e-16, "pld")


# ------------------------------------------------------------------ end to end: DPALS and the CLI


@pytest.fixture(scope="module")
def ratings():
    rng = np.random.default_rng(0)
    R = sp.random(300, 40, density=0.2, random_state=rng, format="csr", dtype=np.float32)
    R.data = np.ceil(R.data * 5)
    return R


@pytest.mark.parametrize(
    "eps,options",
    [
        (0.02, {}),
        (0.01, {}),
        (1e-3, {}),
        (1e-4, {}),
        (0.01, {"method": "dpsgd-uniform", "budget": 5}),
        (1e-3, {"feedback": "implicit", "unobserved_weight": 0.1}),
    ],
)
def test_dpals_reported_epsilon_within_tiny_targets(ratings, eps, options):
    """Before: 0.02 -> 0.02003, 0.01 -> 0.0101, 1e-3 -> 0.0013 (all six methods, implicit too)."""
    model = DPALS(epsilon=eps, factors=2, iterations=2, random_state=0, **options).fit(ratings, show_progress=False)
    rep = model.privacy_report()
    assert rep["accountant"] == "pld"
    assert 0.99 * eps <= rep["epsilon"] <= eps
    assert epsilon_from_report(rep, rep["accountant"]) == rep["epsilon"]


@pytest.mark.parametrize(
    "params,match",
    [
        ({"epsilon": 1e-6}, r"epsilon=1e-06 is below 0\.0001"),
        ({"epsilon": 1e-300}, r"epsilon=1e-300 is below 0\.0001"),
        ({"delta": 1e-16}, r"delta=1e-16 is below 1e-13.*accountant='rdp'"),
        ({"delta": 1e-30}, r"delta=1e-30 is below 1e-13"),
    ],
)
def test_dpals_refuses_parameters_below_the_limits_before_releasing_anything(ratings, params, match):
    model = DPALS(factors=2, iterations=1, **params)
    with pytest.raises(ValueError, match=match):
        model.fit(ratings, show_progress=False)
    assert not hasattr(model, "ledger_")


def test_dpals_takes_a_tiny_delta_with_the_rdp_accountant(ratings):
    model = DPALS(epsilon=5.0, delta=1e-20, accountant="rdp", factors=2, iterations=1, random_state=0)
    rep = model.fit(ratings, show_progress=False).privacy_report()
    assert rep["accountant"] == "rdp" and rep["epsilon"] <= 5.0 and rep["epsilon_pld"] is None
    assert epsilon_from_report(rep, "rdp") == rep["epsilon"]


def test_cli_refuses_a_delta_below_the_pld_minimum(capsys):
    rc = main(["fit", "--method", "ada-dpals", "--delta", "1e-16", "--scale", "0.2", "--quiet", "--factors", "2"])
    err = capsys.readouterr().err
    assert rc != 0
    assert "delta=1e-16 is below 1e-13" in err and "Traceback" not in err


# ------------------------------------------------------------------ one memory estimate per fit


def test_a_million_factors_fail_fast_without_allocating():
    """DPALS(factors=10**6) on 2000 x 80 grew to 23.8 GB and was killed: its item Gramians alone
    are 80 x 10^12 floats. Refused by the estimate, before any array of that size exists."""
    rng = np.random.default_rng(1)
    R = sp.random(2000, 80, density=0.1, random_state=rng, format="csr", dtype=np.float32)
    R.data = np.ceil(R.data * 5)

    def refuse_all():
        for model, what in (
            (DPALS(factors=10**6), "item Gramians"),
            (DPALS(factors=10**6, method="ada-dpsgd"), "item Gramians"),
            (DPALS(factors=10**6, epsilon=math.inf), "factor matrices"),
            (ALS(factors=10**6), "factor matrices"),
        ):
            with pytest.raises(FitMemoryError, match=rf"factors=1,000,000 .* would need about .*{what}") as info:
                model.fit(R, show_progress=False)
            assert isinstance(info.value, ValueError) and isinstance(info.value, MemoryError)
            assert "PRIVREC_MAX_ARRAY_BYTES" in str(info.value)

    # once untraced: the same refusals, and the noise calibrations (pure Python, several times slower
    # under tracemalloc) are then cached; traced: the refused fits allocate nothing of their size
    refuse_all()
    tracemalloc.start()
    try:
        refuse_all()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak


def test_fit_memory_counts_every_component_and_normal_fits_pass(monkeypatch):
    # an ml20m-sized private fit: every component present, far below any machine's limit
    parts = fit_memory(138_000, 27_000, 64, 4, item_step="ssp", gravity=True, num_threads=2)
    assert set(parts) == {
        "factor matrices",
        "per-user solve workspace",
        "gravity Gramian",
        "item Gramians",
        "Gramian noise and solve copies",
        "global Gramian and its noise",
    }
    # the item step's chunk: 8 noise blocks of 256 items per thread, one (65, 65) Gramian per item
    assert parts["item Gramians"] == 2 * 2048 * 65 * 65 * 4
    assert parts["factor matrices"] == 4 * (138_000 + 27_000) * 65 * 4
    assert sum(parts.values()) < 1 << 30
    assert set(fit_memory(1000, 100, 8, 4)) == {"factor matrices", "per-user solve workspace"}
    # a zero ridge turns the dual solve off: room for a chunk of full d x d systems
    assert (
        fit_memory(10, 10, 100, 8, ridge_positive=False, num_threads=1)["per-user solve workspace"]
        > fit_memory(10, 10, 100, 8, num_threads=1)["per-user solve workspace"]
    )
    assert check_fit_memory(300, 40, 4, 4, "DPALS", item_step="ssp") == sum(
        fit_memory(300, 40, 4, 4, item_step="ssp").values()
    )
    monkeypatch.setenv("PRIVREC_MAX_ARRAY_BYTES", str(1 << 20))
    with pytest.raises(ValueError, match=r"ALS with factors=4 on 300 users x 40 items would need"):
        check_fit_memory(300, 40, 4, 4, "ALS")
    with pytest.raises(ValueError, match="item_step"):
        fit_memory(3, 3, 1, 4, item_step="sgd")
