"""DP-ALS on Flower vs the local fit on MovieLens 100K: time per round, bytes per client per round.

Three runs of the same ``DPALS`` (same ``random_state``, so the same noise):

* **local** -- ``DPALS.fit`` on the whole matrix in this process;
* **simulation** -- :func:`privrec.federated.flower.fit_simulation` on Flower's simulation runtime
  (Ray backend) with ``--clients`` user groups (consecutive users) and, with ``--one-user``, one
  client per user (943 SuperNodes: on Flower 1.42 this did not finish within 7 minutes here);
* **in-process** (``--in-process [N ...]``) -- the same apps on
  :class:`~privrec.federated.flower.testing.InProcessGrid` (no runtime, no serialisation): the
  protocol's own cost, e.g. with one client per user;
* **deployment** (``--deployment N``) -- a SuperLink and N SuperNodes as separate processes on
  localhost (``flower-superlink``, ``flower-supernode``, each SuperNode reading only its own shard
  file) and ``flwr run`` of ``examples/flower_app`` (:func:`deploy`, also used by the slow test).

Reported per configuration: seconds per round (the server's wall time from sending a round's
messages to holding every answer, Flower's transport included; the local fit's time per ALS step
for comparison), bytes per client per round (serialised arrays plus configuration values of one
client's message, both directions), the largest difference of the released factors from the local
fit, and whether the ledger and epsilon are identical. Two models: the automatic configuration at
epsilon = 5 (on ML-100K the private bias model: factors = 0, one ALS step) and a factor model
(``factors=8, iterations=3``).

Timings on this 2-core machine are contended whenever other jobs run (the load average at the start
is recorded): read them as orders of magnitude.

    python benchmarks/bench_flower.py                       # ML-100K from ../shared/datasets or --data-dir
    python benchmarks/bench_flower.py --clients 10 100 --in-process --deployment 4   # as in results/flower.md
    python benchmarks/bench_flower.py --quick --out /tmp/fl # synthetic, small: a smoke test

Writes ``<out>/flower[_quick].json`` and ``.md`` (``--out`` defaults to benchmarks/results).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import RESULTS, ROOT, environment, log, shared_datasets, write_json, write_text

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # no usage reports (here and in the processes started)
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

APP_DIR = ROOT / "examples" / "flower_app"


# ---------------------------------------------------------------------- a localhost deployment


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {seconds:g} s")


def _toml(value) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def deploy(shards, run_config: dict, workdir, *, timeout: float = 900.0) -> dict:
    """Run ``examples/flower_app`` on a localhost deployment: one ``flower-superlink`` process, one
    ``flower-supernode`` process per shard (its node configuration names its shard file and
    ``partition-id``), then ``flwr run ... --stream``; every process is stopped at the end.

    Returns ``{"output", "commands", "seconds", "report", "model_path"}``: the ``flwr run`` output, the
    commands as run, the wall time of ``flwr run``, the server's report (``report.json``) and the
    released model's file. ``run_config``: values of ``[tool.flwr.app.config]`` to override."""
    from privrec.federated.flower import save_shard

    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    app = work / "app"
    shutil.copytree(APP_DIR, app, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    home = work / "flwr-home"
    home.mkdir(exist_ok=True)
    link_port = _free_port()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "localhost"\n\n[superlink.localhost]\naddress = "127.0.0.1:{link_port}"\ninsecure = true\n'
    )
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, "FLWR_HOME": str(home), "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
    out_dir = work / "output"
    config = {**run_config, "min-clients": len(shards), "output-dir": str(out_dir)}
    commands: list[str] = []
    procs: list[subprocess.Popen] = []

    def start(args: list[str], log_name: str) -> None:
        commands.append(" ".join(args))
        with open(work / log_name, "w") as fh:
            procs.append(subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True))

    try:
        start(
            ["flower-superlink", "--insecure", "--disable-runtime-dependency-installation", "--port", str(link_port)],
            "superlink.log",
        )
        _wait_port(link_port, 60)
        for shard in shards:
            path = work / f"shard-{shard.index}.npz"
            save_shard(path, shard)
            node = f'partition-id={shard.index} data-path="{path}"'
            args = ["flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{link_port}"]
            start([*args, "--port", str(_free_port()), "--node-config", node], f"supernode-{shard.index}.log")
        run_args = ["flwr", "run", str(app), "localhost", "--stream", "--run-config"]
        run_args.append(" ".join(f"{k}={_toml(v)}" for k, v in config.items()))
        commands.append(" ".join(run_args[:-1]) + f" '{run_args[-1]}'")
        t0 = time.perf_counter()
        done = subprocess.run(run_args, env=env, cwd=work, capture_output=True, text=True, timeout=timeout)
        seconds = time.perf_counter() - t0
        output = done.stdout + done.stderr
        report_path = out_dir / "report.json"
        if not report_path.exists():
            raise RuntimeError(f"the deployed run wrote no report; flwr run said:\n{output}")
        report = json.loads(report_path.read_text())
    finally:
        for p in reversed(procs):  # only the processes started here, by their own process group
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
    return {
        "output": output,
        "commands": commands,
        "seconds": seconds,
        "report": report,
        "model_path": str(out_dir / "model.npz"),
    }


# ---------------------------------------------------------------------- measurements


def _round_table(log_: dict) -> list[dict]:
    return [
        {k: e[k] for k in ("label", "clients", "answered", "seconds", "bytes_to_client", "bytes_from_client")}
        for e in log_["rounds"]
    ]


def _compare(fed, local) -> dict:
    scale = float(np.abs(local.item_factors_).max()) if local.item_factors_.size else 0.0
    diff = float(np.abs(fed.item_factors_ - local.item_factors_).max()) if local.item_factors_.size else 0.0
    bias = float(np.abs(fed.item_bias_ - local.item_bias_).max())
    same_ledger = [(e.label, e.event) for e in fed.ledger_.entries] == [
        (e.label, e.event) for e in local.ledger_.entries
    ]
    return {
        "max_factor_diff": diff,
        "factor_scale": scale,
        "max_bias_diff": bias,
        "same_ledger": same_ledger,
        "epsilon": fed.privacy_report()["epsilon"],
        "epsilon_local": local.privacy_report()["epsilon"],
    }


def run_config_case(name: str, settings: dict, R, clients: list[int], quiet: bool, in_process: list[int] = ()) -> dict:
    from privrec.federated.flower import client_app, fit_dpals, fit_simulation, split_users
    from privrec.federated.flower.testing import InProcessGrid
    from privrec.models import DPALS

    t0 = time.perf_counter()
    local = DPALS(**settings).fit(R, show_progress=False)
    local_wall = time.perf_counter() - t0
    steps = local.fit_timings_["steps"]
    case: dict = {
        "name": name,
        "settings": {k: (list(v) if isinstance(v, tuple) else v) for k, v in settings.items()},
        "config": {"method": local.method, **{k: local.config_[k] for k in ("factors", "iterations", "budget")}},
        "local": {
            "wall": local_wall,
            "preprocess": local.fit_timings_["preprocess"],
            "step_mean": float(np.mean(steps)) if steps else 0.0,
        },
        "flower": [],
    }
    runs = [(n, "simulation") for n in clients] + [(n, "in-process") for n in in_process]
    for n, transport in runs:
        log(f"{name}: {transport} with {n} clients", quiet)
        t0 = time.perf_counter()
        if transport == "simulation":
            fed = fit_simulation(DPALS(**settings), R, n_clients=n)
        else:  # the same apps without a runtime: the protocol's own cost
            grid = InProcessGrid(client_app(shards=split_users(R, n)), n)
            fed = fit_dpals(DPALS(**settings), grid, min_clients=n)
        wall = time.perf_counter() - t0
        rounds = _round_table(fed.federation_)
        step_rounds = [r for r in rounds if r["label"].startswith("ALS step")]
        case["flower"].append(
            {
                "clients": n,
                "transport": transport,
                "wall": wall,
                "rounds": rounds,
                "step_round_mean": float(np.mean([r["seconds"] for r in step_rounds])) if step_rounds else 0.0,
                "step_bytes_to_client": step_rounds[0]["bytes_to_client"] if step_rounds else 0.0,
                "step_bytes_from_client": step_rounds[0]["bytes_from_client"] if step_rounds else 0.0,
                **_compare(fed, local),
            }
        )
    return case


def run_deployment(settings: dict, R, n_nodes: int, quiet: bool) -> dict:
    from privrec.federated.flower import split_users
    from privrec.models import DPALS

    local = DPALS(**settings).fit(R, show_progress=False)
    run_config = {"epsilon": float(settings["epsilon"]), "random-state": int(settings["random_state"])}
    run_config.update({k: int(settings.get(k) or 0) for k in ("factors", "iterations")})
    low, high = settings["rating_range"]
    run_config.update({"rating-low": float(low), "rating-high": float(high)})
    log(f"deployment: SuperLink + {n_nodes} SuperNodes on localhost", quiet)
    with tempfile.TemporaryDirectory(prefix="privrec-flower-") as tmp:
        out = deploy(split_users(R, n_nodes), run_config, tmp)
        fed = DPALS.load(out["model_path"])
    ledger_events = [(e["label"], e["event"]) for e in out["report"]["events"]]
    local_events = [(e["label"], e["event"]) for e in local.privacy_report()["events"]]
    scale = float(np.abs(local.item_factors_).max()) if local.item_factors_.size else 0.0
    diff = float(np.abs(fed.item_factors_ - local.item_factors_).max()) if local.item_factors_.size else 0.0
    return {
        "nodes": n_nodes,
        "commands": out["commands"],
        "output": out["output"],
        "seconds": out["seconds"],
        "rounds": _round_table(out["report"]["federation"]),
        "max_factor_diff": diff,
        "factor_scale": scale,
        "max_bias_diff": float(np.abs(fed.item_bias_ - local.item_bias_).max()),
        "same_ledger": ledger_events == local_events,
        "epsilon": out["report"]["epsilon"],
        "epsilon_local": local.privacy_report()["epsilon"],
    }


# ---------------------------------------------------------------------- report


def _kb(v: float) -> str:
    return f"{v / 1024:.1f}"


def markdown(res: dict) -> str:
    lines = [
        "# DP-ALS on Flower vs the local fit (flower)",
        "",
        f"{res['data']}. flwr {res['flwr']}, Ray {res['ray']}; {res['env']['cpus']} CPUs, load average "
        f"{res['load_average']:.1f} at the start (timings are contended when the load exceeds the 2 cores). "
        "Same `random_state` in every run, so the same noise. Round times are the server's wall time from "
        "sending a round to holding every answer (Flower transport included); bytes are one client's "
        "message payload (serialised arrays + configuration values), server to client and back.",
        "",
    ]
    for case in res["cases"]:
        c = case["config"]
        lines += [
            f"## {case['name']}: method {c['method']}, factors {c['factors']}, {c['iterations']} ALS step(s)",
            "",
            f"Local `DPALS.fit`: {case['local']['wall']:.2f} s in all (pre-processing {case['local']['preprocess']:.2f} s, "
            f"{case['local']['step_mean']:.3f} s per ALS step).",
            "",
            "| clients | transport | whole run (s; Ray start included) | s per ALS-step round | KiB to a client per step | "
            "KiB from a client per step | max diff: factors (scale) / biases | ledger, epsilon |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for f in case["flower"]:
            same = "identical" if f["same_ledger"] and f["epsilon"] == f["epsilon_local"] else "DIFFERENT"
            lines.append(
                f"| {f['clients']} | {f['transport']} | {f['wall']:.1f} | {f['step_round_mean']:.3f} | {_kb(f['step_bytes_to_client'])} | "
                f"{_kb(f['step_bytes_from_client'])} | {f['max_factor_diff']:.2g} ({f['factor_scale']:.2g}) / "
                f"{f['max_bias_diff']:.2g} | "
                f"{same}, {f['epsilon']:.4f} |"
            )
        lines += [
            "",
            "Rounds of the first simulation (seconds, KiB per client; the roster round includes the start of Ray's workers):",
            "",
        ]
        lines += ["| round | clients answered | s | KiB to client | KiB from client |", "|---|---|---|---|---|"]
        for r in case["flower"][0]["rounds"]:
            lines.append(
                f"| {r['label']} | {r['answered']}/{r['clients']} | {r['seconds']:.3f} | {_kb(r['bytes_to_client'])} | "
                f"{_kb(r['bytes_from_client'])} |"
            )
        lines.append("")
    dep = res.get("deployment")
    if dep:
        same = "identical" if dep["same_ledger"] and dep["epsilon"] == dep["epsilon_local"] else "DIFFERENT"
        lines += [
            f"## Localhost deployment: SuperLink + {dep['nodes']} SuperNodes (separate processes)",
            "",
            f"Model: {res['deployment_settings']}. `flwr run` took {dep['seconds']:.1f} s; largest factor difference "
            f"from the local fit {dep['max_factor_diff']:.2g} (scale {dep['factor_scale']:.2g}), of the biases "
            f"{dep['max_bias_diff']:.2g}; ledger and epsilon "
            f"{same} ({dep['epsilon']:.4f}). Each SuperNode starts a `flwr-clientapp` process per message "
            "(Flower's subprocess isolation), which dominates the round time.",
            "",
            "Commands:",
            "",
            "```",
            *dep["commands"],
            "```",
            "",
            "| round | clients answered | s | KiB to client | KiB from client |",
            "|---|---|---|---|---|",
        ]
        for r in dep["rounds"]:
            lines.append(
                f"| {r['label']} | {r['answered']}/{r['clients']} | {r['seconds']:.2f} | {_kb(r['bytes_to_client'])} | "
                f"{_kb(r['bytes_from_client'])} |"
            )
        lines += ["", "`flwr run` output:", "", "```", *_tail(dep["output"]), "```", ""]
    return "\n".join(lines)


def _tail(text: str, n: int = 12) -> list[str]:
    import re

    clean = [re.sub(r"\x1b\[[0-9;]*m", "", line).rstrip() for line in text.splitlines()]
    return [line for line in clean if line.strip()][-n:]


# ---------------------------------------------------------------------- main


def load_ratings(args):
    """ML-100K (an ``Interactions``) and a description, or ``None`` when the files are not there."""
    from privrec.data import DatasetNotFoundError, load_dataset

    if args.quick:
        import scipy.sparse as sp

        rng = np.random.default_rng(0)
        R = sp.random(300, 120, density=0.08, random_state=1, format="csr", data_rvs=lambda k: rng.integers(1, 6, k))
        return R.astype(np.float32), "synthetic 300 users x 120 items (quick)"
    folder = args.data_dir or (shared_datasets() / "ml-100k" if shared_datasets() else None)
    try:
        data = load_dataset("ml-100k", data_dir=folder)
    except DatasetNotFoundError as exc:
        log(f"ML-100K not found ({exc}); pass --data-dir or use --quick")
        return None
    return (
        data,
        f"MovieLens 100K: {data.shape[0]} users x {data.shape[1]} items, {data.nnz} ratings (users keyed on their ids)",
    )


def main(argv=None) -> int:
    import flwr
    import ray

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data-dir", default=None)
    p.add_argument("--clients", type=int, nargs="+", default=[10], help="user groups of each simulation (default 10)")
    p.add_argument("--one-user", action="store_true", help="also simulate one client per user (slow on Ray)")
    p.add_argument(
        "--in-process",
        type=int,
        nargs="*",
        default=None,
        help="also run the apps on the in-process grid with these client counts (no count: one client per user)",
    )
    p.add_argument("--deployment", type=int, default=0, help="SuperNodes of a localhost deployment (0: none)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    loaded = load_ratings(args)
    if loaded is None:
        return 0
    R, description = loaded
    # declared axes (the clients' users and items, as the local fit of the matrix it is compared with)
    base = dict(epsilon=5.0, random_state=7, rating_range=(1, 5), axes="warn")
    cases = [("automatic configuration", base), ("factor model", {**base, "factors": 8, "iterations": 3})]
    clients = list(args.clients) + ([R.shape[0]] if args.one_user else [])
    in_process = [] if args.in_process is None else (list(args.in_process) or [R.shape[0]])
    res: dict = {
        "data": description,
        "env": environment(),
        "load_average": os.getloadavg()[0],
        "flwr": flwr.__version__,
        "ray": ray.__version__,
        "cases": [run_config_case(name, s, R, clients, False, in_process) for name, s in cases],
    }
    if args.deployment:
        res["deployment_settings"] = dict(cases[1][1])
        res["deployment"] = run_deployment(cases[1][1], R, args.deployment, False)
    stem = "flower_quick" if args.quick else "flower"
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / f"{stem}.json", res)
    write_text(args.out / f"{stem}.md", markdown(res))
    log(f"wrote {args.out / stem}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
