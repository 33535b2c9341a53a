"""DP-ALS and ISRL-DP MB-SGD as Flower apps (optional extra: ``pip install "privrec[flower]"``).

* :func:`fit_dpals` -- the server side of DP-ALS (call it in a ``ServerApp``'s main): clients
  holding groups of users send per-item statistics, the server adds them, adds the noise once per
  released statistic and keeps the user-level ledger (:mod:`~privrec.federated.flower.dpals`);
* :func:`mb_sgd_on_grid` -- ISRL-DP MB-SGD: silos add their own noise and keep their own ledgers,
  the server averages and steps (:mod:`~privrec.federated.flower.isrl`);
* :func:`client_app`, :func:`simulate`, :func:`fit_simulation`, :func:`mb_sgd_simulation` -- the
  simulation runtime (:mod:`~privrec.federated.flower.simulation`);
  :mod:`privrec.federated.flower.app` -- the ``ServerApp`` / ``ClientApp`` of a deployment
  (SuperLink and SuperNodes; docs/federated-flower.md).

With the same ``random_state`` a Flower run gives the local fit's answer: DP-ALS to float tolerance
with the identical ledger and epsilon, MB-SGD bit for bit (``mb_sgd(..., silo_streams=True)``).

Importing this package turns Flower's telemetry and Ray's usage statistics off
(``FLWR_TELEMETRY_ENABLED=0``, ``RAY_USAGE_STATS_ENABLED=0``) unless they are already set.
"""

import os

# No usage reports from a privacy library's dependencies: Flower's telemetry and Ray's usage stats
# are off unless the user set these variables (read when flwr / ray are first imported, and
# inherited by the simulation's Ray workers). A deployment sets them for its own processes
# (docs/federated-flower.md).
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

try:
    import flwr  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError('privrec.federated.flower needs Flower: pip install "privrec[flower]"') from exc

from ._common import Federation, RoundLog
from .dpals import Shard, fit_dpals, load_shard, privacy_report, save_shard, split_users
from .isrl import mb_sgd_on_grid
from .simulation import backend_config, client_app, fit_simulation, mb_sgd_simulation, partition_id, simulate

__all__ = [
    "Federation",
    "RoundLog",
    "Shard",
    "backend_config",
    "client_app",
    "fit_dpals",
    "fit_simulation",
    "load_shard",
    "mb_sgd_on_grid",
    "mb_sgd_simulation",
    "partition_id",
    "privacy_report",
    "save_shard",
    "simulate",
    "split_users",
]
