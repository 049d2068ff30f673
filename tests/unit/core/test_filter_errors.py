"""A Filter plugin that answers ERROR on one node fails the attempt, as upstream's search is
cancelled by it (``schedule_one.go``), even when enough other nodes are feasible and even on the
daemon's masked fast path, where a rejection of one node is otherwise just one node fewer."""

from __future__ import annotations

import random
from typing import Any, ClassVar

import pytest

from custom_scheduler.config import load_config
from custom_scheduler.core.algorithm import Algorithm
from custom_scheduler.core.cache import Cache
from custom_scheduler.framework.profiles import build_frameworks
from custom_scheduler.framework.registry import PluginSpec, Registry
from custom_scheduler.framework.types import SUCCESS, CycleState, NodeInfo, Status
from custom_scheduler.plugins.builtin import full_registry
from tests.builders import make_node, make_pod

CONFIG = (
    "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
    "profiles: [{schedulerName: s, plugins: {filter: {enabled: [{name: Flaky}]}}}]\n"
)


class _Flaky:
    """Filter: an internal error on node ``n3``, success elsewhere."""

    name: ClassVar[str] = "Flaky"

    def __init__(self, args: Any, handle: Any) -> None: ...

    def filter(self, state: CycleState, pod: Any, node_info: NodeInfo) -> Status:
        return Status.as_error("backend unavailable") if node_info.name == "n3" else SUCCESS


@pytest.mark.parametrize(("find_all", "detail"), [(False, False), (False, True), (True, True)])
def test_a_filter_error_on_one_node_fails_the_attempt(find_all: bool, detail: bool) -> None:
    reg = Registry(full_registry(out_of_tree=False))
    reg.register(PluginSpec(_Flaky.name, _Flaky))
    cache = Cache()
    for i in range(8):
        cache.add_node(make_node(f"n{i}").capacity(cpu="4", memory="8Gi", pods="110").build())
    snap = cache.snapshot()
    fwk = build_frameworks(load_config(CONFIG, reg).profiles, reg, snap, client=None)["s"]
    alg = Algorithm(random.Random(0), percentage_of_nodes_to_score=100)
    with pytest.raises(RuntimeError, match='running "Flaky" filter plugin: backend unavailable'):
        alg.schedule(fwk, CycleState(), make_pod("p").req(cpu="1").build(), snap, find_all=find_all, detail=detail)
