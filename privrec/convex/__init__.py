"""Generic multi-task convex layer: losses, multi-task DP estimators, joint DP, asynchronous DP.

References: Krichene et al. (ICML 2023), Secs. 3-4 and App. C; Huang et al., "Learning across Data
Owners with Joint Differential Privacy"; Farokhi et al., "The Cost of Privacy in Asynchronous
Differentially-Private Machine Learning".
The federated algorithms live in ``privrec.convex.federated`` (imported from there directly).
"""

from .asynchronous import (
    AsyncDPLearner,
    SpecSquaredLoss,
    cost_bound,
    effective_noise_scale,
    laplace_scale,
    ridge_objective,
    ridge_optimum,
)
from .joint import (
    JointDPSGD,
    PersonalBiasLinear,
    PersonalBiasSoftmax,
    group_privacy,
    paper_noise_std,
    user_level_budget,
)
from .losses import (
    LogisticLoss,
    SoftmaxLoss,
    SquaredLoss,
    clip_gradients,
    clip_gradients_l1,
    clipped_gradient_sum,
)
from .multitask import MultiTaskDPClassifier, MultiTaskDPRegressor, MultiTaskProblem

__all__ = [
    "AsyncDPLearner",
    "JointDPSGD",
    "LogisticLoss",
    "MultiTaskDPClassifier",
    "MultiTaskDPRegressor",
    "MultiTaskProblem",
    "PersonalBiasLinear",
    "PersonalBiasSoftmax",
    "SoftmaxLoss",
    "SpecSquaredLoss",
    "SquaredLoss",
    "clip_gradients",
    "clip_gradients_l1",
    "clipped_gradient_sum",
    "cost_bound",
    "effective_noise_scale",
    "group_privacy",
    "laplace_scale",
    "paper_noise_std",
    "ridge_objective",
    "ridge_optimum",
    "user_level_budget",
]
