"""Message plumbing of the Flower apps: records, one round with retries and exclusion, the round log.

A *round* sends one message to every client that takes part in a release and collects the
replies. A client whose reply is an error, or that has not answered within ``timeout`` seconds, is
asked again (``max_retries`` times, with ``attempt`` incremented); a client that still has not
answered is left out of that release. Every message is a pure function of what the client holds
and of the message (seeds included), so a repeated message gets the same answer: a retry never
releases a second, different value. The log (:class:`RoundLog`) records, per release, who
answered, who was left out (and how many users or silos that is), the retries and the array
bytes sent and received per client.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict

#: seconds the server waits for the expected clients to connect before it gives up
DEFAULT_WAIT = 120.0


def arrays(**values) -> ArrayRecord:
    """An ``ArrayRecord`` of numpy arrays (``None`` values are left out)."""
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in values.items() if v is not None})


def read_arrays(content: RecordDict, name: str = "arrays") -> dict[str, np.ndarray]:
    """The numpy arrays of ``content[name]`` (empty when absent)."""
    records = content.array_records
    if name not in records:
        return {}
    return {k: v.numpy() for k, v in records[name].items()}


def config_of(content: RecordDict) -> dict[str, Any]:
    """The configuration values of a message (a plain dict)."""
    records = content.config_records
    return dict(records["config"]) if "config" in records else {}


def payload_bytes(content: RecordDict) -> int:
    """Bytes of a message's arrays (the serialised ``.npy`` buffers) plus its configuration values."""
    total = 0
    for record in content.values():
        if isinstance(record, ArrayRecord):
            total += sum(len(a.data) for a in record.values())
        elif isinstance(record, ConfigRecord):
            total += sum(len(str(v)) for v in record.values())
    return total


def content(config: dict, **values) -> RecordDict:
    """A message content: ``config`` (scalars and strings) and the arrays ``values``."""
    records: dict[str, Any] = {"config": ConfigRecord(config)}
    if any(v is not None for v in values.values()):
        records["arrays"] = arrays(**values)
    return RecordDict(records)


def dumps(value) -> str:
    return json.dumps(value, sort_keys=True)


@dataclass
class RoundLog:
    """Per release (``label``): the clients asked and answered, those left out, retries and bytes.

    ``entries[k]`` is a dict with ``label``, ``clients`` (asked), ``answered``, ``missing`` (client
    indices left out), ``units`` / ``missing_units`` (users of the DP-ALS clients, silos of the
    ISRL-DP apps), ``retries``, ``bytes_to_client`` / ``bytes_from_client`` (array and configuration
    payload of one client's message, the mean over clients that answered) and ``seconds``.
    """

    unit: str = "users"
    entries: list[dict] = field(default_factory=list)

    def short(self) -> list[dict]:
        """The releases that ran with fewer clients than asked."""
        return [e for e in self.entries if e["missing"]]

    def as_dict(self) -> dict:
        return {"unit": self.unit, "rounds": list(self.entries), "short_rounds": [e["label"] for e in self.short()]}


class Federation:
    """The server's side of the clients of one app (``app``: the message type ``query.<app>``).

    ``grid``: the Flower ``Grid`` of the ``ServerApp``. ``min_clients``: clients to wait for (up to
    ``wait`` seconds) before the roster is taken; ``timeout``: seconds per round (``None``: wait
    for every reply); ``max_retries``: times a client that failed a round is asked again;
    ``fault``: tests only (see :func:`privrec.federated.flower.client_app`). ``job``: a tag sent
    with every message (one simulation can run several jobs).
    """

    def __init__(
        self,
        grid,
        app: str,
        *,
        min_clients: int = 1,
        wait: float = DEFAULT_WAIT,
        timeout: float | None = None,
        max_retries: int = 2,
        job: str = "",
        unit: str = "users",
    ):
        self.grid = grid
        self.app = app
        self.min_clients = int(min_clients)
        self.wait = float(wait)
        self.timeout = timeout
        self.max_retries = int(max_retries)
        self.job = job
        self.nodes: dict[int, int] = {}  # client index -> node id
        self.units: dict[int, int] = {}  # client index -> users (or silos) it holds
        self.log = RoundLog(unit)

    # -------------------------------------------------------------- roster
    def connect(self, config: dict | None = None) -> dict[int, dict[str, Any]]:
        """Wait for ``min_clients`` nodes, then ask each for its roster entry (index, units, ...).

        Returns ``{client index: roster config}``; the clients that answer form the federation
        (the roster is fixed from here on)."""
        deadline = time.monotonic() + self.wait
        while True:
            node_ids = sorted(int(n) for n in self.grid.get_node_ids())
            if len(node_ids) >= self.min_clients:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{len(node_ids)} of the {self.min_clients} expected clients connected within {self.wait:g} s"
                )
            time.sleep(0.1)
        replies = self._exchange("roster", {n: n for n in node_ids}, {"stage": "roster", **(config or {})}, {})
        roster: dict[int, dict[str, Any]] = {}
        for node, reply in replies.items():
            cfg = config_of(reply)
            index = int(cfg["index"])
            if index in roster:
                raise ValueError(f"two clients hold the same partition index {index}")
            roster[index] = cfg
            self.nodes[index] = node
            self.units[index] = int(cfg["units"])
        if not roster:
            raise RuntimeError("no client answered the roster request")
        return dict(sorted(roster.items()))

    # -------------------------------------------------------------- one round
    def ask(
        self, label: str, config: dict, values: dict | None = None, clients: Iterable[int] | None = None
    ) -> dict[int, RecordDict]:
        """Send ``config`` and the arrays ``values`` to ``clients`` (default: every client); return
        the replies of those that answered, by client index in increasing order (the summation order)."""
        targets = sorted(self.nodes if clients is None else clients)
        replies = self._exchange(label, {i: self.nodes[i] for i in targets}, config, values or {})
        return dict(sorted(replies.items()))

    def _exchange(self, label: str, targets: dict[int, int], config: dict, values: dict) -> dict[int, RecordDict]:
        t0 = time.perf_counter()
        pending = dict(targets)
        answered: dict[int, RecordDict] = {}
        sent_bytes: list[int] = []
        retries = 0
        for attempt in range(self.max_retries + 1):
            if not pending:
                break
            retries += attempt > 0
            body = {**config, "attempt": attempt, "job": self.job}
            messages = []
            for node in pending.values():
                c = content(body, **values)
                sent_bytes.append(payload_bytes(c))
                messages.append(Message(c, dst_node_id=node, message_type=f"query.{self.app}", group_id=label))
            by_node = {node: key for key, node in pending.items()}
            for reply in self.grid.send_and_receive(messages, timeout=self.timeout):
                key = by_node.get(int(reply.metadata.src_node_id))
                if key is None or reply.has_error() or not reply.has_content():
                    continue
                answered[key] = reply.content
                pending.pop(key, None)
        missing = sorted(pending)
        self.log.entries.append(
            {
                "label": label,
                "clients": len(targets),
                "answered": len(answered),
                "missing": missing,
                "units": int(sum(self.units.get(k, 0) for k in answered)),
                "missing_units": int(sum(self.units.get(k, 0) for k in missing)),
                "retries": retries,
                "bytes_to_client": float(np.mean(sent_bytes)) if sent_bytes else 0.0,
                "bytes_from_client": float(np.mean([payload_bytes(c) for c in answered.values()])) if answered else 0.0,
                "seconds": time.perf_counter() - t0,
            }
        )
        return answered


def summed(replies: dict[int, RecordDict], names: Iterable[str], shapes: dict[str, tuple] | None = None) -> dict:
    """The sums of the arrays ``names`` over ``replies``, added in client-index order (zeros of
    ``shapes[name] = (shape, dtype)`` when nobody answered; ``None`` for an array no reply holds)."""
    names = list(names)
    totals: dict[str, Any] = dict.fromkeys(names)
    for reply in replies.values():
        got = read_arrays(reply)
        for name in names:
            if name in got:
                t = totals[name]
                totals[name] = np.array(got[name], copy=True) if t is None else np.add(t, got[name], out=t)
    for name in names:
        if totals[name] is None and shapes is not None and name in shapes:
            totals[name] = np.zeros(shapes[name][0], dtype=shapes[name][1])
    return totals


Fault = Callable[[dict], bool]


def check_fault(fault: Fault | None, app: str, index: int, config: dict[str, Any]) -> None:
    """Tests only: raise (as a crashed client would) when ``fault`` says so for this message."""
    if fault is None:
        return
    info = {"app": app, "index": index, **config}
    if fault(info):
        raise RuntimeError(f"injected failure of client {index} at {info.get('stage')!r}")
