"""The gang plugins' view of PodGroups and their members, and the PodGroup status writers.

:class:`GangStore` — one per process, lent to plugins through ``Handle.gangs``, for the same reason
as the VolumeStore: a config reload builds new plugins, and what the informers saw must survive
it. It holds the PodGroups of both APIs (their informers call :meth:`GangStore.put` and
:meth:`GangStore.delete`) and an index group → member pods (the pod informer calls
:meth:`GangStore.member_added`, ``member_updated`` and ``member_deleted``), so
PreEnqueue's "do minCount members exist" is a dict lookup under the queue's lock, never a scan of
every pod. Whether a member is already placed (assumed or bound) is asked of the scheduler cache
through the ``is_placed`` callable given at construction: the cache, not the informer, knows an
assumption made a millisecond ago.

Listeners get a :class:`GangChange` when a change may release members held at PreEnqueue
(upstream GangScheduling's queueing hints): a PodGroup added, a PodGroup's minCount lowered, or a
member added once the group has enough members. The queue then retries exactly that group's pods.

:class:`GangStatusWriter` — the status the scheduler reports on a PodGroup after a group cycle:
``PodGroupInitiallyScheduled`` on a native group (upstream's condition, never regressed from
True) and phase/scheduled/running on a scheduler-plugins group. Writes run on one worker thread,
coalesced per group (the latest outcome wins), each fenced by ``fence.admit()`` right before the
request as DefaultBinder's are, so a leader that lost its Lease writes nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import structlog

from custom_scheduler.api import podgroup as gang
from custom_scheduler.api.model import Pod
from custom_scheduler.api.podgroup import Api, PodGroup
from custom_scheduler.framework.clusterapi import STRATEGIC_PATCH_CT, ClusterClient, api_errors
from custom_scheduler.framework.fence import Fence
from custom_scheduler.framework.listeners import notify
from custom_scheduler.framework.reservations import ReservationBook

log = structlog.get_logger("custom_scheduler.api.podgroup")

#: Change kinds a :class:`GangChange` carries (the queue's event names for them).
POD_GROUP_ADD = "PodGroupAdd"
POD_GROUP_UPDATE = "PodGroupUpdate"
POD_GROUP_MEMBER_ADD = "PodGroupMemberAdd"
#: A PodGroup API was found not served: its members held while it was checked go alone.
POD_GROUP_API_ABSENT = "PodGroupApiAbsent"


@dataclass(frozen=True, slots=True)
class GangChange:
    """Members of group ``key`` (of ``api``) held back at PreEnqueue may pass now."""

    event: str
    api: Api
    key: str

    def matches(self, pod: Pod) -> bool:
        """Whether ``pod`` is a member of the changed group (every group of ``api`` when ``key``
        is empty) (the queue's pre-check)."""
        return gang.api_of(pod) == self.api and (not self.key or gang.group_of(pod) == self.key)


Listener = Callable[[GangChange], None]


def requeue_event(old: PodGroup | None, new: PodGroup) -> str | None:
    """Which :class:`GangChange` event a PodGroup add/update is, or None when it cannot release a
    held member (upstream: every add; an update only when a gang's minCount decreased)."""
    if old is None:
        return POD_GROUP_ADD
    if old.gang and new.gang and new.min_count < old.min_count:
        return POD_GROUP_UPDATE
    return None


class GangStore:
    """Thread-safe PodGroup listers and the group → members index; see the module docstring."""

    def __init__(self, is_placed: Callable[[str], bool] | None = None, *, served: Iterable[Api] | None = None) -> None:
        self._lock = threading.RLock()
        # The PodGroup APIs the API server serves (the daemon's informers report them as they
        # answer); None: all of them (offline tools and tests fill the store themselves).
        self._served: set[Api] | None = None if served is None else set(served)
        # APIs not known to be served that a member names: held (members wait) until a probe
        # answers; and the informers' callbacks that start such a probe now.
        self._checking: set[Api] = set()
        self._probes: dict[Api, Callable[[], None]] = {}
        self._groups: dict[tuple[Api, str], PodGroup] = {}
        self._members: dict[tuple[Api, str], dict[str, Pod]] = {}
        self._is_placed: Callable[[str], bool] = is_placed or (lambda uid: False)
        self._listeners: list[Listener] = []
        # Where GangScheduling reports group outcomes (the daemon's status writer; None offline).
        self.status: GangStatusWriter | None = None
        # GangScheduling's reservations for starving gangs (kept here so a reload keeps them).
        self.reservations = ReservationBook()

    # -- feeding: PodGroups -----------------------------------------------------------------------
    def add_listener(self, fn: Listener) -> None:
        self._listeners.append(fn)

    def put(self, group: PodGroup) -> None:
        k = (group.api, group.key)
        with self._lock:
            old = self._groups.get(k)
            self._groups[k] = group
        ev = requeue_event(old, group)
        if ev is not None:
            self._notify(GangChange(ev, group.api, group.key))

    def delete(self, group: PodGroup) -> None:
        with self._lock:
            self._groups.pop((group.api, group.key), None)

    def load(self, groups: Iterable[PodGroup]) -> None:
        """Offline tools (explain, simulate) fill the store from a snapshot file."""
        for g in groups:
            self.put(g)

    def probe_with(self, api: Api, probe: Callable[[], None]) -> None:
        """How to ask now whether ``api`` is served (the optional informer's ``nudge``)."""
        self._probes[api] = probe

    def api_served(self, api: Api) -> None:
        """The informer of ``api`` got an answer: its PodGroups (and members) count from now on."""
        with self._lock:
            self._checking.discard(api)
            if self._served is not None:
                self._served.add(api)

    def api_absent(self, api: Api) -> None:
        """A probe found ``api`` not served: members held while it was checked may go alone."""
        with self._lock:
            was_checking = api in self._checking
            self._checking.discard(api)
            if self._served is not None:
                self._served.discard(api)
        if was_checking:
            self._notify(GangChange(POD_GROUP_API_ABSENT, api, ""))

    def serves(self, api: Api | None) -> bool:
        """Whether PodGroups of ``api`` count in this cluster. GangScheduling is in the default
        profile as upstream's is when the ``GenericWorkload`` gate is on, so a pod that only carries
        the scheduler-plugins label, in a cluster without that CRD, must schedule as any pod. An
        API not known to be served that a member names is checked at once (the CRD may just have
        been installed) and counts as served until the answer, so no member of a real gang is
        placed alone in the meantime."""
        if api is None:
            return False
        with self._lock:
            return self._served is None or api in self._served or api in self._checking

    def _check(self, api: Api) -> None:
        """A member names ``api``, which is not known to be served: probe it now (once at a time)."""
        with self._lock:
            if self._served is None or api in self._served or api in self._checking or api not in self._probes:
                return
            self._checking.add(api)
        self._probes[api]()

    # -- feeding: members -------------------------------------------------------------------------
    def member_added(self, pod: Pod) -> None:
        if (k := _member_key(pod)) is None:
            return
        self._check(k[0])
        with self._lock:
            members = self._members.setdefault(k, {})
            members[pod.uid] = pod
            group = self._groups.get(k)
            enough = group is not None and len(members) >= group.min_count
        if enough:
            self._notify(GangChange(POD_GROUP_MEMBER_ADD, k[0], k[1]))

    def member_updated(self, old: Pod, new: Pod) -> None:
        k = _member_key(new)
        if k != _member_key(old):  # moved to another group, or joined or left one
            self.member_deleted(old)
            self.member_added(new)
            return
        if k is None:
            return
        with self._lock:
            members = self._members.get(k)
            if members is not None and new.uid in members:
                members[new.uid] = new
                return
        self.member_added(new)

    def member_deleted(self, pod: Pod) -> None:
        if (k := _member_key(pod)) is None:
            return
        with self._lock:
            members = self._members.get(k)
            if members is None:
                return
            members.pop(pod.uid, None)
            if not members:
                del self._members[k]

    def _notify(self, change: GangChange) -> None:
        notify(self._listeners, (change,), log, "gang_listener_failed", change=change.event, group=change.key)

    # -- listers ----------------------------------------------------------------------------------
    def get(self, key: str, api: Api | None = None) -> PodGroup | None:
        """The PodGroup ``namespace/name`` of ``api`` (None: native first, then the CRD)."""
        with self._lock:
            if api is not None:
                return self._groups.get((api, key))
            return self._groups.get((gang.NATIVE, key)) or self._groups.get((gang.CRD, key))

    def group_for(self, pod: Pod) -> PodGroup | None:
        """The PodGroup ``pod`` declares membership of, if the informers have it."""
        if (k := _member_key(pod)) is None:
            return None
        with self._lock:
            return self._groups.get(k)

    def groups(self) -> list[PodGroup]:
        with self._lock:
            return list(self._groups.values())

    def members(self, group: PodGroup) -> list[Pod]:
        """The group's live members (terminating pods excluded: they will not run)."""
        with self._lock:
            pods = list(self._members.get((group.api, group.key), {}).values())
        return [p for p in pods if not p.deleting]

    def member_count(self, group: PodGroup) -> int:
        """How many live members exist: upstream's ``AllPodsCount`` for the PreEnqueue barrier."""
        with self._lock:
            pods = self._members.get((group.api, group.key))
            return 0 if not pods else sum(1 for p in pods.values() if not p.deleting)

    def placed(self, group: PodGroup) -> frozenset[str]:
        """UIDs of members assumed or bound (upstream's ``ScheduledPodsCount`` counts these)."""
        return frozenset(p.uid for p in self.members(group) if p.node_name or self._is_placed(p.uid))

    def unplaced(self, group: PodGroup) -> list[Pod]:
        """Members neither assumed nor bound: the ones Permit activates while the gang waits."""
        return [p for p in self.members(group) if not p.node_name and not self._is_placed(p.uid)]


def _member_key(pod: Pod) -> tuple[Api, str] | None:
    """The (api, ``namespace/name``) of the PodGroup ``pod`` names; None when it names none."""
    if not pod.pod_group:
        return None
    return (gang.NATIVE if pod.pod_group_native else gang.CRD, f"{pod.namespace}/{pod.pod_group}")


# --- status writers ------------------------------------------------------------------------------

Outcome = Literal["scheduled", "unschedulable", "error", "attempting", "refresh"]
_DECIDED: dict[str, Literal["scheduled", "unschedulable", "error"]] = {
    "scheduled": "scheduled",
    "unschedulable": "unschedulable",
    "error": "error",
}


class Writes(Protocol):
    """What the writer needs of a Handle: the API client (None offline) and the fence."""

    @property
    def client(self) -> ClusterClient | None: ...

    @property
    def fence(self) -> Fence: ...


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What one status write did: ``written`` (the patch sent), ``skipped`` (nothing to change,
    offline, or the group is gone), ``fenced`` (leadership lost) or ``failed``."""

    api: Api
    key: str
    result: Literal["written", "skipped", "fenced", "failed"]
    body: dict[str, Any] | None = None
    error: str = ""


def status_path(group: PodGroup) -> str:
    return f"/apis/{gang.group_version(group.api)}/namespaces/{group.namespace}/podgroups/{group.name}/status"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass(slots=True)
class _Pending:
    outcome: Outcome
    message: str
    placed: frozenset[str] = field(default_factory=frozenset)


class GangStatusWriter:
    """Writes PodGroup status off the scheduling thread; see the module docstring.

    The core calls :meth:`group_bound` when a gang's members were all assumed and sent to bind,
    :meth:`group_rejected` when a group cycle (or its Permit wait) failed, and may call
    :meth:`group_attempting` when a cycle starts and :meth:`refresh` when members change phase.
    :meth:`write` is the synchronous step the worker runs (tests and offline tools call it).
    """

    def __init__(self, handle: Writes, store: GangStore, *, now: Callable[[], str] = _now) -> None:
        self._handle = handle
        self._store = store
        self._now = now
        self._lock = threading.Condition()
        self._pending: dict[tuple[Api, str], _Pending] = {}
        self._thread: threading.Thread | None = None
        self._closed = False
        self._busy = 0
        self.results: list[WriteResult] = []  # the last few, newest last (debugging and tests)

    # -- what the core calls ----------------------------------------------------------------------
    def group_bound(self, group: PodGroup, message: str = "", placed: frozenset[str] = frozenset()) -> None:
        """The gang reached its quorum and its members went to bind."""
        self._submit(group, _Pending("scheduled", message, placed))

    def group_rejected(self, group: PodGroup, message: str, *, error: bool = False) -> None:
        """The group cycle failed (unschedulable, a Permit timeout, or ``error``): every
        assumption was released and the group backs off."""
        self._submit(group, _Pending("error" if error else "unschedulable", message))

    def group_attempting(self, group: PodGroup) -> None:
        """A group cycle started (scheduler-plugins phase Scheduling; native: nothing to write)."""
        if group.api == gang.CRD:
            self._submit(group, _Pending("attempting", ""))

    def refresh(self, group: PodGroup) -> None:
        """Recount members (running pods) for a scheduler-plugins group."""
        if group.api == gang.CRD:
            self._submit(group, _Pending("refresh", ""))

    # -- the pure part ----------------------------------------------------------------------------
    def patch_for(
        self, group: PodGroup, outcome: Outcome, message: str, placed: frozenset[str]
    ) -> dict[str, Any] | None:
        """The status patch body for ``outcome`` on ``group`` as the store has it now, or None."""
        if group.api == gang.NATIVE:
            decided = _DECIDED.get(outcome)
            if decided is None:
                return None  # the native API has no phase or counts: only outcomes are written
            cond = gang.native_condition(group, decided, message, self._now())
            return None if cond is None else {"status": {"conditions": [cond]}}
        counts = gang.count_members(self._store.members(group), placed | self._store.placed(group))
        start = self._now() if outcome == "attempting" and group.phase in ("", gang.PHASE_PENDING) else ""
        status = gang.crd_status(
            group,
            counts,
            rejected=outcome in ("unschedulable", "error"),
            in_cycle=outcome == "attempting",
            schedule_start_time=start,
        )
        if outcome == "refresh" and group.phase in ("", gang.PHASE_PENDING) and status["phase"] == gang.PHASE_PENDING:
            status.pop("phase")  # a recount does not move a group the scheduler has not tried
        return {"status": status}

    def write(
        self, api: Api, key: str, outcome: Outcome, message: str = "", placed: frozenset[str] = frozenset()
    ) -> WriteResult:
        """Compute and send one status patch now (on the caller's thread)."""
        group = self._store.get(key, api)
        client = self._handle.client
        if group is None or client is None:
            return self._record(WriteResult(api, key, "skipped"))
        body = self.patch_for(group, outcome, message, placed)
        if body is None:
            return self._record(WriteResult(api, key, "skipped"))
        if not self._handle.fence.admit():
            return self._record(WriteResult(api, key, "fenced", body))
        try:
            if api == gang.NATIVE:
                client.patch(status_path(group), body, content_type=STRATEGIC_PATCH_CT, timeout=(5.0, 15.0))
            else:
                client.patch(status_path(group), body, timeout=(5.0, 15.0))
        except api_errors.NotFound:
            return self._record(WriteResult(api, key, "skipped", body, "podgroup gone"))
        except api_errors.KubeError as e:
            log.warning("podgroup_status_failed", group=key, api=api, error=str(e)[:200])
            return self._record(WriteResult(api, key, "failed", body, str(e)[:300]))
        return self._record(WriteResult(api, key, "written", body))

    def _record(self, r: WriteResult) -> WriteResult:
        with self._lock:
            self.results.append(r)
            del self.results[:-64]
        return r

    # -- the worker -------------------------------------------------------------------------------
    def _submit(self, group: PodGroup, p: _Pending) -> None:
        with self._lock:
            if self._closed:
                return
            k = (group.api, group.key)
            prev = self._pending.get(k)
            # A decided outcome is never replaced by a recount queued after it.
            if prev is None or p.outcome not in ("refresh", "attempting") or prev.outcome in ("refresh", "attempting"):
                self._pending[k] = p
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="podgroup-status", daemon=True)
                self._thread.start()
            self._lock.notify_all()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._closed:
                    self._lock.wait()
                if not self._pending:
                    return
                (api, key), p = next(iter(self._pending.items()))
                del self._pending[(api, key)]
                self._busy += 1
            try:
                self.write(api, key, p.outcome, p.message, p.placed)
            except Exception:
                log.exception("podgroup_status_crashed", group=key)
            finally:
                with self._lock:
                    self._busy -= 1
                    self._lock.notify_all()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every submitted write is done; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
            return True

    def close(self, timeout: float = 5.0) -> None:
        """Finish what is queued (bounded by ``timeout``), then stop the worker."""
        self.flush(timeout)
        with self._lock:
            self._closed = True
            self._pending.clear()
            self._lock.notify_all()

    def pending(self) -> Sequence[tuple[Api, str]]:
        with self._lock:
            return list(self._pending)
