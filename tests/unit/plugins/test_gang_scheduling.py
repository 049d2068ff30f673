"""GangScheduling: the PreEnqueue barrier, the Permit quorum and timeout, args, registration."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import pytest

from custom_scheduler.api.model import Pod
from custom_scheduler.api.podgroup import Api
from custom_scheduler.config import load_config
from custom_scheduler.errors import ConfigError
from custom_scheduler.framework.gang_store import GangStore
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.types import SUCCESS, Code, CycleState, Status
from custom_scheduler.framework.waiting import WaitingPodMap
from custom_scheduler.plugins import gang_scheduling as gs
from custom_scheduler.plugins.builtin import full_registry
from tests.builders import PodGroupBuilder, make_crd_pod_group, make_pod, make_pod_group


class _Handle:
    """What GangScheduling uses of the Handle: the store, activate and the waiting pods."""

    def __init__(self, store: GangStore) -> None:
        self.gangs = store
        self.activated: list[list[str]] = []
        self.waiting_pods = WaitingPodMap(clock=lambda: 0.0, timer_thread=False)

    def activate(self, pods: Sequence[Pod]) -> None:
        self.activated.append(sorted(p.name for p in pods))


def _plugin(
    group: PodGroupBuilder | None, members: Sequence[Pod], placed: frozenset[str] = frozenset(), args: Any = None
) -> tuple[gs.GangScheduling, _Handle]:
    store = GangStore(is_placed=lambda uid: uid in placed)
    if group is not None:
        store.put(group.build())
    for m in members:
        store.member_added(m)
    h = _Handle(store)
    return gs.GangScheduling(args, cast(Handle, h)), h


def _members(n: int, *, crd: bool = False, ns: str = "ns") -> list[Pod]:
    out = []
    for i in range(n):
        b = make_pod(f"m{i}", ns).uid(f"u{i}")
        out.append((b.pod_group_label("g") if crd else b.scheduling_group("g")).build())
    return out


TOO_FEW = Status.unresolvable("waiting for minCount pods from a gang to appear in scheduling queue")


@pytest.mark.parametrize(
    ("group", "n_members", "pod", "want"),
    [
        pytest.param(None, 0, make_pod("p", "ns"), SUCCESS, id="not-a-member"),
        pytest.param(
            None,
            1,
            make_pod("m0", "ns").uid("u0").scheduling_group("g"),
            Status.unresolvable('waiting for pods\'s pod group "g" to appear in scheduling queue'),
            id="group-missing",
        ),
        pytest.param(
            make_pod_group("g", "ns", min_count=3), 2, make_pod("m0", "ns").uid("u0").scheduling_group("g"), TOO_FEW,
            id="too-few-members",
        ),
        pytest.param(
            make_pod_group("g", "ns", min_count=3), 3, make_pod("m0", "ns").uid("u0").scheduling_group("g"), SUCCESS,
            id="quorum-of-members-exists",
        ),
        pytest.param(
            make_pod_group("g", "ns").basic(), 1, make_pod("m0", "ns").uid("u0").scheduling_group("g"), SUCCESS,
            id="basic-group-holds-nothing",
        ),
        pytest.param(
            make_crd_pod_group("g", "ns", min_member=2), 1, make_pod("m0", "ns").uid("u0").pod_group_label("g"),
            TOO_FEW, id="crd-too-few",
        ),
        pytest.param(
            make_pod_group("g", "ns", min_count=1), 1, make_pod("m0", "ns").uid("u0").pod_group_label("g"),
            Status.unresolvable('waiting for pods\'s pod group "g" to appear in scheduling queue'),
            id="label-member-does-not-join-native-group",
        ),
    ],
)  # fmt: skip
def test_pre_enqueue(group: PodGroupBuilder | None, n_members: int, pod: Any, want: Status) -> None:
    """Upstream's barrier and messages: the group must exist and hold minCount members."""
    pl, _ = _plugin(group, _members(n_members, crd=group is not None and group.crd))
    got = pl.pre_enqueue(pod.build())
    assert got == want
    if not got.is_success:
        assert got.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert got.plugin == gs.NAME


def test_permit_waits_below_quorum_and_wakes_the_others() -> None:
    members = _members(3)
    pl, h = _plugin(make_pod_group("g", "ns", min_count=3), members, placed=frozenset({"u0"}))
    st, timeout = pl.permit(CycleState(), members[1], "n1")
    assert st.code is Code.WAIT
    assert st.message == "waiting for minCount pods from a gang to be scheduled"
    assert timeout == 300.0  # upstream's permitTimeoutDuration
    assert h.activated == [["m1", "m2"]]  # the unplaced ones (m1 is being permitted, not yet placed)


def test_permit_completing_the_quorum_allows_every_waiting_member() -> None:
    members = _members(3)
    pl, h = _plugin(make_pod_group("g", "ns", min_count=3), members, placed=frozenset({"u0", "u1", "u2"}))
    waiting = [h.waiting_pods.add(m, "n1", {gs.NAME: 300.0}) for m in members[:2]]
    st, timeout = pl.permit(CycleState(), members[2], "n1")
    assert (st, timeout) == (SUCCESS, 0.0)
    assert [w.future.result(timeout=1) for w in waiting] == [SUCCESS, SUCCESS]
    assert h.activated == []


@pytest.mark.parametrize(
    ("group", "args", "want"),
    [
        pytest.param(make_crd_pod_group("g", "ns", min_member=2).timeout(45), None, 45.0, id="crd-own-timeout"),
        pytest.param(make_crd_pod_group("g", "ns", min_member=2), gs.GangSchedulingArgs(20), 20.0, id="args-default"),
        pytest.param(make_crd_pod_group("g", "ns", min_member=2).timeout(3600), None, 900.0, id="capped-at-15m"),
    ],
)
def test_permit_timeout(group: PodGroupBuilder, args: gs.GangSchedulingArgs | None, want: float) -> None:
    members = _members(2, crd=True)
    pl, _ = _plugin(group, members, args=args)
    st, timeout = pl.permit(CycleState(), members[0], "n1")
    assert st.code is Code.WAIT
    assert timeout == want


def test_permit_for_non_members_basic_groups_and_vanished_groups() -> None:
    pl, _ = _plugin(make_pod_group("g", "ns").basic(), _members(1))
    assert pl.permit(CycleState(), make_pod("p", "ns").build(), "n1") == (SUCCESS, 0.0)
    assert pl.permit(CycleState(), _members(1)[0], "n1") == (SUCCESS, 0.0)
    pl, _ = _plugin(None, _members(1))
    st, _ = pl.permit(CycleState(), _members(1)[0], "n1")
    assert st.code is Code.ERROR
    assert "failed to get podGroup ns/g" in st.message


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        pytest.param(None, gs.GangSchedulingArgs(300), id="defaults"),
        pytest.param({"permitTimeoutSeconds": 60}, gs.GangSchedulingArgs(60), id="set"),
        pytest.param({"kind": "GangSchedulingArgs", "apiVersion": "x/v1"}, gs.GangSchedulingArgs(300), id="kind"),
        pytest.param(
            {"topologyLevels": ["topology.kubernetes.io/zone", "example.com/rack"], "jobLevelPreemption": True},
            gs.GangSchedulingArgs(300, ("topology.kubernetes.io/zone", "example.com/rack"), True),
            id="topology-and-job-level",
        ),
        pytest.param({"topologyLevels": None}, gs.GangSchedulingArgs(300), id="null-levels-default"),
    ],
)
def test_parse_args(raw: dict[str, Any] | None, want: gs.GangSchedulingArgs) -> None:
    assert gs.parse_args(raw, "args") == want


@pytest.mark.parametrize(
    ("raw", "msg"),
    [
        pytest.param({"permitTimeoutSeconds": 0}, "must be between 1 and 900", id="zero"),
        pytest.param({"permitTimeoutSeconds": 901}, "must be between 1 and 900", id="above-cap"),
        pytest.param({"permitTimeoutSeconds": "5m"}, "must be an integer", id="string"),
        pytest.param({"timeout": 5}, "unknown field", id="unknown"),
        pytest.param({"topologyLevels": []}, "must list at least one node label key", id="no-levels"),
        pytest.param({"topologyLevels": "a/b"}, "must be a list", id="levels-not-a-list"),
        pytest.param({"topologyLevels": [3]}, r"topologyLevels\[0\]: must be a string", id="level-not-a-string"),
        pytest.param({"topologyLevels": ["a b"]}, "'a b' is not a node label key", id="bad-key"),
        pytest.param({"topologyLevels": ["a/b", "c", "a/b"]}, r"\[2\]: 'a/b' is listed twice", id="repeated"),
        pytest.param({"topologyLevels": [f"l{i}" for i in range(9)]}, "at most 8 levels", id="too-deep"),
        pytest.param({"jobLevelPreemption": "yes"}, "jobLevelPreemption: must be a boolean", id="switch-not-bool"),
    ],
)
def test_parse_args_errors(raw: dict[str, Any], msg: str) -> None:
    with pytest.raises(ConfigError, match=msg):
        gs.parse_args(raw, "args")


def test_in_the_default_profile_and_disabled_like_any_plugin() -> None:
    """Upstream's default profile has it with GenericWorkload (the gate that serves PodGroups);
    ours always has it, and it acts only where a PodGroup API is served (below)."""
    reg = full_registry(out_of_tree=False)
    # PreFilter and Filter are ours (reservations for starving gangs, plugins/gang_reservations.py).
    assert reg[gs.NAME].extension_points == frozenset({"preEnqueue", "preFilter", "filter", "permit"})
    header = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
    default = load_config(header + "profiles: [{schedulerName: s}]\n", reg)
    assert gs.NAME in default.profiles[0].plugin_names()
    disabled = load_config(
        header + "profiles: [{schedulerName: s, plugins: {multiPoint: {disabled: [{name: GangScheduling}]}}}]\n", reg
    )
    assert gs.NAME not in disabled.profiles[0].plugin_names()


@pytest.mark.parametrize(
    ("served", "member"),
    [
        pytest.param(None, True, id="offline-store-serves-all"),
        pytest.param((), False, id="no-api-served"),
        pytest.param(("native",), True, id="native-served"),
        pytest.param(("crd",), False, id="only-the-other-api-served"),
    ],
)
def test_a_pod_is_a_member_only_where_its_api_is_served(served: tuple[Api, ...] | None, member: bool) -> None:
    """A pod naming a PodGroup of an API the cluster does not serve is scheduled alone, as by
    upstream's default profile (no barrier at PreEnqueue, no wait at Permit, no group cycle)."""
    store = GangStore(served=served)
    pods = _members(2)
    for p in pods:
        store.member_added(p)
    store.put(make_pod_group("g", "ns", min_count=2).build())
    plugin = gs.GangScheduling(None, cast(Handle, _Handle(store)))
    assert (plugin.group_of(pods[0]) is not None) is member
    # A lone member of a gang of two is held at PreEnqueue only when it counts as a member.
    store.member_deleted(pods[1])
    assert plugin.pre_enqueue(pods[0]).is_success is not member


# --- the group cycle's verdict (placement_feasible) ----------------------------------------------


@pytest.mark.parametrize(
    ("min_count", "members", "placed_before", "cycle_size", "tried", "placed", "want"),
    [
        # 4 of 4 in the cycle, all placed: commit.
        pytest.param(4, 4, 0, 4, 4, 4, Code.SUCCESS, id="whole-gang-placed"),
        # Half way with enough still to try: go on.
        pytest.param(4, 4, 0, 4, 2, 2, Code.WAIT, id="half-way"),
        # One failed of 4 with minCount 4: nothing can make it, stop at once.
        pytest.param(4, 4, 0, 4, 1, 0, Code.UNSCHEDULABLE, id="one-failed-no-spare"),
        # 5 members, minCount 4: one failure is affordable.
        pytest.param(4, 5, 0, 5, 2, 1, Code.WAIT, id="spare-member"),
        # All tried, one member outside the cycle (gated, not yet queued): wait at Permit for it.
        pytest.param(3, 3, 0, 2, 2, 2, Code.WAIT, id="member-still-to-come"),
        # Members bound earlier count: a late member of a running gang is placed on its own.
        pytest.param(2, 3, 2, 1, 1, 1, Code.SUCCESS, id="gang-already-running"),
    ],
)
def test_placement_feasible(
    min_count: int, members: int, placed_before: int, cycle_size: int, tried: int, placed: int, want: Code
) -> None:
    pods = _members(members)
    # The store's "placed" view: members bound before the cycle plus this cycle's assumptions.
    done = frozenset(p.uid for p in pods[: placed_before + placed])
    plugin, _ = _plugin(make_pod_group("g", "ns", min_count=min_count), pods, placed=done)
    key = plugin.group_of(pods[0])
    assert key == "native:ns/g"
    st = plugin.placement_feasible(key, cycle_size=cycle_size, tried=tried, placed=placed)
    assert st.code is want, st.message


def test_a_basic_group_schedules_its_pods_alone() -> None:
    pods = _members(2)
    plugin, _ = _plugin(make_pod_group("g", "ns").basic(), pods)
    assert plugin.group_of(pods[0]) is None
