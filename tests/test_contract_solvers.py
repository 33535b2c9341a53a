"""The solver contract (tests/contract.py) applied to every registered solver
(``privrec.solvers.available_solvers()``), built with ``make_solver``."""

import warnings

import numpy as np
import pytest
from contract import SolverContract

from privrec.solvers import available_solvers, make_solver


class TestExactSolverContract(SolverContract):
    solver_name = "exact"
    private = False


class TestSSPSolverContract(SolverContract):
    solver_name = "ssp"


class TestNoisyGDSolverContract(SolverContract):
    solver_name = "noisy_gd"
    solves_ridge_exactly = False  # an iterative method on a ball: checked against the ridge separately

    def test_many_noise_free_steps_approach_the_ridge(self, batch):
        # a constant step, a ball that never binds and no clipping: plain GD on the ridge objective
        solver = self._make(
            noise_multiplier=0.0,
            budget=None,
            iterations=400,
            schedule=0.5,
            reg=1.0,
            max_norm=1e3,
            label_bound=1e3,
            radius=3.0,
            init=np.full((batch.n_tasks, batch.dim), 0.01),
        )
        params = solver.solve(batch, rng=0).params
        exact = make_solver("exact", reg=1.0).solve(batch).params
        assert np.all(np.linalg.norm(exact, axis=1) < 3.0)  # the ball does not bind at the optimum
        np.testing.assert_allclose(params, exact, rtol=1e-3, atol=1e-4)

    # regression: the ball projection once computed radius / tiny for zero rows (overflow warning)
    def test_zero_init_with_a_large_radius_is_warning_free(self, batch):
        solver = self._make(noise_multiplier=0.0, budget=None, iterations=2, radius=10.0)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            solver.solve(batch, rng=0)


CONTRACTS = {cls.solver_name for cls in (TestExactSolverContract, TestSSPSolverContract, TestNoisyGDSolverContract)}


@pytest.mark.parametrize("name", available_solvers())
def test_every_registered_solver_has_a_contract_test(name):
    assert name in CONTRACTS, f"add a SolverContract subclass for solver {name!r}"
