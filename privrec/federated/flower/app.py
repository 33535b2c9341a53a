"""The ``ServerApp`` and ``ClientApp`` of a deployed DP-ALS federation (SuperLink + SuperNodes).

``serverapp`` fits a :class:`~privrec.models.DPALS` with :func:`~privrec.federated.flower.fit_dpals`
from the run configuration (``[tool.flwr.app.config]`` of the app's ``pyproject.toml``, overridable
with ``flwr run --run-config``):

* ``epsilon``, ``delta``, ``method``, ``factors`` / ``iterations`` (0: automatic), ``rating-low`` /
  ``rating-high`` (the public rating range; equal values: none), ``random-state`` (-1: OS entropy,
  the private setting; a seed is for experiments and voids the guarantee);
* ``axes`` (``"release"``, the default: the noisy user count and the private item selection first,
  add/remove DP; ``"warn"``: the clients' users and items are the declared roster and catalogue,
  zero-out), ``roster`` / ``catalogue`` (``true``: that axis is declared public, not released);
* ``min-clients`` (SuperNodes to wait for), ``wait`` (seconds), ``timeout`` (seconds per round,
  0: none), ``max-retries``;
* ``output-dir``: where the server writes the released model (``model.npz``, :meth:`DPALS.save`)
  and ``report.json`` (the privacy report with the federation's trust statement and round log).

``clientapp`` serves the users of the shard file named by its SuperNode's node configuration
``data-path`` (written by :func:`~privrec.federated.flower.save_shard`); only that SuperNode reads it.
See docs/federated-flower.md for the commands.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from flwr.app import Context
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from . import dpals as _dpals

if TYPE_CHECKING:
    from ...models import DPALS

serverapp = ServerApp()
clientapp = ClientApp()


def model_from_config(run_config) -> DPALS:
    """The :class:`~privrec.models.DPALS` the run configuration describes (public settings only)."""
    from ...models import DPALS

    c = dict(run_config)
    low, high = float(c.get("rating-low", 0.0)), float(c.get("rating-high", 0.0))
    seed = int(c.get("random-state", -1))
    return DPALS(
        epsilon=float(c.get("epsilon", 5.0)),
        delta=float(c.get("delta", 1e-5)),
        method=str(c.get("method", "ada-dpals")),
        factors=int(c["factors"]) if int(c.get("factors", 0)) > 0 else None,
        iterations=int(c["iterations"]) if int(c.get("iterations", 0)) > 0 else None,
        rating_range=(low, high) if high > low else None,
        random_state=None if seed < 0 else seed,
        axes=str(c.get("axes", "release")),
    )


def _flag(run_config: dict, key: str) -> bool:
    """A boolean run-configuration entry (``true`` / ``false``, or 1 / 0)."""
    value = run_config.get(key, False)
    if isinstance(value, str):
        if value.strip().lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"run configuration {key!r} must be true or false, got {value!r}")
        return value.strip().lower() in ("true", "1")
    return bool(value)


@serverapp.main()
def main(grid: Grid, context: Context) -> None:
    c = dict(context.run_config)
    model = model_from_config(c)
    timeout = float(c.get("timeout", 0.0))
    _dpals.fit_dpals(
        model,
        grid,
        min_clients=int(c.get("min-clients", 1)),
        wait=float(c.get("wait", 120.0)),
        timeout=timeout if timeout > 0 else None,
        max_retries=int(c.get("max-retries", 2)),
        roster=_flag(c, "roster"),
        catalogue=_flag(c, "catalogue"),
    )
    out = Path(str(c.get("output-dir", "privrec-flower-output"))).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    model.save(out / "model.npz")
    report = _dpals.privacy_report(model)
    (out / "report.json").write_text(json.dumps(report, indent=2, default=_json_default))
    rounds = report["federation"]["rounds"]
    print(
        f"privrec: DP-ALS released {model.item_factors_.shape[0]} items x {model.item_factors_.shape[1]} factors "
        f"at epsilon={report['epsilon']:.4f} (delta={report['delta']:g}) from {rounds[0]['answered']} clients; "
        f"{len(report['federation']['short_rounds'])} short rounds; written to {out}",
        flush=True,
    )


def _json_default(value):
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return str(value)


_dpals.register_client(clientapp, lambda context: _dpals.load_shard(str(context.node_config["data-path"])))
