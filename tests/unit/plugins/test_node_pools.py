"""NodePools: membership criteria (any of), pool-node isolation both ways, reasons, args."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import pytest

from custom_scheduler.api import labels
from custom_scheduler.api.model import Node, Pod
from custom_scheduler.errors import ConfigError
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.types import SKIP, SUCCESS, Code, CycleState, NodeInfo, Status
from custom_scheduler.plugins import node_pools as np
from tests.builders import make_node, make_pod
from tests.unit.plugins.support import StubHandle, node_info

POOL_KEY = "custom-scheduler.io/pool"

CONFIG: dict[str, Any] = {
    "pools": [
        {
            "name": "bigdata",
            "nodeSelector": {"matchLabels": {POOL_KEY: "bigdata"}},
            "members": {
                "labelSelector": {"matchLabels": {"workload-class": "bigdata"}},
                "namespaces": ["analytics"],
                "minRequests": {"cpu": "8", "memory": "32Gi"},
            },
        },
        {
            "name": "online",
            "nodeSelector": {"matchExpressions": [{"key": POOL_KEY, "operator": "In", "values": ["online"]}]},
            "members": {"minPriority": 100000, "namespaceSelector": {"matchLabels": {"tier": "online"}}},
        },
    ]
}
ARGS = np.parse_args(CONFIG, "args")


class NsHandle(StubHandle):
    """A stub handle that knows namespace labels."""

    def __init__(self, nodes: Sequence[NodeInfo] = (), ns_labels: Mapping[str, Mapping[str, str]] | None = None):
        super().__init__(nodes)
        self._ns = dict(ns_labels or {})

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        return self._ns.get(namespace)


HANDLE = cast(Handle, NsHandle(ns_labels={"shop": {"tier": "online"}, "dev": {"tier": "dev"}}))


def pool_node(pool: str | None, name: str = "n") -> Node:
    b = make_node(name)
    if pool is not None:
        b.label(POOL_KEY, pool)
    return b.build()


def run(pod: Pod, node: Node, args: np.NodePoolsArgs = ARGS) -> Status:
    pl = np.NodePools(args, HANDLE)
    state = CycleState()
    ni = node_info(node)
    pre = pl.pre_filter(state, pod, [ni])
    if pre.is_skip:
        return SUCCESS
    assert pre.is_success
    return pl.filter(state, pod, ni)


NOT_BIGDATA = Status.unresolvable('node(s) belong to pool "bigdata" and the pod is not a member')
NOT_ONLINE = Status.unresolvable('node(s) belong to pool "online" and the pod is not a member')
OUTSIDE_BIGDATA = Status.unresolvable('node(s) are outside pool "bigdata" required by the pod')
OUTSIDE_BOTH = Status.unresolvable('node(s) are outside pools "bigdata", "online" required by the pod')

small = make_pod("small").req(cpu="1", memory="1Gi").build()
by_label = make_pod().label("workload-class", "bigdata").build()
by_namespace = make_pod(namespace="analytics").build()
by_cpu = make_pod().req(cpu="8").build()
by_memory = make_pod().req(memory="32Gi").build()
just_below = make_pod().req(cpu="7999m", memory="31Gi").build()
by_init_container = make_pod().init_req({"cpu": "8"}).build()
by_priority = make_pod().priority(100000).build()
below_priority = make_pod().priority(99999).build()
by_ns_labels = make_pod(namespace="shop").build()
ns_other_labels = make_pod(namespace="dev").build()
ns_unknown = make_pod(namespace="nowhere").build()
in_both = make_pod(namespace="analytics").priority(200000).build()


@pytest.mark.parametrize(
    ("pod", "node", "want"),
    [
        pytest.param(small, pool_node(None), SUCCESS, id="non-member-on-general-node"),
        pytest.param(small, pool_node("bigdata"), NOT_BIGDATA, id="non-member-kept-off-pool"),
        pytest.param(small, pool_node("online"), NOT_ONLINE, id="non-member-kept-off-other-pool"),
        pytest.param(small, pool_node("unknown"), SUCCESS, id="label-value-of-no-pool"),
        pytest.param(by_label, pool_node("bigdata"), SUCCESS, id="member-by-label"),
        pytest.param(by_label, pool_node(None), OUTSIDE_BIGDATA, id="member-kept-in-pool"),
        pytest.param(by_label, pool_node("online"), NOT_ONLINE, id="member-of-one-pool-off-the-other"),
        pytest.param(by_namespace, pool_node("bigdata"), SUCCESS, id="member-by-namespace"),
        pytest.param(by_namespace, pool_node(None), OUTSIDE_BIGDATA, id="namespace-member-kept-in-pool"),
        pytest.param(by_cpu, pool_node("bigdata"), SUCCESS, id="member-by-cpu-threshold"),
        pytest.param(by_cpu, pool_node(None), OUTSIDE_BIGDATA, id="big-pod-kept-in-pool"),
        pytest.param(by_memory, pool_node("bigdata"), SUCCESS, id="member-by-memory-threshold-alone"),
        pytest.param(just_below, pool_node("bigdata"), NOT_BIGDATA, id="below-every-threshold"),
        pytest.param(just_below, pool_node(None), SUCCESS, id="below-thresholds-general"),
        pytest.param(by_init_container, pool_node("bigdata"), SUCCESS, id="effective-request-counts"),
        pytest.param(by_priority, pool_node("online"), SUCCESS, id="member-by-min-priority"),
        pytest.param(below_priority, pool_node("online"), NOT_ONLINE, id="below-min-priority"),
        pytest.param(by_ns_labels, pool_node("online"), SUCCESS, id="member-by-namespace-selector"),
        pytest.param(
            by_ns_labels,
            pool_node(None),
            Status.unresolvable('node(s) are outside pool "online" required by the pod'),
            id="namespace-selector-member-kept-in-pool",
        ),
        pytest.param(ns_other_labels, pool_node("online"), NOT_ONLINE, id="namespace-labels-differ"),
        pytest.param(ns_unknown, pool_node("online"), NOT_ONLINE, id="namespace-unknown"),
        pytest.param(in_both, pool_node("bigdata"), SUCCESS, id="member-of-both-on-first"),
        pytest.param(in_both, pool_node("online"), SUCCESS, id="member-of-both-on-second"),
        pytest.param(in_both, pool_node(None), OUTSIDE_BOTH, id="member-of-both-outside-both"),
    ],
)
def test_filter(pod: Pod, node: Node, want: Status) -> None:
    assert run(pod, node) == want


def test_overlapping_pools_admit_members_of_either() -> None:
    args = np.parse_args(
        {
            "pools": [
                {"name": "a", "nodeSelector": {"matchLabels": {"a": "1"}}, "members": {"namespaces": ["na"]}},
                {"name": "b", "nodeSelector": {"matchLabels": {"b": "1"}}, "members": {"namespaces": ["nb"]}},
            ]
        },
        "args",
    )
    both = make_node("ab").label("a", "1").label("b", "1").build()
    assert run(make_pod(namespace="na").build(), both, args) == SUCCESS
    assert run(make_pod(namespace="nb").build(), both, args) == SUCCESS
    assert run(make_pod(namespace="nc").build(), both, args) == Status.unresolvable(
        'node(s) belong to pool "a" and the pod is not a member'
    )


def test_pre_filter_skips_without_pools_and_filter_works_without_pre_filter() -> None:
    pl = np.NodePools(np.NodePoolsArgs(), HANDLE)
    assert pl.pre_filter(CycleState(), small, []) == SKIP
    pl = np.NodePools(ARGS, HANDLE)
    assert pl.filter(CycleState(), small, node_info(pool_node("bigdata"))) == NOT_BIGDATA
    assert pl.filter(CycleState(), small, node_info(None)).code is Code.ERROR
    assert pl.pod_pools(in_both) == ("bigdata", "online")


def test_filter_reasons_are_unresolvable() -> None:
    assert run(small, pool_node("bigdata")).code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE


# --- args ----------------------------------------------------------------------------------------


def test_args_parsed() -> None:
    bigdata, online = ARGS.pools
    assert bigdata.name == "bigdata"
    assert bigdata.node_selector == labels.selector_from_set({POOL_KEY: "bigdata"})
    assert bigdata.members.namespaces == frozenset({"analytics"})
    assert dict(bigdata.members.min_requests) == {"cpu": 8000, "memory": 32 * 2**30}
    assert online.members.min_priority == 100000
    assert np.parse_args(ARGS.to_config(), "args") == ARGS


def test_args_defaults() -> None:
    assert np.parse_args(None, "args") == np.NodePoolsArgs()


def test_args_errors_all_reported_with_paths() -> None:
    with pytest.raises(ConfigError) as exc:
        np.parse_args(
            {
                "pools": [
                    {"name": "p", "nodeSelector": {}, "members": {}},
                    {"name": "p", "nodeSelector": {"matchLabels": {"k": "v"}}},
                    {
                        "nodeSelector": {"matchExpressions": [{"key": "k", "operator": "Gt", "values": ["1"]}]},
                        "members": {
                            "minRequests": {"cpu": "lots", "memory": 0},
                            "labelSelector": {},
                            "bogus": 1,
                        },
                    },
                    {
                        "name": "Bad Name",
                        "nodeSelector": {"matchLabels": {"k": "v"}},
                        "members": {"minPriority": "high", "namespaces": "ns"},
                    },
                ]
            },
            "pc.args",
        )
    got = {str(e) for e in exc.value.errors}
    p = "pc.args.pools"
    for want in (
        f"{p}[0].nodeSelector: must not be empty (it would put every node in the pool)",
        f"{p}[0].members: at least one of labelSelector, namespaces, namespaceSelector, priorityClassNames, "
        "minPriority, minRequests is required",
        f'{p}[1].name: Duplicate value: "p"',
        f"{p}[1].members: required",
        f"{p}[2].name: required",
        f"{p}[2].nodeSelector: 'Gt' is not a valid label selector operator",
        f"{p}[2].members.minRequests.memory: must be greater than 0",
        f"{p}[2].members.labelSelector: must not be empty (it would make every pod a member)",
        f"{p}[3].members.minPriority: must be an integer, got str",
        f"{p}[3].members.namespaces: must be a list, got str",
    ):
        assert want in got, (want, sorted(got))
    paths = {e.path for e in exc.value.errors}
    assert f"{p}[2].members.minRequests.cpu" in paths
    assert f"{p}[2].members.bogus" in paths
    assert f"{p}[3].name" in paths


def test_priority_class_names_select_members() -> None:
    raw = {
        "pools": [{"name": "p", "nodeSelector": {"matchLabels": {"k": "v"}}, "members": {"priorityClassNames": ["x"]}}]
    }
    args = np.parse_args(raw, "a")
    members = args.pools[0].members
    assert members.priority_class_names == frozenset({"x"})
    member = make_pod("m").build()
    member.priority_class_name = "x"
    assert np.is_member(member, members, None)
    assert not np.is_member(make_pod("n").build(), members, None)


def test_helpers() -> None:
    assert np.node_pools(pool_node("bigdata"), ARGS.pools) == ("bigdata",)
    assert np.node_pools(pool_node(None), ARGS.pools) == ()
    assert np.pool_reasons((), ()) is None
    assert np.pool_reasons(("a",), ("b", "a")) is None
    assert np.outside_reason(["x"]) == 'node(s) are outside pool "x" required by the pod'
    assert np.is_member(by_ns_labels, ARGS.pools[1].members, {"tier": "online"})
    assert not np.is_member(by_ns_labels, ARGS.pools[1].members, None)
