"""The model contract (tests/contract.py, modelled on implicit's RecommenderBaseTestMixin) applied to
every model class exported by ``privrec.models`` (``MODEL_CLASSES``), DPALS both non-private and
private, with the factor model and the bias (popularity) model."""

import math

import numpy as np
import pytest
from contract import ModelContract

from privrec.models import ALS, DPALS, MODEL_CLASSES, ImplicitALS


def test_every_exported_model_class_has_a_contract_test():
    covered = {ALS, ImplicitALS, DPALS}
    assert set(MODEL_CLASSES.values()) <= covered, "add a ModelContract subclass for the new model class"


class TestALSContract(ModelContract):
    expected_callbacks = 3

    def _get_model(self):
        return ALS(factors=4, iterations=3, random_state=0, num_threads=1)


class TestALSCholeskyContract(ModelContract):
    expected_callbacks = 2

    def _get_model(self):
        return ALS(
            factors=3, iterations=2, solver="cholesky", biases=False, center=False, random_state=1, num_threads=1
        )


class TestImplicitALSContract(ModelContract):
    expected_callbacks = 3

    def _get_model(self):
        return ImplicitALS(factors=4, iterations=3, random_state=0, num_threads=1)


class TestDPALSNonPrivateContract(ModelContract):
    """epsilon = inf: exact counts, no noise; user factors are the billboard projection and are not saved."""

    saves_user_factors = False
    user_factors_are_projection = True
    expected_callbacks = 2

    def _get_model(self):
        return DPALS(epsilon=math.inf, factors=4, iterations=2, random_state=0, num_threads=1)


class TestDPALSPrivateContract(ModelContract):
    """epsilon = 5 (seeded: reproducible, for tests only). An unseen item gets a noisy factor."""

    saves_user_factors = False
    user_factors_are_projection = True
    unseen_items_have_zero_factors = False
    expected_callbacks = 2

    def _get_model(self):
        return DPALS(epsilon=5.0, factors=4, iterations=2, budget=10, random_state=0, num_threads=1)

    def _saved_param_skips(self, model):
        return ("random_state",)  # a private release never carries its noise seed

    def test_saved_private_model_drops_its_noise_seed(self, fitted, tmp_path):
        fitted.save(tmp_path / "m.npz")
        loaded = DPALS.load(tmp_path / "m.npz")
        assert fitted.random_state == 0 and loaded.random_state is None
        assert loaded.privacy_report()["epsilon"] == pytest.approx(fitted.privacy_report()["epsilon"])
        assert loaded.privacy_report()["epsilon"] <= 5.0 + 1e-6


class TestDPALSPrivateGDContract(ModelContract):
    """The noisy-GD item step (AM-DPSGD with adaptive weights)."""

    saves_user_factors = False
    user_factors_are_projection = True
    unseen_items_have_zero_factors = False
    expected_callbacks = 2

    def _get_model(self):
        return DPALS(
            method="ada-dpsgd", epsilon=5.0, factors=3, iterations=2, budget=10, gd_iterations=3, random_state=0
        )

    def _saved_param_skips(self, model):
        return ("random_state",)


class TestDPALSBiasModelContract(ModelContract):
    """factors = 0: the private bias / popularity model. It has no item embeddings, so similar_items
    raises a ValueError by design (checked by the contract's test_similar_items)."""

    has_item_factors = False
    saves_user_factors = False
    user_factors_are_projection = True
    expected_callbacks = 2

    def _get_model(self):
        return DPALS(epsilon=5.0, factors=0, iterations=2, budget=10, random_state=0)

    def _saved_param_skips(self, model):
        return ("random_state",)

    def test_similar_users(self, fitted, ratings):
        # like similar_items, similar_users refuses a model without embeddings (fixed during the
        # contract work: it used to return arbitrary users with similarity 0)
        with pytest.raises(ValueError, match="no user factors .*factors = 0"):
            fitted.similar_users(0, N=5)
        with pytest.raises(ValueError, match="user similarity is undefined"):
            fitted.similar_users(np.arange(3), N=5)
