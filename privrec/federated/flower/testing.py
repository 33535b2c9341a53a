"""An in-process stand-in for Flower's ``Grid``: the apps' protocol without a runtime (tests, debugging).

:class:`InProcessGrid` runs a ``ClientApp`` for each of ``n_nodes`` nodes in the calling process,
each with its own persistent ``Context`` (``partition-id = k`` plus ``node_configs[k]``), and turns
an exception raised by the app into an error reply, as the runtimes do. Messages are handled one
after the other; nothing is serialised. A ``ServerApp`` main (or :func:`fit_dpals`,
:func:`mb_sgd_on_grid`) given this grid runs exactly as on a runtime, so the answer is the same.
"""

from __future__ import annotations

from flwr.app import Context, Error, Message, RecordDict


class InProcessGrid:
    """The part of Flower's ``Grid`` the apps use (``get_node_ids``, ``send_and_receive``)."""

    def __init__(self, app, n_nodes: int, node_configs: dict | None = None):
        from flwr.supercore.task_identity import TaskIdentity

        TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 0  # messages need an identity
        self.app = app
        self.contexts = {
            1000 + k: Context(
                run_id=1,
                node_id=1000 + k,
                node_config={"partition-id": k, "num-partitions": n_nodes, **(node_configs or {}).get(k, {})},
                state=RecordDict(),
                run_config={},
            )
            for k in range(int(n_nodes))
        }

    def get_node_ids(self) -> list[int]:
        return list(self.contexts)

    def send_and_receive(self, messages, *, timeout=None) -> list[Message]:
        out = []
        for msg in messages:
            try:
                out.append(self.app(msg, self.contexts[msg.metadata.dst_node_id]))
            except Exception as exc:  # a crashed client: an error reply
                out.append(Message(Error(code=0, reason=f"{type(exc).__name__}: {exc}"), reply_to=msg))
        return out
