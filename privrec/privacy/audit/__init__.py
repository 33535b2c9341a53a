"""Empirical privacy auditing: a statistical *lower* bound on the epsilon a mechanism really has,
and how large an accounting error a given audit can detect.

An (epsilon, delta)-DP mechanism M satisfies, for neighbouring datasets D, D' and every set S of
outputs, ``P[M(D) in S] <= e^eps P[M(D') in S] + delta`` and the same with D and D' swapped. A
distinguishing test "guess D' when the score of the output exceeds t" has false-positive rate
FPR = P[score(M(D)) > t] and false-negative rate FNR = P[score(M(D')) <= t]; taking S as the
rejection region and its complement gives

    eps >= log((1 - delta - FPR) / FNR)      and      eps >= log((1 - delta - FNR) / FPR).

:func:`run_audit` fits the mechanism many times on D (without the canary) and on D' (with it),
noise always from OS entropy, estimates FPR and FNR and replaces them by one-sided
Clopper-Pearson *upper* bounds, so ``eps_lower`` is a lower bound on the true epsilon that holds
with probability ``confidence`` over the audit's own randomness. If ``eps_lower`` exceeds the
epsilon a mechanism reports, the report is wrong (at that confidence); ``eps_lower <= eps`` says
only that this canary and this test did not find a violation (audits are lower bounds: a weak
canary gives a loose bound).

Statistical care (what makes the bound valid):

* the test (orientation, threshold and, for vector observables, the projection direction) is
  chosen on a *calibration* half of the runs and evaluated once on the other half
  (``method="split"``, default); or a fixed grid of thresholds given *before* the run is evaluated
  on all runs with a Bonferroni correction (``method="grid"``);
* both rates' upper bounds hold simultaneously: each is computed at level
  ``1 - (1 - confidence) / (2 * n_tests)`` (union bound over the two rates and the tests), so the
  maximum over the two inequalities above is one ``confidence``-level statement;
* every fit draws fresh noise: ``fit_release`` must not seed the mechanism's noise (the ``seed``
  it receives is the run index, for data-side randomness only).

**Known power.** An audit with n runs cannot report more than a ceiling set by n alone (zero
errors on every evaluated run): :func:`max_epsilon_lower`, e.g. 4.39 for the split audit with 600
runs per dataset at 95%. Whether it would catch a real accounting error also depends on how
close its canary and test come to the optimal ones. Given the claimed epsilon, every
:class:`AuditResult` states

* ``eps_max``: the ceiling above;
* ``power_2x``: the probability that the same design (runs, method, confidence) reports
  ``eps_lower > eps_claimed`` against an *ideal* canary on a Gaussian mechanism whose true epsilon
  is twice the claimed one (scores N(0, 1) without and N(mu, 1) with the canary, mu the GDP
  parameter of that epsilon: :func:`gdp_mu`), estimated by simulation (:func:`audit_power`);
* ``detectable_eps``: the smallest true epsilon such a mechanism may have and still be flagged
  with probability >= 90% (:func:`detectable_epsilon`; ``inf`` when ``eps_max <= eps_claimed``).

For a black-box canary that does not saturate the sensitivity these are *upper bounds* on the
real power (the ideal canary is the strongest possible); for the white-box audit below, whose
canaries saturate it, they are the power itself.

**White-box audit of a solver's release** (:func:`audit_solver_release`). The item step of
DP-ALS releases, per task (item), noisy statistics -- SSP: the Gramian ``G_i + Xi_i`` and the
right-hand side ``b_i + xi_i`` (Krichene et al. 2023, Alg. 1); noisy GD: one noisy gradient per step (Krichene et al. 2023, Alg. 2)
-- each with independent Gaussian noise. :func:`tap_solver` returns a copy of a solver whose
``solve`` runs the library's own code path unchanged and also records those noisy statistics
(a subclass hooking the per-block release; :class:`SolverTap`). Many canary units, each the
only contributor to its own tasks, are included independently with probability 1/2 (the auditor's
secret coin, as in Steinke, Nasr & Jagielski 2023, "Privacy auditing with one (1) training
run"). Each canary's score is the Gaussian likelihood-ratio statistic of its own tasks' released
statistics in the direction of its contribution, standardised by the *claimed* noise (a fixed
scaling, which the bound does not rely on). Because the noise of different tasks is
independent and every canary's tasks are its own, the canaries' scores are independent trials:
one solve gives as many trials as canaries, and the two-sample Clopper-Pearson bound above applies
directly (present canaries give FNR, absent ones FPR; random inclusion makes both sets random
halves of the same canary population, so the two rates refer to the same mixture of canaries).
This is the optimal test for a Gaussian release, so a canary that saturates the declared
sensitivity makes the audit as powerful as the Gaussian model predicts.

What the white-box audit does *not* cover: anything outside the tapped release (private counts,
centering, allocation, the user step, the composition over ALS steps, the final projection and
solve -- post-processing), the global Gramian of ``unobserved_weight > 0``, and inputs other
than the ones given (it audits the release for this batch's public inputs: features, weights,
initial iterate, step sizes).

Modules (each one concern): :mod:`~privrec.privacy.audit.bounds` (Clopper-Pearson bounds, epsilon
from error rates, Gaussian-DP conversions), :mod:`~privrec.privacy.audit.power` (the power of an
audit design), :mod:`~privrec.privacy.audit.blackbox` (:func:`audit_scores`, :func:`run_audit`) and
:mod:`~privrec.privacy.audit.whitebox` (:func:`audit_solver_release` and its canaries and tap).
Every name is importable from ``privrec.privacy.audit``.
"""

# the private helpers are re-exported too (redundant aliases), for code that imported them from
# the former single module privrec/privacy/audit.py
from .blackbox import AuditResult, audit_scores, run_audit
from .blackbox import _as_scores as _as_scores
from .blackbox import _candidate_thresholds as _candidate_thresholds
from .blackbox import _choose_test as _choose_test
from .blackbox import _projection as _projection
from .blackbox import _rates as _rates
from .blackbox import _with_power as _with_power
from .bounds import _alpha_per_rate as _alpha_per_rate
from .bounds import _check_counts as _check_counts
from .bounds import _check_delta as _check_delta
from .bounds import _eps_from_rates as _eps_from_rates
from .bounds import _gdp_delta as _gdp_delta
from .bounds import (
    clopper_pearson_lower,
    clopper_pearson_upper,
    empirical_epsilon,
    epsilon_lower_bound,
    gaussian_mu,
    gdp_epsilon,
    gdp_mu,
    max_epsilon_lower,
    separation,
)
from .power import DETECTION_POWER as DETECTION_POWER
from .power import METHODS as METHODS
from .power import _PowerModel as _PowerModel
from .power import audit_power, detectable_epsilon
from .whitebox import _AUDITED as _AUDITED
from .whitebox import (
    CanaryDesign,
    SolverAudit,
    SolverTap,
    audit_solver_release,
    canary_design,
    remove_units,
    tap_solver,
    worst_case_gd_init,
)
from .whitebox import _canary_scores as _canary_scores
from .whitebox import _solver_kind as _solver_kind
from .whitebox import _unique_ids as _unique_ids

__all__ = [
    "AuditResult",
    "clopper_pearson_upper",
    "clopper_pearson_lower",
    "epsilon_lower_bound",
    "empirical_epsilon",
    "max_epsilon_lower",
    "gdp_epsilon",
    "gdp_mu",
    "gaussian_mu",
    "separation",
    "audit_power",
    "detectable_epsilon",
    "audit_scores",
    "run_audit",
    "CanaryDesign",
    "canary_design",
    "remove_units",
    "SolverTap",
    "tap_solver",
    "worst_case_gd_init",
    "SolverAudit",
    "audit_solver_release",
]
