"""Federated convex learning without a trusted server (ISRL-DP) and single-epoch DP-SRGD.

References: Lowy & Razaviyayn, "Private Federated Learning Without a Trusted Server" (ICLR 2023)
(silos, ISRL-DP MB-SGD, accelerated and multi-stage MB-SGD, Local SGD baselines) and
Choquette-Choo et al. (ALT 2025) (Accelerated-DP-SRGD with the binary-tree mechanism, DP-SGD /
DP-FTRL baselines).

Every message a silo sends goes through :class:`SiloChannel` (a privrec Gaussian mechanism on
clipped gradients) and is recorded in that silo's own PrivacyLedger under the replace-one
relation of ISRL-DP; results carry one JSON report per silo, recomputable with
:func:`report_epsilon` (plain dp_accounting, with the accountant the report names).
"""

from ._common import FederatedResult, ISRLRunOptions, RunOptions, federated_objective, project_ball
from .accelerated import (
    accelerated_mb_sgd,
    acsa_step,
    md_weights,
    multistage_accelerated,
    multistage_schedule,
)
from .calibration import (
    accountant_multiplier,
    message_event,
    paper_local_sgd_sigma2,
    paper_min_batch,
    paper_moments_batch,
    paper_moments_sigma2,
    paper_one_pass_sigma2,
    paper_theory_sigma2,
)
from .channel import SiloChannel, ledger_report, report_epsilon
from .estimators import FederatedDPClassifier, FederatedDPRegressor
from .mbsgd import local_sgd, mb_sgd
from .moreau import AbsoluteLoss, HingeLoss, MoreauEnvelope
from .shuffle import (
    advanced_composition,
    calibrate_shuffle,
    fmt_shuffle_epsilon,
    gaussian_epsilon,
    shuffle_guarantee,
    shuffled_mb_sgd,
)
from .silos import Availability, Silo, SiloSet
from .srgd import (
    SingleEpochResult,
    SRGDOptions,
    SRGDParams,
    accelerated_dp_srgd,
    dp_ftrl_single_epoch,
    dp_sgd_single_epoch,
    eta,
    eta_cumulative,
    event_multiplier,
    general_preset,
    interior_preset,
    recursive_gradients,
    srgd_params,
    tau,
    zero_out_epsilon,
)

__all__ = [
    "AbsoluteLoss",
    "Availability",
    "FederatedDPClassifier",
    "FederatedDPRegressor",
    "FederatedResult",
    "HingeLoss",
    "ISRLRunOptions",
    "MoreauEnvelope",
    "RunOptions",
    "SRGDOptions",
    "SRGDParams",
    "Silo",
    "SiloChannel",
    "SiloSet",
    "SingleEpochResult",
    "accelerated_dp_srgd",
    "accelerated_mb_sgd",
    "accountant_multiplier",
    "acsa_step",
    "advanced_composition",
    "calibrate_shuffle",
    "dp_ftrl_single_epoch",
    "dp_sgd_single_epoch",
    "eta",
    "eta_cumulative",
    "event_multiplier",
    "federated_objective",
    "fmt_shuffle_epsilon",
    "gaussian_epsilon",
    "general_preset",
    "interior_preset",
    "ledger_report",
    "local_sgd",
    "mb_sgd",
    "md_weights",
    "message_event",
    "multistage_accelerated",
    "multistage_schedule",
    "paper_local_sgd_sigma2",
    "paper_min_batch",
    "paper_moments_batch",
    "paper_moments_sigma2",
    "paper_one_pass_sigma2",
    "paper_theory_sigma2",
    "project_ball",
    "recursive_gradients",
    "report_epsilon",
    "shuffle_guarantee",
    "shuffled_mb_sgd",
    "srgd_params",
    "tau",
    "zero_out_epsilon",
]
