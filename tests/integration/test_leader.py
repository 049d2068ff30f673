"""Leader election against the real API server: one leader, failover, release, loss of the Lease.

Durations are shortened (lease 3 s, renew deadline 2 s, retry 0.5 s) so failover takes seconds;
the algorithm is the same as with the production 15 s / 10 s / 2 s.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from custom_scheduler.config.schema import LeaderElectionConfig
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient
from custom_scheduler.server import leader
from custom_scheduler.server.metrics import Metrics

LEASE, RENEW, RETRY = 3.0, 2.0, 0.5
MICROTIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")


# -- pure pieces ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        pytest.param(datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC), "2024-05-01T12:00:00.000000Z", id="zero-micros"),
        pytest.param(datetime(2024, 5, 1, 12, 0, 0, 7, tzinfo=UTC), "2024-05-01T12:00:00.000007Z", id="padded"),
        pytest.param(
            datetime(2024, 5, 1, 14, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2))),
            "2024-05-01T12:00:00.123456Z",
            id="converted-to-utc",
        ),
    ],
)
def test_microtime_always_has_six_fraction_digits_in_utc(when: datetime, expected: str) -> None:
    """MicroTime keeps six digits even for whole seconds (isoformat would drop them)."""
    assert leader.microtime(when) == expected


@pytest.mark.parametrize(
    ("lease", "renew", "retry", "message"),
    [
        pytest.param(10, 10, 2, "leaseDuration", id="lease-not-above-renew"),
        pytest.param(15, 2, 2, "renewDeadline", id="renew-not-above-jittered-retry"),
        pytest.param(15, 10, 0, "retryPeriod", id="retry-zero"),
    ],
)
def test_elector_rejects_inconsistent_durations(lease: float, renew: float, retry: float, message: str) -> None:
    """client-go's rule leaseDuration > renewDeadline > 1.2 x retryPeriod > 0 is enforced."""
    cfg = LeaderElectionConfig(lease_duration=lease, renew_deadline=renew, retry_period=retry)
    with pytest.raises(ValueError, match=message):
        leader.validate(cfg)


def test_default_identity_is_hostname_and_uuid() -> None:
    """Identities are ``<hostname>_<uuid>`` and differ per elector (a restarted pod is a new candidate)."""
    a, b = leader.default_identity(), leader.default_identity()
    host, _, suffix = a.rpartition("_")
    assert host
    assert uuid.UUID(suffix)
    assert a != b


# -- against the API server -------------------------------------------------------------------------


@dataclass
class Candidate:
    """One elector running :meth:`LeaderElector.run` on its own thread, as a replica would."""

    elector: leader.LeaderElector
    stop: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)
    stopped: threading.Event = field(default_factory=threading.Event)
    started_at: float = 0.0
    stopped_at: float = 0.0
    thread: threading.Thread | None = None

    def start(self) -> Candidate:
        def on_started() -> None:
            self.started_at = time.monotonic()
            self.started.set()

        def on_stopped() -> None:
            self.stopped_at = time.monotonic()
            self.stopped.set()

        self.thread = threading.Thread(
            target=self.elector.run, args=(on_started, on_stopped, self.stop), name=self.elector.identity, daemon=True
        )
        self.thread.start()
        return self

    def halt(self, timeout: float = 10.0) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout)
            assert not self.thread.is_alive(), f"{self.elector.identity} did not stop"


@pytest.fixture
def lease_config(namespace: str) -> LeaderElectionConfig:
    return LeaderElectionConfig(
        lease_duration=LEASE,
        renew_deadline=RENEW,
        retry_period=RETRY,
        resource_name=f"lease-{uuid.uuid4().hex[:8]}",
        resource_namespace=namespace,
    )


@pytest.fixture
def candidate(kube: KubeClient, lease_config: LeaderElectionConfig) -> Iterator[Callable[..., Candidate]]:
    made: list[Candidate] = []

    def make(identity: str, **kw: Any) -> Candidate:
        # Each replica has its own connection pool, as separate processes would.
        c = Candidate(leader.LeaderElector(kube.clone(qps=0), lease_config, identity, **kw))
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop.set()
    for c in made:
        with contextlib.suppress(AssertionError):
            c.halt()


def _lease(kube: KubeClient, cfg: LeaderElectionConfig) -> dict[str, Any]:
    doc: dict[str, Any] = kube.get(leader.lease_path(cfg.resource_namespace, cfg.resource_name))
    return doc


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll until ``predicate``; return the seconds it took."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _seconds_between(earlier: str, later: str) -> float:
    """Seconds from one MicroTime stamp to another (both written by electors in this process)."""
    fmt = "%Y-%m-%dT%H:%M:%S.%fZ"
    return (datetime.strptime(later, fmt) - datetime.strptime(earlier, fmt)).total_seconds()


def _wait_observes_renewal(standby: Candidate, holder: Candidate) -> None:
    """Wait until ``standby`` has read the Lease as renewed by ``holder`` since it first saw it: it
    is campaigning and tracks the holder's renewals, so a takeover from here is timed from a
    fresh observation (what the tests that stop the holder measure)."""
    first_seen: list[str] = []

    def saw_a_renewal() -> bool:
        rec = standby.elector.observed_record
        if rec.holder_identity != holder.elector.identity:
            return False
        if not first_seen:
            first_seen.append(rec.renew_time)
        return rec.renew_time > first_seen[0]

    _wait(saw_a_renewal, 2 * LEASE, f"{standby.elector.identity} to see {holder.elector.identity} renew")


def _first_leader(*cands: Candidate, timeout: float = 10.0) -> Candidate:
    _wait(lambda: any(c.started.is_set() for c in cands), timeout, "a leader")
    return next(c for c in cands if c.started.is_set())


def _assert_well_formed(spec: dict[str, Any], *, holder: str) -> None:
    assert spec["holderIdentity"] == holder
    assert spec["leaseDurationSeconds"] == int(LEASE)
    assert MICROTIME_RE.match(spec["acquireTime"]), spec["acquireTime"]
    assert MICROTIME_RE.match(spec["renewTime"]), spec["renewTime"]
    assert spec["renewTime"] >= spec["acquireTime"]


def test_exactly_one_of_two_candidates_leads_and_the_lease_is_well_formed(
    kube: KubeClient, lease_config: LeaderElectionConfig, candidate: Callable[..., Candidate]
) -> None:
    """Two candidates race for a fresh Lease: one leads, keeps renewing, the other waits."""
    a, b = candidate("replica-a").start(), candidate("replica-b").start()
    first = _first_leader(a, b)
    other = b if first is a else a
    lease_before = _lease(kube, lease_config)
    _assert_well_formed(lease_before["spec"], holder=first.elector.identity)
    assert lease_before["spec"]["leaseTransitions"] == 0

    # Never two leaders, never a change of holder, checked at every poll until the standby has seen
    # a renewal made more than two lease durations after the first record: by then the first record
    # would long have expired on the standby's clock had it ignored renewals, so a standby that
    # wrongly takes over would have done so.
    def standby_saw_renewals_past_two_leases() -> bool:
        assert first.elector.is_leader
        assert not other.elector.is_leader
        assert not other.started.is_set()
        seen = other.elector.observed_record
        return (
            seen.holder_identity == first.elector.identity
            and _seconds_between(lease_before["spec"]["renewTime"], seen.renew_time) > 2 * LEASE
        )

    _wait(standby_saw_renewals_past_two_leases, 4 * LEASE, "the standby to see renewals over two lease durations")

    lease_after = _lease(kube, lease_config)
    _assert_well_formed(lease_after["spec"], holder=first.elector.identity)
    assert lease_after["spec"]["acquireTime"] == lease_before["spec"]["acquireTime"], "renewal kept acquireTime"
    assert lease_after["spec"]["renewTime"] > lease_before["spec"]["renewTime"], "leader renews"
    assert lease_after["spec"]["leaseTransitions"] == 0
    assert other.elector.observed_record.holder_identity == first.elector.identity


def test_standby_takes_over_within_lease_duration_when_the_leader_dies(
    kube: KubeClient, lease_config: LeaderElectionConfig, candidate: Callable[..., Candidate]
) -> None:
    """A leader that stops renewing without releasing (a crash) is replaced after its Lease expires."""
    a = candidate("replica-a", release_on_stop=False).start()
    _wait(a.started.is_set, 10, "replica-a to lead")
    b = candidate("replica-b", release_on_stop=False).start()
    _wait_observes_renewal(b, a)
    assert not b.started.is_set()

    killed_at = time.monotonic()
    a.halt()
    assert not a.elector.is_leader
    _wait(b.started.is_set, LEASE + 5, "replica-b to take over")
    took = b.started_at - killed_at
    # The standby judges expiry from when it last *saw* the record change (at most one jittered
    # retry before the kill), so it waits most of a leaseDuration, and at most that plus a retry.
    assert LEASE - 2 * RETRY * (1 + leader.JITTER_FACTOR) <= took <= LEASE + 3, took

    spec = _lease(kube, lease_config)["spec"]
    _assert_well_formed(spec, holder="replica-b")
    assert spec["leaseTransitions"] == 1


def test_released_lease_is_taken_over_within_about_a_retry_period(
    kube: KubeClient, lease_config: LeaderElectionConfig, candidate: Callable[..., Candidate]
) -> None:
    """On a clean stop the leader releases; the standby need not wait for the Lease to expire."""
    a = candidate("replica-a").start()
    _wait(a.started.is_set, 10, "replica-a to lead")
    b = candidate("replica-b").start()
    _wait_observes_renewal(b, a)

    stopping_at = time.monotonic()
    a.halt()
    assert a.stopped.is_set(), "on_stopped_leading runs on a clean stop too"
    _wait(b.started.is_set, LEASE, "replica-b to take over")
    assert b.started_at - stopping_at < RETRY * (1 + leader.JITTER_FACTOR) + 1.0
    spec = _lease(kube, lease_config)["spec"]
    _assert_well_formed(spec, holder="replica-b")
    assert spec["leaseTransitions"] == 1

    # And back again: every change of holder counts.
    c = candidate("replica-c").start()
    _wait_observes_renewal(c, b)
    b.halt()
    _wait(c.started.is_set, LEASE, "replica-c to take over")
    assert _lease(kube, lease_config)["spec"]["leaseTransitions"] == 2


def test_release_empties_the_holder_and_shortens_the_lease(
    kube: KubeClient, lease_config: LeaderElectionConfig, candidate: Callable[..., Candidate]
) -> None:
    """Release writes client-go's ReleaseOnCancel record: no holder, leaseDurationSeconds 1."""
    metrics = Metrics(process_collectors=False)
    a = candidate("replica-a", on_leader_change=metrics.set_leader).start()
    _wait(a.started.is_set, 10, "replica-a to lead")
    assert metrics.sample("custom_scheduler_leader") == 1
    a.halt()
    spec = _lease(kube, lease_config)["spec"]
    assert spec.get("holderIdentity", "") == ""
    assert spec["leaseDurationSeconds"] == 1
    assert spec["leaseTransitions"] == 0
    assert MICROTIME_RE.match(spec["renewTime"])
    assert metrics.sample("custom_scheduler_leader") == 0
    assert not a.elector.is_leader


def test_leader_whose_lease_is_taken_away_stops_leading(
    kube: KubeClient, lease_config: LeaderElectionConfig, candidate: Callable[..., Candidate]
) -> None:
    """A renewal that sees another holder (Lease recreated) ends leadership at once: no retrying until
    renewDeadline, since the Lease cannot be won back before it expires; the fence is revoked."""
    a = candidate("replica-a").start()
    _wait(a.started.is_set, 10, "replica-a to lead")
    path = leader.lease_path(lease_config.resource_namespace, lease_config.resource_name)
    kube.delete(path)
    now = leader.microtime(datetime.now(UTC))
    intruder = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": lease_config.resource_name, "namespace": lease_config.resource_namespace},
        "spec": {
            "holderIdentity": "intruder",
            "leaseDurationSeconds": 60,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": 7,
        },
    }
    replaced_at = time.monotonic()
    kube.post(leader.lease_path(lease_config.resource_namespace), intruder)

    _wait(a.stopped.is_set, RENEW + 2 * RETRY + 3, "replica-a to give up")
    assert not a.elector.is_leader
    # It noticed at the next renewal (≤ one retry) and gave up then, well before renewDeadline.
    assert a.stopped_at - replaced_at <= RETRY + 1.0
    assert a.elector.fence.report().reason == "lease held by intruder"
    assert a.thread is not None
    a.thread.join(5)
    assert not a.thread.is_alive(), "run() returns after losing leadership (no re-campaign)"
    spec = _lease(kube, lease_config)["spec"]
    assert spec["holderIdentity"] == "intruder", "the loser never overwrote the new holder"
    assert spec["leaseTransitions"] == 7


def test_candidate_waits_for_an_unexpired_foreign_lease(
    kube: KubeClient, lease_config: LeaderElectionConfig, candidate: Callable[..., Candidate]
) -> None:
    """A Lease held by someone else is respected until it expires on the candidate's own clock.

    The holder's ``renewTime`` is set far in the past on purpose: expiry is judged from when the
    candidate observed the record, so a skewed clock on the holder cannot trigger a takeover.
    """
    old = leader.microtime(datetime.now(UTC) - timedelta(hours=1))
    kube.post(
        leader.lease_path(lease_config.resource_namespace),
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": lease_config.resource_name, "namespace": lease_config.resource_namespace},
            "spec": {
                "holderIdentity": "skewed-holder",
                "leaseDurationSeconds": int(LEASE),
                "acquireTime": old,
                "renewTime": old,
                "leaseTransitions": 3,
            },
        },
    )
    started_at = time.monotonic()
    a = candidate("replica-a").start()
    # The takeover is the positive event; its time is the check: a candidate judging expiry from
    # the holder's renewTime (an hour ago) would take over at its first try, one that judges it from
    # its own first observation (made after ``started_at``) waits at least a lease duration.
    _wait(a.started.is_set, LEASE + 4, "replica-a to take over the expired lease")
    assert a.started_at - started_at >= LEASE, "took over before the Lease expired from its own observation"
    spec = _lease(kube, lease_config)["spec"]
    _assert_well_formed(spec, holder="replica-a")
    assert spec["leaseTransitions"] == 4


def test_conflicting_write_loses_the_race(kube: KubeClient, lease_config: LeaderElectionConfig) -> None:
    """Optimistic concurrency: a write based on a stale resourceVersion fails instead of clobbering."""
    a = leader.LeaderElector(kube, lease_config, "replica-a")
    b = leader.LeaderElector(kube, lease_config, "replica-b")
    assert a.try_acquire_or_renew()
    # b reads the Lease, then a renews (new resourceVersion), then b's stale takeover must fail.
    b_lease = _lease(kube, lease_config)
    assert a.try_acquire_or_renew()
    b._lease = b_lease  # a stale read, injected to make the race deterministic
    b._observed = leader.LeaseRecord.from_lease(b_lease)
    assert not b._put(b._record(renewing=False))
    with pytest.raises(api_errors.Conflict):
        kube.put(leader.lease_path(lease_config.resource_namespace, lease_config.resource_name), b_lease)
    assert _lease(kube, lease_config)["spec"]["holderIdentity"] == "replica-a"
    assert a.release()
