"""ISRL-DP minibatch SGD (Lowy & Razaviyayn, Algorithm 2) as a Flower app: silos add their own noise.

Each silo is a ``ClientApp`` holding its records and its budget (a :class:`~privrec.convex.federated.Silo`).
It answers the server's round-r request with the message of :func:`~privrec.convex.federated.mb_sgd`:
the noisy mean of its clipped per-example gradients at w_r, through its own
:class:`~privrec.convex.federated.SiloChannel` (noise calibrated by the accountant for the R
messages the run plans, at the silo's (eps_i, delta_i)). The silo's randomness is its own: the
stream :func:`~privrec.convex.federated.mbsgd.silo_round_rng` of (its seed, its index, r), where
the seed is its own OS entropy, kept in the silo's ``Context.state`` and never sent, or, for
experiments only, the run's ``random_state``. At the end each silo records the messages it sent
in its own ledger (replace-one, ISRL-DP) and publishes the ledger's report.

The server runs :func:`~privrec.convex.federated.mbsgd.mb_sgd_rounds`, the loop of ``mb_sgd``:
it draws the available silos (``n_available``) from the run's generator, averages the answers,
steps and averages the iterates. It never sees a silo's records or noise.

Same answer: with the same ``random_state`` a Flower run equals ``mb_sgd(..., silo_streams=True)``
bit for bit (coefficients, reports, epsilons): each message is a pure function of (silo, round,
w_r), computed by the same code on the same float64 values.

Dropouts: a silo that fails is asked again for the same round; its answer is the same message
(same stream), so a retry costs no privacy. A silo still silent after ``max_retries`` is left out
of that round (the server averages the answers it has; a round with none makes no step). A silo
left out has sent fewer messages: its ledger records only those (its epsilon can only be
smaller than planned). The round log (``result.info["federation"]``) lists the short rounds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Context, Message

from ...convex.federated import FederatedResult, Silo, SiloSet
from ...convex.federated._common import (
    ISRLRunOptions,
    RunSettings,
    batch_sizes,
    initial_theta,
    make_channels,
)
from ...convex.federated.mbsgd import mb_sgd_label, mb_sgd_paper_variance, mb_sgd_rounds, silo_round_rng
from ...convex.federated.silos import Availability
from ...privacy import make_rng
from ._common import DEFAULT_WAIT, Fault, Federation, check_fault, config_of, content, read_arrays

APP = "isrl"

#: the run options a silo needs to build its channel (the others are the server's)
_SILO_OPTIONS = ("clip", "sampling", "noise", "private")


def _silo_root(state, config: dict[str, Any]) -> np.random.SeedSequence:
    """The silo's seed: the run's ``random_state`` when the experiment fixed one, else the silo's own
    OS entropy, drawn once and kept in its ``Context.state`` (never sent)."""
    given = str(config["random_state"])
    if given:
        return np.random.SeedSequence(int(given))
    name = f"isrl-entropy-{config['job']}"
    if name not in state:
        state[name] = ConfigRecord({"entropy": str(np.random.SeedSequence().entropy)})
    return np.random.SeedSequence(int(str(state[name]["entropy"])))


def _answered(state, job: str) -> set[int]:
    name = f"isrl-answered-{job}"
    return set(json.loads(str(state[name]["rounds"]))) if name in state else set()


def _channel(index: int, silo: Silo, loss, config: dict[str, Any]):
    """The silo's :class:`SiloChannel` for the run (as ``mb_sgd`` builds it for every silo)."""
    run = RunSettings.resolve("mb_sgd", json.loads(str(config["options"])))
    rounds = int(config["rounds"])
    batch = json.loads(str(config["batch_size"]))
    one = SiloSet([Silo(silo.X, silo.y, silo.epsilon, silo.delta, silo.name or f"silo {index}")])
    Ks = batch_sizes(one, batch)
    return make_channels(one, loss, run, Ks, rounds, np.random.default_rng(0), mb_sgd_paper_variance(rounds))[0]


def client_answer(index: int, silo: Silo, loss, config: dict[str, Any], values: dict, state) -> tuple[dict, dict]:
    """One silo's answer to one message: ``(config, arrays)`` of the reply."""
    stage = str(config["stage"])
    if stage == "roster":
        return {"index": int(index), "units": 1, "n_features": int(silo.n_features)}, {}
    job = str(config["job"])
    answered = _answered(state, job)
    chan = _channel(index, silo, loss, config)
    if stage == "message":
        r = int(config["round"])
        chan.sent = len(answered - {r})  # a repeated round is the same message, counted once
        chan.rng = silo_round_rng(_silo_root(state, config), index, r)
        g = chan.gradient(values["theta"])
        state[f"isrl-answered-{job}"] = ConfigRecord({"rounds": json.dumps(sorted(answered | {r}))})
        return {}, {"g": g}
    if stage == "close":
        chan.sent = len(answered)
        report = chan.close(mb_sgd_label(chan.private))
        return {"report": json.dumps(report)}, {}
    raise ValueError(f"unknown ISRL-DP stage {stage!r}")


def register_client(app, load: Callable[[Context], tuple[int, Silo]], loss, fault: Fault | None = None) -> None:
    """Register the ISRL-DP MB-SGD handler (message type ``query.isrl``) on a Flower ``ClientApp``.

    ``load(context) -> (index, silo)``: the silo's index in the federation and its data and budget;
    ``loss``: the privrec convex loss of the run (public)."""

    @app.query(APP)
    def isrl(msg: Message, context: Context) -> Message:
        index, silo = load(context)
        config = config_of(msg.content)
        check_fault(fault, APP, index, config)
        reply_config, reply_arrays = client_answer(index, silo, loss, config, read_arrays(msg.content), context.state)
        return Message(content(reply_config, **reply_arrays), reply_to=msg)


def mb_sgd_on_grid(
    grid,
    loss,
    *,
    rounds: int,
    batch_size,
    step_size,
    min_clients: int = 1,
    wait: float = DEFAULT_WAIT,
    timeout: float | None = None,
    max_retries: int = 2,
    job: str = "",
    averaging: str = "uniform",
    strong_convexity: float = 0.0,
    **options,
) -> FederatedResult:
    """ISRL-DP MB-SGD over the silos of ``grid`` (call it from a ``ServerApp``'s main).

    Arguments as :func:`~privrec.convex.federated.mb_sgd` (``options``: its run options, except
    ``trace``: the server cannot evaluate the objective on the silos' data). Returns a
    :class:`~privrec.convex.federated.FederatedResult` with the silos' published reports and
    epsilons; ``info["federation"]`` is the round log. Equals ``mb_sgd(..., silo_streams=True)``
    with the same ``random_state`` (module docstring)."""
    if options.get("trace"):
        raise ValueError("trace=True needs the silos' data on the server; a Flower run has none")
    run = RunSettings.resolve("mb_sgd", options, ISRLRunOptions)
    if isinstance(run.random_state, np.random.Generator):
        raise ValueError("random_state must be None or an int seed (each silo derives its own streams from it)")
    fed = Federation(
        grid, APP, min_clients=min_clients, wait=wait, timeout=timeout, max_retries=max_retries, job=job, unit="silos"
    )
    roster = fed.connect()
    N = len(roster)
    if sorted(roster) != list(range(N)):
        raise ValueError(f"the silos' indices must be 0..{N - 1}, got {sorted(roster)}")
    dims = {int(r["n_features"]) for r in roster.values()}
    if len(dims) != 1:
        raise ValueError(f"all silos must have the same number of features; got {sorted(dims)}")
    R = int(rounds)
    rng = make_rng(run.random_state)
    avail = run.n_available if isinstance(run.n_available, Availability) else Availability(N, run.n_available)
    theta = initial_theta(loss, dims.pop(), run.theta0)
    common = {
        "options": json.dumps({k: getattr(run, k) for k in _SILO_OPTIONS}),
        "rounds": R,
        "batch_size": json.dumps(batch_size),
        "random_state": "" if run.random_state is None else str(int(run.random_state)),
    }

    def answers(S, w, r):
        replies = fed.ask(f"round {r + 1}", {**common, "stage": "message", "round": r}, {"theta": w}, clients=S)
        return [read_arrays(replies[i])["g"] for i in S if i in replies]

    server: dict[str, Any] = dict(
        averaging=averaging, strong_convexity=strong_convexity, l2=getattr(loss, "l2", 0.0), radius=run.radius
    )
    coef = mb_sgd_rounds(theta, R, lambda r: avail.draw(rng), answers, step_size, **server)
    closing = fed.ask("close", {**common, "stage": "close"})
    missing = sorted(set(range(N)) - set(closing))
    if missing:
        raise RuntimeError(f"silos {missing} did not publish their privacy reports")
    reports = [json.loads(str(config_of(closing[i])["report"])) for i in range(N)]
    epsilons = [float(r["epsilon"]) for r in reports]  # "inf" (JSON-safe) -> math.inf, as mb_sgd's
    info = {"algorithm": "mb_sgd", "rounds": R, "federation": fed.log.as_dict()}
    return FederatedResult(coef, reports, epsilons, [], info)
