"""The Handle given to plugins: the snapshot of the current cycle, the API client, namespaces.

One implementation serves the daemon, ``explain`` and ``simulate``: they differ only in the
snapshot they hand over and whether a client is present (offline: None).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from custom_scheduler.framework.types import NodeInfo, Snapshot
from custom_scheduler.labels import Selector
from custom_scheduler.model import Pod


class SnapshotHandle:
    def __init__(
        self,
        snapshot: Snapshot,
        *,
        profile_name: str,
        client: Any = None,
        namespace_labels: Callable[[str], Mapping[str, str] | None] | None = None,
        default_spread_selector: Callable[[Pod], Selector | None] | None = None,
    ) -> None:
        self.snapshot = snapshot
        self._profile = profile_name
        self._client = client
        self._ns = namespace_labels or (lambda ns: None)
        self._spread = default_spread_selector or (lambda pod: None)

    def snapshot_nodes(self) -> Sequence[NodeInfo]:
        return self.snapshot.node_list

    def get_node(self, name: str) -> NodeInfo | None:
        return self.snapshot.get(name)

    @property
    def client(self) -> Any:
        return self._client

    @property
    def profile_name(self) -> str:
        return self._profile

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        return self._ns(namespace)

    def default_spread_selector(self, pod: Pod) -> Selector | None:
        return self._spread(pod)
