"""The automatic configuration rule of :class:`~privrec.models.DPALS` (the "configure" stage).

Three parts, all functions of public inputs and of statistics already released with noise, so
choosing with them costs no privacy:

* :func:`auto_config` -- the settings left at ``None`` (rank, iterations, ridges, clipping and
  the budget shares) from the numbers of users and items, epsilon, delta, the public rating bound
  and the kind of feedback (Krichene et al., ICML 2023, Sec. 5 and App. D; the settings of the
  reference DPALS for the head-restricted implicit case);
* :func:`empirical_bayes_item_ridge` -- the per-item ridge of the private bias model from the
  released counts and the calibrated noise scale (post-processing of the count release);
* :func:`spectral_ridge` -- both ridges of the implicit head-restricted rank from the released
  counts of the trained items and the public roster (post-processing of the count release).

Where no rule can decide, :func:`privrec.tuning.select_private` compares candidates on a
held-out loss released under DP, with its cost in the ledger.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ..privacy import calibrate_noise_multiplier, default_count_fraction, gaussian_event
from ..privacy.calibration import MIN_TARGET_EPSILON

__all__ = [
    "BIAS_GRAMIAN_SIGNAL",
    "POPULARITY_COUNT_SAMPLE",
    "RANK_ITERATIONS",
    "SELECTION_RATING_CAP",
    "SELECTION_MIN_FREE",
    "SELECTION_SHARES",
    "SELECTION_SIGNAL",
    "SIGMA_Y_OVER_TAU",
    "SPECTRAL_RIDGE_SCALE",
    "auto_config",
    "bias_gramian_ratio",
    "catalogue_signal_factor",
    "empirical_bayes_item_ridge",
    "gaussian_multiplier",
    "gaussian_rho",
    "selection_shares",
    "spectral_ridge",
]

#: prior noise-to-signal ratio sigma_y / tau of the empirical-Bayes item ridge of the bias model:
#: rating noise B / 2 against item biases of spread B / 6.5 (B the label clip)
SIGMA_Y_OVER_TAU = 3.25


#: how the automatic private selection between the bias model and a rank
#: (:func:`privrec.tuning.auto.run_automatic_selection`) spends rho and holds out ratings. The winner
#: is released as fitted (no refit): what the held-out scores compared is what is released.
#: The rank gets most of the budget because its item Gramians need it -- on ml10m-like@0.2 at
#: eps = 20 a rank fitted with 17.5% of rho on 80% of the ratings (the earlier design, a refit
#: of the winner with 60%) scored RMSE 0.702 against the bias model's 0.686, so the selection
#: could not see a rank that reaches 0.649 on the full budget; with 75% of rho on 95% of the
#: ratings it scores 0.647 (0.651 on 90%; bias model with 20%: 0.685). The bias model needs
#: little: at 14,000 users its RMSE moves by 0.003 between 20% and 60% of rho (validation, 2
#: seeds). The 5% held out are enough: the scores' noise (std 230 at eps = 20 on 30,000 users)
#: is far below the rank-vs-bias differences where they matter (about 4,000 there). With the
#: 6-step rank and the empirical-Bayes bias model, bias 15% / rank 80% against 20% / 75%
#: (validation, 3 seeds): ml10m-like@0.2 at eps = 20, RMSE 0.6460 against 0.6476 (10% / 85%:
#: 0.6438); the step where the selection starts on synthetic-biases (bias model on the whole
#: budget at eps = 3, 0.5416) grows from +0.0023 to +0.0032 at eps = 5 (10%: more), so 15%.
SELECTION_SHARES: dict[str, Any] = {
    "selection_share": 0.05,
    "refit_share": 0.0,
    "candidate_shares": (0.15, 0.8),
    "holdout": 0.05,
}

#: signal index ``n_users * min(epsilon, 20)`` from which :func:`auto_config` proposes a rank for
#: explicit ratings, i.e. from which a DPALS fit that leaves the rank to the rule runs the private
#: selection (:func:`selection_shares` says how it spends rho there)
SELECTION_SIGNAL = 60_000.0

#: smallest share of rho the selection must be able to give the rank and the scores together
#: (:func:`selection_shares`); below it the fit stays the bias model on the whole budget
SELECTION_MIN_FREE = 0.1


@functools.lru_cache(maxsize=256)
def gaussian_multiplier(epsilon: float, delta: float) -> float:
    """Noise multiplier z of the one Gaussian mechanism meeting (epsilon, delta) under PLD (cached)."""
    return calibrate_noise_multiplier(float(epsilon), float(delta), lambda s: gaussian_event(s), "pld")


def gaussian_rho(epsilon: float, delta: float) -> float:
    """rho = 1 / (2 z^2) of that mechanism (:func:`gaussian_multiplier`)."""
    return 0.5 / gaussian_multiplier(float(epsilon), float(delta)) ** 2


def selection_shares(n_users: int, epsilon: float, delta: float) -> dict[str, Any] | None:
    """How the automatic selection between the bias model and the rule's rank spends rho at
    ``(n_users, epsilon, delta)`` (public), or ``None`` where the default is the bias model on the
    whole budget.

    The selection starts at the signal index :data:`SELECTION_SIGNAL`, i.e. at
    ``epsilon_0 = SELECTION_SIGNAL / n_users``. The bias candidate keeps at least the rho that the
    bias model had there, ``rho(epsilon_0)``, and never less than the share in
    :data:`SELECTION_SHARES` (15%). The rank and the held-out scores split the rest in the ratio
    of their shares there (80 : 5). The bias candidate's budget is therefore constant along the
    ramp and non-decreasing in epsilon after it. (With fixed shares, the bias model dropped from
    the whole budget to 15% where the selection started: +0.003 RMSE on synthetic-biases and
    synthetic-structured.) The selection runs once the rest reaches :data:`SELECTION_MIN_FREE`,
    about 6-7% of epsilon past ``epsilon_0``; until then the fit is the bias model on the whole
    budget. One step is left where the selection starts. The kept bias model then has
    ``rho(epsilon_0)`` (less the selection's 0.5% calibration margin) on 95% of each user's
    ratings (the rest is held out), where just before it had the whole budget on all of them. On
    synthetic-structured that step is +0.0004 RMSE. Only the bias branch is monotone by
    construction: a rank that wins a noisy selection can still score worse than the bias model.
    Rosters so large that ``epsilon_0`` is below the smallest calibrated target get the full
    shares.
    """
    epsilon, delta = float(epsilon), float(delta)
    if math.isinf(epsilon) or n_users <= 0:
        return None
    epsilon_0 = SELECTION_SIGNAL / float(n_users)
    if epsilon_0 > 20.0 or epsilon < epsilon_0:  # the signal index caps epsilon at 20
        return None
    bias_floor, rank = (float(c) for c in SELECTION_SHARES["candidate_shares"])
    select = float(SELECTION_SHARES["selection_share"])
    keep = (
        min(1.0, gaussian_rho(epsilon_0, delta) / gaussian_rho(epsilon, delta))
        if epsilon_0 >= MIN_TARGET_EPSILON
        else 0.0
    )
    if keep <= bias_floor:  # past the ramp
        return dict(SELECTION_SHARES)
    if 1.0 - keep < SELECTION_MIN_FREE:
        return None
    scale = (1.0 - keep) / (rank + select)
    return {**SELECTION_SHARES, "selection_share": select * scale, "candidate_shares": (keep, rank * scale)}


#: held-out ratings a user's score counts at most in the automatic selection: per-rating
#: weighting, as RMSE (a per-user mean lets light users, who gain least from a rank, decide:
#: synthetic-structured validation at eps = 15, per-user means favour the bias model 0.383 vs
#: 0.391 while per-rating errors favour the rank 0.518 vs 0.495). 20 = the held-out share (0.2)
#: of the 100 ratings per user that the fit's count release samples; of caps 10 / 20 / 50 it gave
#: the largest score gap per unit of noise there (rank vs bias: 0.2% / 2.5% / 4.2% of the score
#: against noise growing as the cap)
SELECTION_RATING_CAP = 20


#: the implicit rank's ridges as a multiple of the interaction matrix's noise edge
#: (:func:`spectral_ridge`; the edge from the released counts, which cap each user at
#: ``count_sample`` sampled items, so it sits below the exact matrix's edge on data with heavy
#: users: 54.4 against 66.7 on ml20m-like). Validation (heldout users of ml20m-like,
#: 116,677 x 20,108; one seed at eps = 20, as multiples of the *exact* edge): Recall@20 0.348 /
#: 0.366 / 0.366 / 0.254 at 0.5 / 0.75 / 1 / 2 times the edge (the constant ridges 30 / 30 it
#: replaces: 0.342); Last.fm validation at eps = 20, 3 seeds: 0.151 / 0.157 / 0.155 / 0.152 at
#: 0.25 / 0.5 / 0.8 / 1 (the constant 30 / 1 it replaces: 0.154)
SPECTRAL_RIDGE_SCALE = 0.9


def spectral_ridge(counts, n_users: int, scale: float = SPECTRAL_RIDGE_SCALE) -> float:
    """The ridge of both sides of a private implicit-feedback rank (public: released counts and the
    public user roster only; post-processing of the count release).

    ALS with ridge ``lambda`` on both sides is, at its fixed point, the singular value
    decomposition of the interaction matrix with every singular value soft-thresholded by
    ``lambda`` (Mazumder, Hastie & Tibshirani, JMLR 2010, Sec. 5 "maximum-margin matrix
    factorization"). A threshold at the matrix's noise level keeps the directions that stand out
    of a random matrix with the same density and drops the rest: a binary ``n x k`` matrix of
    i.i.d. entries with mean ``p`` has a centred spectral norm of about
    ``sqrt(p (1 - p)) (sqrt(n) + sqrt(k))`` (Bai-Yin edge). Here ``k`` is the number of trained
    items (``counts``, their released noisy counts), ``n`` the public number of users and ``p``
    the density implied by the released counts; the ridge is ``scale`` times that edge. It does
    not depend on epsilon, so a larger budget only lowers the noise around the same estimator
    (the DP noise's own regularization -- the eigenvalue shift of the item step -- comes on
    top at small epsilon).
    """
    c = np.asarray(counts, dtype=np.float64)  # the sum of the noisy counts, unbiased (no clip per item)
    k, n = max(int(c.size), 1), max(int(n_users), 1)
    p = min(max(float(c.sum()), 0.0) / (n * k), 1.0)
    edge = math.sqrt(p * (1.0 - p)) * (math.sqrt(n) + math.sqrt(k))
    return float(scale) * max(edge, 1e-3)


def empirical_bayes_item_ridge(counts, noise: float, bias_feature: float) -> np.ndarray:
    """Per-item ridge of the private bias model (empirical Bayes; public: released counts and the
    calibrated noise scale only).

    The posterior mean of an item bias b_i ~ N(0, tau^2) from the noisy sum R_i = n_i b_i + e, with
    e the label noise (variance n_i sigma_y^2) plus the released noise (std ``z sqrt(beta) B`` in label units:
    spec 004 Alg. 1, multiplier z, budget beta, label clip B), is R_i / (n_i + lambda_i) with

        lambda_i = sigma_y^2 / tau^2 + (z sqrt(beta) B)^2 / (n_i tau^2),

    n_i the released count. The public priors are stated on the label scale: sigma_y = B / 2
    and tau = B / 6.5 (so lambda_i = 10.6 (1 + 4 (z sqrt(beta))^2 / n_i); B cancels). The
    ridge is in the units of the bias feature c (``bias_feature``), hence the factor c^2. It
    decreases continuously as epsilon grows (z falls) and as an item's count grows, so the
    bias model has no step in epsilon (the table it replaces had three). tau was chosen on the
    validation splits of ML-100K and synthetic-skew from B / 5, B / 6.5, B / 8 (mean of 3
    noise seeds at eps 1 / 5 / 20): ML-100K RMSE 1.0331 / 0.9940 / 0.9681 (table 1.0287 /
    0.9929 / 0.9653), synthetic-skew 0.6778 / 0.6587 / 0.6520 (table 0.6806 / 0.6616 / 0.6551).

    Here ``noise = z sqrt(beta)`` and ``c = bias_feature``; the result is ``lambda_i * c^2``.
    """
    n = np.maximum(np.asarray(counts, dtype=np.float64), 1.0)
    lam = (SIGMA_Y_OVER_TAU**2) * (1.0 + 4.0 * float(noise) ** 2 / n)
    return (lam * float(bias_feature) ** 2).astype(np.float64)


#: ALS steps of the explicit rank that the automatic selection compares with the bias model.
#: Validation, test-free (steps: RMSE / Recall@20): ml10m-like@0.2 at eps = 15: 2 (the former
#: rule there): 0.6849 / 0.371 (the selection kept the bias model in 2 of 3 fits), 4: 0.6628 /
#: 0.452, 6: 0.6593 / 0.471; eps = 20: 4: 0.6517 / 0.464, 6: 0.6460 / 0.483; eps = 50: 4:
#: 0.6296 / 0.480, 6: 0.6221 / 0.500, 10: 0.6289 / 0.497; ml10m-like@1 at eps = 5: 4: 0.6371 /
#: 0.495, 6: 0.6400 / 0.504; eps = 20: 4: 0.5900 / 0.516, 6: 0.5889 / 0.526.
RANK_ITERATIONS = 6

#: items per user in the count release of the private popularity ranker (implicit feedback,
#: ``factors = 0``; DPALS._resolve_config). Its release is the counts alone, so the per-user sample
#: is free of the allocation budget: 50 (the private-popularity baseline's) gives a sensitivity of
#: sqrt(50) that is tight on data whose users keep at most 50 items (Last.fm validation at eps =
#: 0.5 / 1 / 5, 6 seeds: Recall@20 0.1160 / 0.1245 / 0.1243 with 100, 0.1234 / 0.1246 / 0.1255
#: with 50; ml20m-like at eps = 0.1: 0.2272 both)
POPULARITY_COUNT_SAMPLE = 50

#: signal index ``n_users * min(epsilon, 20)`` at which the bias model's Gramian multiplier is
#: half the right-hand side's (:func:`bias_gramian_ratio`)
BIAS_GRAMIAN_SIGNAL = 1000.0


#: users per item below which a catalogue is *wide* for the bias model's budget split: the users-only
#: signal index then overstates each item's count signal (:func:`catalogue_signal_factor`)
WIDE_CATALOGUE_COVERAGE = 0.5


def catalogue_signal_factor(n_users: int, n_items: int) -> float:
    """Factor on the signal index ``n_users * min(epsilon, 20)`` of the bias model's budget split for
    the catalogue's width: ``min(1, (n_users / n_items) / 0.5) ** 2`` (public inputs only).

    The index stands for an item's count signal against the noise, which grows with the item's
    raters. Where there are fewer than :data:`WIDE_CATALOGUE_COVERAGE` users per item the raters
    are spread over so many items that the users' number no longer measures them: on
    ``wide-catalogue`` (25,000 users x 300,000 items, about 3 ratings per item) the index read 25,000
    at eps = 1 and gave the counts the smallest share (ratio sqrt 2), and the ranking fell to 0.59x
    the popularity of a whole-budget count release. Squared, because the item count signal falls
    with the users' spread over the items *and* each user's ratings are spread as thinly. Every
    catalogue with at least one user per two items (ML-100K: 0.56; MovieLens, the synthetic presets
    but ``wide-catalogue``) keeps factor 1, i.e. the rule as it was.
    Validation (``wide-catalogue``, train part fitted, validation ratings ranked, eps = 1, 2 seeds;
    Recall@20 against whole-budget private popularity's 0.0027): ratio sqrt 2 (the users-only index)
    0.0016, 1.0: 0.0022, 0.7: 0.0025, 0.5: 0.0026 (validation RMSE 0.7580)."""
    coverage = max(int(n_users), 0) / max(int(n_items), 1)
    return float(min(1.0, coverage / WIDE_CATALOGUE_COVERAGE) ** 2)


def bias_gramian_ratio(signal: float) -> float:
    """Noise multiplier of the private bias model's 1 x 1 Gramians relative to its right-hand sides:
    ``0.5 sqrt(S / 1000)`` clipped to ``[0.5, sqrt(2)]``, ``S = n_users * min(epsilon, 20)`` (public).

    The bias feature's Gramian is a weighted count of each item's raters. It carries the ranking
    (:mod:`privrec.models.exposure`: which items users consume) and the count at which the item
    biases are shrunk (:mod:`privrec.models.bias_posterior`); the right-hand side carries only the
    rating level. A count's relative noise falls as the signal grows (noise fixed by epsilon,
    counts growing with the users), so where the signal is weak the count takes most of the item
    step's budget (ratio 0.5: four times the right-hand side's rho) and where it is strong the
    rating sums do (sqrt 2: half). The ratio is continuous and non-decreasing in epsilon.
    Validation (ML-100K, 943 users, 6 noise seeds; RMSE / Recall@20 against private popularity's
    Recall@20): eps = 1, ratio 0.5: 1.0264 / 0.1937 (0.1939), sqrt 2: 1.0245 / 0.180; eps = 2,
    0.7: 1.0120 / 0.2038 (0.2027), 1.0: 1.0081 / 0.2016; eps = 3, 1.0: 0.9978 / 0.2067
    (0.2062), sqrt 2: 0.9959 / 0.2045; eps = 5, sqrt 2: 0.9830 / 0.2091 (0.2073).
    """
    return float(min(max(0.5 * math.sqrt(max(float(signal), 0.0) / BIAS_GRAMIAN_SIGNAL), 0.5), math.sqrt(2.0)))


def auto_config(
    n_users: int,
    n_items: int,
    epsilon: float,
    delta: float,
    rating_bound: float,
    implicit: bool = False,
    bias_model: bool = False,
) -> dict:
    """Automatic DPALS hyper-parameters from public quantities only.

    Inputs: the numbers of users and items, epsilon, delta, the public rating bound and whether
    the data is implicit feedback -- never the ratings -- so the choice costs no privacy.

    The rule keys on the *signal index* ``S = n_users * min(epsilon, 20)``: the noise of every
    user-level release is fixed by (epsilon, delta) while the signal of an item's statistic grows
    with the number of users, so S orders the regimes. When noise dominates (small S) the personal
    low-rank part is switched off (``factors = 0``): the model is then the private bias model
    (explicit ratings: global mean + item bias released by the item step + user bias from each
    user's own ratings) or the private popularity ranker (implicit feedback), which is what a
    noisy low-rank part would otherwise degrade below. Above the thresholds a small rank is
    proposed. For explicit ratings it is only a candidate: whether the data carries interaction
    structure at all shows only on held-out ratings, so a private DPALS fit that leaves the rank
    to this rule compares the bias model with that rank by accounted private selection
    (:func:`privrec.tuning.auto.run_automatic_selection`, shares :func:`selection_shares`): the rank is
    proposed where that selection can run (from ``S = SELECTION_SIGNAL``, once the budget has room
    for the rank). Neither
    the released counts (their noise, not the signal, sets a count-based signal-to-noise rule)
    nor a user's leave-one-out error on their own training ratings (optimistic for a part fitted
    on them) can tell. ``bias_model=True`` returns the bias model's settings.
    The item ridge of the private bias model is not a table entry: it is the empirical-Bayes rule
    of :meth:`DPALS._item_regularization` (calibrated noise and released counts), continuous in
    epsilon; ``regularization`` here is its value only where that rule does not apply.

    Thresholds and settings were chosen on *validation* splits -- synthetic presets
    (``ml10m-like`` at scale 0.2, ``synthetic-skew``) and the validation parts of ML-100K and
    Last.fm -- never on a test split (``benchmarks/bench_utility.py`` reports test figures for
    the rule as it stands). Tuning hyper-parameters on private data is itself a privacy cost not
    counted in any ledger; this rule avoids it for users, who should not tune on their own data
    without accounting for it.
    """
    if math.isinf(epsilon):
        return {
            "factors": 32,
            "iterations": 15,
            "budget": 100.0,
            "regularization": 20.0,
            "user_regularization": 20.0,
            "max_norm": 1.0,
            "count_fraction": 0.2,
            "gramian_ratio": 1.0,
            "item_frac": 1.0,
        }
    signal = n_users * min(epsilon, 20.0)
    if implicit:
        # popularity prior only / a small rank / the head-restricted rank of the reference settings
        # (top 10% of items by noisy count; validation users of ml20m-like)
        # the small rank keeps a user ridge of 1, so that most user factors reach the clip and the
        # item statistics carry the most signal against the noise (the spectral rule measured
        # slightly lower there: ml20m-like validation at eps = 0.5, 0.231 vs 0.236; Last.fm at
        # eps = 15 / 20 / 50, 0.144 / 0.151 / 0.164 vs 0.150 / 0.154 / 0.167, 3 seeds)
        rule = "constant"
        if signal < 20_000:
            factors, iters, user_reg, item_frac = 0, 0, 1.0, 1.0
        elif signal < 100_000:
            factors, iters, user_reg, item_frac = 8, 2, 1.0, 1.0
        else:
            factors, iters, user_reg, item_frac, rule = 32, 3, 30.0, 0.1, "spectral"
        # the head-restricted rank's ridges are the spectral rule (:func:`spectral_ridge`, set at fit
        # time from the released counts: DPALS._released_ridges); 30 / 30 stand in where it does not apply
        return {
            "factors": factors,
            "iterations": iters,
            "budget": 100.0,
            "regularization": 30.0,
            "user_regularization": user_reg,
            "max_norm": 0.1,
            "count_fraction": default_count_fraction(epsilon),
            "gramian_ratio": 1.0,
            "item_frac": item_frac,
            "reg_rule": rule,
        }
    if bias_model or selection_shares(n_users, epsilon, delta) is None:  # private bias model
        # the item ridge of the bias model is the empirical-Bayes rule of DPALS._item_regularization
        # (set from the calibrated noise at fit time; ``reg`` is only its fallback for explicit
        # overrides); the bias model is invariant to max_norm once its ridge scales with c^2
        factors, iters, max_norm = 0, 1, 0.5
        reg = 40.0 if epsilon <= 2 else (20.0 if epsilon <= 10 else 5.0)
    else:
        # the proposed rank (a selection candidate) with 6 ALS steps at every size: validation
        # RMSE / Recall@20 of the selected default, 3 seeds on ml10m-like@0.2, 2 on @1
        # (see RANK_ITERATIONS); the former step (2 steps below n * eps = 250,000, else 4)
        # left the rank too unconverged for the selection to see it at eps = 15
        factors, iters, max_norm, reg = 8, RANK_ITERATIONS, 0.5, 40.0
    return {
        "factors": factors,
        "iterations": iters,
        "budget": 100.0,
        "regularization": reg,
        "user_regularization": 5.0,
        "max_norm": max_norm,
        "count_fraction": default_count_fraction(epsilon),
        # bias model: the 1-d "Gramian" is a weighted count -- the ranking's exposure term and the
        # count at which the item biases are shrunk (DPALS._posterior_biases) -- and takes a larger
        # share where the signal is weak (bias_gramian_ratio), per item on a wide catalogue
        # (catalogue_signal_factor)
        "gramian_ratio": bias_gramian_ratio(signal * catalogue_signal_factor(n_users, n_items))
        if factors == 0
        else 1.0,
        "item_frac": 1.0,
        # the two global-mean releases at twice the counts' multiplier (a quarter of their share
        # each): the scalar mean of every rating needs far less precision than per-item counts,
        # and the counts are what ranking uses (validation, ML-100K at eps = 1: Recall@20 0.037 ->
        # 0.079 with RMSE +0.0002; synthetic-skew +0.001)
        "mean_ratio": 2.0,
    }
