"""Private pre-processing and per-user budget allocation (Krichene et al., ICML 2023, Sec. 4, App. D.1).

* counts: :func:`private_item_counts`, :func:`private_global_mean`, :func:`head_items`,
  :func:`private_head_items` — each returns a :class:`NoisyStatistic` with its DpEvents.
* weights: :func:`uniform_weights`, :func:`tail_weights`, :func:`adaptive_weights` — weights CSR
  aligned with the interactions, ``max_user sum w^2 <= beta`` enforced (:func:`enforce_budget`).

Per-user sampling (the count / mean samples, uniform and tail allocations) is keyed on a secret
:func:`sampling_key` and on each user's stable identity, :func:`stable_user_keys` of the user's id
(``user_keys=``; without it the row index, which *is* the id of a bare matrix), so removing one
user leaves every other user's sample unchanged even for someone who knows the key.
"""

from ._rows import keyed_uniform, sampling_key, stable_user_keys
from .counts import (
    NoisyStatistic,
    head_items,
    private_global_mean,
    private_head_items,
    private_item_counts,
    release_global_mean,
    release_item_counts,
    sampled_item_counts,
    sampled_rating_sum,
)
from .weights import (
    adaptive_task_weights,
    adaptive_weights,
    enforce_budget,
    tail_weights,
    uniform_weights,
    user_spend,
)

__all__ = [
    "NoisyStatistic",
    "private_item_counts",
    "private_global_mean",
    "head_items",
    "private_head_items",
    "sampled_item_counts",
    "release_item_counts",
    "sampled_rating_sum",
    "release_global_mean",
    "sampling_key",
    "stable_user_keys",
    "keyed_uniform",
    "uniform_weights",
    "tail_weights",
    "adaptive_weights",
    "adaptive_task_weights",
    "enforce_budget",
    "user_spend",
]
