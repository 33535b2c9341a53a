"""Privacy core: mechanisms that return DpEvents, the ledger, calibration, clipping, randomness.

Accounting follows Krichene et al. (ICML 2023): user-level RDP (Sec. 2.2), Thm 3.3, the private counts
and the composition over Algorithm 3 (App. D.1), and the authors' reference implementation.
"""

from .budget import (
    Budget,
    BudgetExceededError,
    BudgetFileError,
    BudgetRelease,
    Charge,
    fit_with_budget,
    plan_fit,
)
from .calibration import (
    SplitCalibration,
    calibrate_noise_multiplier,
    calibrate_with_split,
    default_count_fraction,
    gaussian_rho,
    suggested_delta,
)
from .clipping import clip_labels, clip_rows, clip_vector
from .ledger import (
    DEFAULT_RDP_ORDERS,
    PrivacyLedger,
    epsilon_from_report,
    epsilon_of_event,
    event_from_dict,
    event_to_dict,
)
from .mechanisms import (
    Release,
    add_symmetric_gaussian_noise,
    compose,
    fixed_size_subsampled_gaussian_event,
    gaussian_event,
    gaussian_mechanism,
    gaussian_noise,
    laplace_event,
    laplace_mechanism,
    laplace_noise,
    poisson_subsampled_gaussian_event,
    symmetric_gaussian_noise,
)
from .rng import check_noise_random_state, make_rng
from .tree import (
    TreeAggregator,
    leaf_nodes,
    node_multiplier_for,
    node_range,
    prefix_nodes,
    tree_depth,
    tree_noise_multiplier_event,
)

__all__ = [
    "add_symmetric_gaussian_noise",
    "Budget",
    "BudgetExceededError",
    "BudgetFileError",
    "BudgetRelease",
    "Charge",
    "fit_with_budget",
    "plan_fit",
    "DEFAULT_RDP_ORDERS",
    "PrivacyLedger",
    "Release",
    "SplitCalibration",
    "TreeAggregator",
    "calibrate_noise_multiplier",
    "calibrate_with_split",
    "check_noise_random_state",
    "clip_labels",
    "clip_rows",
    "clip_vector",
    "compose",
    "default_count_fraction",
    "epsilon_from_report",
    "epsilon_of_event",
    "event_from_dict",
    "event_to_dict",
    "fixed_size_subsampled_gaussian_event",
    "gaussian_event",
    "gaussian_mechanism",
    "gaussian_noise",
    "gaussian_rho",
    "suggested_delta",
    "laplace_event",
    "laplace_mechanism",
    "laplace_noise",
    "leaf_nodes",
    "make_rng",
    "node_multiplier_for",
    "node_range",
    "poisson_subsampled_gaussian_event",
    "prefix_nodes",
    "symmetric_gaussian_noise",
    "tree_depth",
    "tree_noise_multiplier_event",
]
