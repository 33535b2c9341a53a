"""Multi-task DP estimators (spec 004 §2-§4): exact reductions, budget invariants, accounting, end to end."""

import math

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import Ridge

from privrec.convex.multitask import MultiTaskDPClassifier, MultiTaskDPRegressor, MultiTaskProblem
from privrec.privacy import epsilon_from_report
from privrec.solvers import weighted_statistics


def _problem(rng, n_users=120, n_tasks=6, d=3, k=None, per_example=False, skew=True):
    """Each user joins k tasks (fixed k -> equal per-user weights) or a skewed random subset."""
    theta = rng.standard_normal((n_tasks, d)) / math.sqrt(d)
    U = rng.standard_normal((n_users, d))
    U /= np.maximum(1.0, np.linalg.norm(U, axis=1))[:, None]
    tasks, users = [], []
    p = np.linspace(1.0, 0.15, n_tasks) if skew else np.full(n_tasks, 0.5)
    for j in range(n_users):
        if k is not None:
            ts = rng.choice(n_tasks, size=k, replace=False)
        else:
            ts = np.flatnonzero(rng.random(n_tasks) < p)
            if ts.size == 0:
                ts = np.array([0])
        tasks.append(ts)
        users.append(np.full(ts.size, j))
    tasks, users = np.concatenate(tasks), np.concatenate(users)
    if per_example:
        X = U[users] + 0.1 * rng.standard_normal((users.size, d))
        X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
        y = np.einsum("ij,ij->i", X, theta[tasks]) + 0.01 * rng.standard_normal(users.size)
        return MultiTaskProblem(tasks, users, y, features=X, n_tasks=n_tasks), theta
    y = np.einsum("ij,ij->i", U[users], theta[tasks]) + 0.01 * rng.standard_normal(users.size)
    return MultiTaskProblem(tasks, users, y, user_features=U, n_tasks=n_tasks), theta


def test_noise_free_ssp_equals_per_task_ridge():
    rng = np.random.default_rng(0)
    prob, _ = _problem(rng, k=3)
    reg, beta = 0.3, 2.0
    est = MultiTaskDPRegressor(
        solver="ssp",
        epsilon=math.inf,
        weight_exponent=0.0,
        weight_mode="per_user",
        budget=beta,
        reg=reg,
        label_bound=10.0,
    ).fit(problem=prob)
    c = math.sqrt(beta / 3)  # every user spends beta over its 3 tasks
    np.testing.assert_allclose(est.weights_, c)
    X = prob.example_features()
    for i in range(prob.n_tasks):
        m = prob.tasks == i
        ridge = Ridge(alpha=reg / c, fit_intercept=False).fit(X[m], prob.labels[m])
        np.testing.assert_allclose(est.params_[i], ridge.coef_, rtol=1e-8, atol=1e-10)
    assert est.privacy_report()["epsilon"] == "inf"


@pytest.mark.parametrize("mode", ["global", "per_user"])
def test_noise_free_weighted_reduction_and_noisy_gd_agrees(mode):
    rng = np.random.default_rng(1)
    prob, _ = _problem(rng, per_example=True)
    counts = prob.task_counts().astype(float)
    kw = dict(epsilon=math.inf, weight_exponent=0.5, weight_mode=mode, reg=0.2, task_counts=counts, budget=1.0)
    est = MultiTaskDPRegressor(solver="ssp", **kw).fit(problem=prob)
    X, w = prob.example_features(), est.weights_
    for i in range(prob.n_tasks):
        m = prob.tasks == i
        A = (X[m] * w[m, None]).T @ X[m] + 0.2 * np.eye(3)
        np.testing.assert_allclose(
            est.params_[i], np.linalg.solve(A, (X[m] * w[m, None]).T @ prob.labels[m]), rtol=1e-8
        )
    gd = MultiTaskDPRegressor(solver="noisy_gd", iterations=400, schedule=0.05, radius=10.0, **kw).fit(problem=prob)
    np.testing.assert_allclose(gd.params_, est.params_, atol=2e-3)


@pytest.mark.parametrize("mu", [0.0, 0.25, 0.5, 1.0])
@pytest.mark.parametrize("mode", ["global", "per_user"])
def test_per_user_budget_invariant(mu, mode):
    rng = np.random.default_rng(2)
    prob, _ = _problem(rng, n_users=200)
    est = MultiTaskDPRegressor(epsilon=2.0, weight_exponent=mu, weight_mode=mode, budget=1.5, random_state=0).fit(
        problem=prob
    )
    assert prob.user_spend(est.weights_).max() <= 1.5 * (1 + 1e-9)
    if mode == "per_user":
        np.testing.assert_allclose(prob.user_spend(est.weights_), 1.5, rtol=1e-5)
    if mu > 0:
        # heavier weights on rarer tasks (weights decrease with the released count)
        multi = np.flatnonzero(np.bincount(prob.user_index) >= 3)
        assert multi.size > 10
        for j in multi[:10]:
            sel = prob.user_index == j
            c = est.task_counts_used_[prob.tasks[sel]]
            assert np.all(np.diff(est.weights_[sel][np.argsort(c)]) <= 1e-12)


def test_removing_one_user_moves_statistics_within_declared_sensitivity():
    rng = np.random.default_rng(3)
    prob, _ = _problem(rng, n_users=60, per_example=True)
    X, y = prob.example_features() * 3, prob.labels * 5  # clipping must bind
    counts = prob.task_counts().astype(float)  # public counts: other users' weights stay put
    beta, gx, lb = 1.0, 1.0, 0.5
    full = MultiTaskProblem(prob.tasks, prob.user_index, y, features=X, n_tasks=prob.n_tasks)
    est = MultiTaskDPRegressor(
        epsilon=math.inf, weight_exponent=0.5, task_counts=counts, budget=beta, max_norm=gx, label_bound=lb
    ).fit(problem=full)
    G, b = weighted_statistics(full.task_batch(est.weights_), gx, lb)
    for j in range(0, 60, 7):
        keep = full.user_index != j
        sub = MultiTaskProblem(full.tasks[keep], full.user_index[keep], y[keep], features=X[keep], n_tasks=prob.n_tasks)
        G2, b2 = weighted_statistics(sub.task_batch(est.weights_[keep]), gx, lb)
        assert np.linalg.norm(G - G2) <= math.sqrt(beta) * gx**2 + 1e-9
        assert np.linalg.norm(b - b2) <= math.sqrt(beta) * gx * lb + 1e-9


@pytest.mark.parametrize("solver", ["ssp", "noisy_gd"])
@pytest.mark.parametrize("counts", ["private", "public"])
def test_reported_epsilon_is_accountants_and_recomputes(solver, counts):
    rng = np.random.default_rng(4)
    prob, _ = _problem(rng)
    tc = "private" if counts == "private" else prob.task_counts().astype(float)
    est = MultiTaskDPRegressor(
        solver=solver, epsilon=1.5, delta=1e-6, task_counts=tc, iterations=20, random_state=0
    ).fit(problem=prob)
    rep = est.privacy_report()
    assert 1.5 * 0.99 <= rep["epsilon"] <= 1.5
    assert epsilon_from_report(rep) == pytest.approx(rep["epsilon"], rel=1e-9)
    labels = [e["label"] for e in rep["events"]]
    assert ("task counts" in labels) == (counts == "private")
    assert rep["task_counts"] == ("private" if counts == "private" else "public (supplied)")


def test_ssp_adaptive_beats_uniform_at_low_epsilon_on_skewed_tasks():
    rng = np.random.default_rng(5)
    prob, theta = _problem(rng, n_users=3000, n_tasks=8)
    counts = prob.task_counts().astype(float)
    err = {}
    for mu in (0.0, 0.5):
        e = []
        for seed in range(3):
            est = MultiTaskDPRegressor(
                solver="ssp", epsilon=1.0, weight_exponent=mu, task_counts=counts, reg=5.0, random_state=seed
            ).fit(problem=prob)
            e.append(np.mean((est.params_ - theta) ** 2))
        err[mu] = np.mean(e)
    assert err[0.5] < err[0.0]


def test_classifier_end_to_end_and_accounting():
    rng = np.random.default_rng(6)
    n, m, d = 400, 4, 3
    users = np.repeat(np.arange(n), 2)
    tasks = np.concatenate([rng.choice(m, 2, replace=False) for _ in range(n)])
    X = rng.standard_normal((users.size, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    theta = rng.standard_normal((m, d)) * 6
    y = (np.einsum("ij,ij->i", X, theta[tasks]) > 0).astype(int)
    clf = MultiTaskDPClassifier(epsilon=8.0, iterations=30, budget=1.0, random_state=0).fit(X, y, tasks, users)
    assert clf.score(X, y, tasks) > 0.85
    proba = clf.predict_proba(X, tasks)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    rep = clf.privacy_report()
    assert 8.0 * 0.99 <= rep["epsilon"] <= 8.0
    assert epsilon_from_report(rep) == pytest.approx(rep["epsilon"], rel=1e-9)
    free = MultiTaskDPClassifier(
        epsilon=math.inf, iterations=200, task_counts=np.bincount(tasks).astype(float), budget=1.0
    ).fit(X, y, tasks, users)
    assert free.score(X, y, tasks) >= clf.score(X, y, tasks) - 0.02
    assert free.privacy_report()["epsilon"] == "inf"


def test_bad_input():
    X = np.zeros((3, 2))
    with pytest.raises(ValueError, match="at most once"):
        MultiTaskProblem([0, 0, 1], [5, 5, 5], [1.0, 2.0, 3.0], features=X)
    with pytest.raises(ValueError, match="exactly one"):
        MultiTaskProblem([0, 1, 1], [1, 1, 2], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="integer task"):
        MultiTaskProblem([0.5, 1, 1], [1, 1, 2], [1.0, 2.0, 3.0], features=X)
    with pytest.raises(ValueError, match="NaN"):
        MultiTaskProblem([0, 1, 1], [1, 1, 2], [np.nan, 2.0, 3.0], features=X)
    prob = MultiTaskProblem([0, 1, 1], [1, 1, 2], [1.0, 2.0, 3.0], features=np.eye(3)[:, :2])
    with pytest.raises(ValueError, match="solver"):
        MultiTaskDPRegressor(solver="als").fit(problem=prob)
    with pytest.raises(ValueError, match="weight_exponent"):
        MultiTaskDPRegressor(weight_exponent=1.5).fit(problem=prob)
    with pytest.raises(ValueError, match="epsilon"):
        MultiTaskDPRegressor(epsilon=0).fit(problem=prob)
    with pytest.raises(ValueError, match="task_counts"):
        MultiTaskDPRegressor(task_counts=[1.0]).fit(problem=prob)
    with pytest.raises(ValueError, match="tasks= and users="):
        MultiTaskDPRegressor().fit(X, np.zeros(3))
    with pytest.raises(ValueError, match="0 or 1"):
        MultiTaskDPClassifier().fit(problem=prob)
    with pytest.raises(NotFittedError, match="not fitted"):
        MultiTaskDPRegressor().predict(X, [0, 0, 0])


def test_scikit_learn_conventions():
    from sklearn.base import clone

    est = MultiTaskDPRegressor(solver="noisy_gd", epsilon=3.0, weight_exponent=0.25)
    params = est.get_params()
    assert params["epsilon"] == 3.0 and params["solver"] == "noisy_gd" and params["weight_exponent"] == 0.25
    twin = clone(est)
    assert twin.get_params() == params and not hasattr(twin, "params_")
    assert clone(MultiTaskDPClassifier(iterations=7)).iterations == 7


@pytest.mark.parametrize("mode,n_users", [("per_user", None), ("global", 500)])
def test_removing_a_user_leaves_every_other_users_weights_unchanged(mode, n_users):
    """User-level DP needs each user's weights to depend on nothing but public values, their own
    data and released counts: the default per-user mode always, the global mode given a public n."""
    rng = np.random.default_rng(5)
    problem, _ = _problem(rng, n_users=80, per_example=True)
    counts = np.bincount(problem.tasks, minlength=problem.n_tasks).astype(float) + 3.0  # "public"
    kw = dict(epsilon=math.inf, weight_exponent=0.5, weight_mode=mode, n_users=n_users, task_counts=counts)
    full = MultiTaskDPRegressor(**kw).fit(problem=problem)
    keep = problem.user_index != problem.user_index.max()
    X, y = problem.features[keep], problem.labels[keep]
    reduced = MultiTaskProblem(problem.tasks[keep], problem.user_index[keep], y, features=X, n_tasks=problem.n_tasks)
    smaller = MultiTaskDPRegressor(**kw).fit(problem=reduced)
    np.testing.assert_array_equal(full.weights_[keep], smaller.weights_)


def test_default_weight_mode_is_per_user():
    assert MultiTaskDPRegressor().weight_mode == "per_user"
    assert MultiTaskDPClassifier().weight_mode == "per_user"


# ------------------------------------------------------------------ privacy audit fixes (A, B)
@pytest.mark.parametrize("cls", [MultiTaskDPRegressor, MultiTaskDPClassifier])
def test_clone_with_generator_random_state_is_rejected_at_fit(cls):
    """sklearn.clone deep-copies a Generator: every clone would draw identical noise."""
    from sklearn.base import clone

    rng = np.random.default_rng(7)
    prob, _ = _problem(rng, n_users=40)
    prob = MultiTaskProblem(
        prob.tasks,
        prob.user_index,
        (prob.labels > 0).astype(float),
        user_features=prob.user_features,
        n_tasks=prob.n_tasks,
    )
    twin = clone(cls(epsilon=1.0, iterations=3, random_state=np.random.default_rng(0)))
    with pytest.raises(ValueError, match="random_state"):
        twin.fit(problem=prob)
    with pytest.raises(ValueError, match="random_state"):
        cls(random_state=np.random.RandomState(0)).fit(problem=prob)
    # None (OS entropy) and int seeds are accepted; clones with None draw different noise
    a, b = clone(cls(epsilon=1.0, iterations=3)), clone(cls(epsilon=1.0, iterations=3))
    assert not np.allclose(a.fit(problem=prob).params_, b.fit(problem=prob).params_)
    s1 = cls(epsilon=1.0, iterations=3, random_state=3).fit(problem=prob).params_
    s2 = clone(cls(epsilon=1.0, iterations=3, random_state=3)).fit(problem=prob).params_
    np.testing.assert_array_equal(s1, s2)


@pytest.mark.parametrize("solver", ["ssp", "noisy_gd"])
def test_solver_info_holds_no_private_spend(solver):
    """The exact max per-user spend is a function of private data: only the declared budget is kept."""
    rng = np.random.default_rng(8)
    prob, _ = _problem(rng, n_users=60, per_example=True)
    est = MultiTaskDPRegressor(
        solver=solver, epsilon=1.0, weight_mode="global", budget=1.7, iterations=5, random_state=0
    ).fit(problem=prob)
    spend = prob.user_spend(est.weights_)
    assert spend.min() < spend.max() <= 1.7 * (1 + 1e-9)  # per-user spend is a statistic of the data
    assert "unit_budget" not in est.solver_info_
    assert set(est.solver_info_) <= {"solver", "iterations", "projected_tasks", "budget"}
    assert est.solver_info_["budget"] == 1.7


def test_fitted_attributes_are_documented_released_public_or_private():
    """Every fitted attribute is in the module docstring's list (released / public / private)."""
    import privrec.convex.multitask as M

    rng = np.random.default_rng(9)
    prob, _ = _problem(rng, n_users=40)
    documented = {
        "params_",
        "task_counts_used_",
        "ledger_",
        "noise_multiplier_",
        "count_noise_multiplier_",
        "epsilon_target_",
        "delta_",
        "budget_",
        "counts_source_",
        "n_tasks_",
        "solver_info_",
        "weights_",
    }
    est = MultiTaskDPRegressor(epsilon=1.0, random_state=0).fit(problem=prob)
    fitted = {k for k in vars(est) if k.endswith("_") and not k.startswith("_")}
    assert fitted <= documented, fitted - documented
    assert all(f"``{name}``" in M.__doc__ for name in documented)
