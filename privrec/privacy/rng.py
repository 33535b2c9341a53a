"""Randomness for noise: OS entropy by default.

Every noise-adding function in privrec takes a ``random_state``. ``None`` (the default) draws a
fresh seed from the operating system's entropy pool (``numpy.random.SeedSequence`` reads
``os.urandom``), which is what the privacy guarantee assumes. An integer or a
``numpy.random.Generator`` makes runs reproducible for experiments and tests. **A fixed seed voids
the privacy guarantee for anyone who knows it**: the noise can be regenerated and subtracted.
"""

from __future__ import annotations

import numbers

import numpy as np


def make_rng(random_state=None) -> np.random.Generator:
    """Return a ``numpy.random.Generator``.

    ``None`` -> seeded from OS entropy (private); int / SeedSequence -> deterministic (experiments
    only, voids the guarantee if the seed is known); a Generator is returned as is.
    """
    if random_state is None:
        return np.random.default_rng()
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(0, 2**63 - 1, dtype=np.int64))
    if isinstance(random_state, np.random.SeedSequence):
        return np.random.default_rng(random_state)
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        return np.random.default_rng(int(random_state))  # same stream as the numpy integer itself
    raise ValueError(f"random_state must be None, an int or a numpy Generator, got {random_state!r}")


def check_noise_random_state(random_state, owner: str = "this estimator"):
    """Validate the ``random_state`` parameter of an estimator that adds privacy noise.

    Accepts ``None`` (OS entropy: the private setting) or an integer / ``SeedSequence`` seed
    (reproducible experiments; a known seed voids the guarantee). A ``numpy.random.Generator`` or
    ``RandomState`` is rejected: it is mutable shared state, and ``sklearn.base.clone`` deep-copies
    it, so every clone of the estimator would draw *identical* noise (on neighbouring datasets the
    noise would then cancel between two fitted clones). Returns ``random_state`` unchanged.
    """
    if isinstance(random_state, (np.random.Generator, np.random.RandomState)):
        raise ValueError(
            f"{owner}: random_state must be None (OS entropy, private) or an int seed, not a "
            f"{type(random_state).__name__}: sklearn.clone deep-copies a generator, so every clone would "
            "draw the same privacy noise"
        )
    if random_state is not None and not (
        isinstance(random_state, (numbers.Integral, np.random.SeedSequence)) and not isinstance(random_state, bool)
    ):
        raise ValueError(f"{owner}: random_state must be None or an int seed, got {random_state!r}")
    if isinstance(random_state, numbers.Integral) and random_state < 0:
        raise ValueError(f"{owner}: random_state must be a non-negative int seed, got {random_state!r}")
    return random_state
