"""Cross-field validation of a decoded :class:`~custom_scheduler.config.schema.SchedulerConfig`.

Decoding (:mod:`~custom_scheduler.config.loading`, :mod:`~custom_scheduler.config.merging`)
already refuses malformed values field by field; this module checks what only makes sense with
defaults filled in, mirroring kube-scheduler's ``validation.ValidateKubeSchedulerConfiguration``
and component-base's leader-election validation:

- ``parallelism`` > 0; ``percentageOfNodesToScore`` (global and per profile) within 0-100;
- ``podInitialBackoffSeconds`` > 0 and ``podMaxBackoffSeconds`` ≥ it;
- ``clientConnection.qps``/``burst`` not negative;
- with leader election on: positive durations, ``leaseDuration > renewDeadline >
  1.2 x retryPeriod``, a Lease lock, and a lock name and namespace;
- ``healthzBindAddress`` is ``host:port``;
- every profile has a unique, non-empty ``schedulerName``; exactly one queueSort plugin and at
  least one bind plugin per profile; the same queueSort plugin (and args) in every profile,
  because all profiles share one queue.

Every check appends to the shared :class:`~custom_scheduler.config.decoding.Errors`; none stops
the others.
"""

from __future__ import annotations

from collections.abc import Collection

from custom_scheduler.config import schema
from custom_scheduler.config.decoding import Errors, index, join

__all__ = ["JITTER_FACTOR", "validate"]

#: client-go's leader-election jitter: renewDeadline must exceed retryPeriod x this.
JITTER_FACTOR = 1.2


def _percentage(value: int | None, path: str, errors: Errors) -> None:
    if value is not None and not 0 <= value <= 100:
        errors.add(path, f"must be between 0 and 100, got {value}")


def _leader_election(le: schema.LeaderElectionConfig, errors: Errors) -> None:
    path = "leaderElection"
    if not le.leader_elect:
        return
    positive = True
    for key, value in (
        ("leaseDuration", le.lease_duration),
        ("renewDeadline", le.renew_deadline),
        ("retryPeriod", le.retry_period),
    ):
        if value <= 0:
            errors.add(join(path, key), "must be greater than zero")
            positive = False
    if positive:
        if le.lease_duration <= le.renew_deadline:
            errors.add(
                join(path, "leaseDuration"),
                f"must be greater than renewDeadline ({le.lease_duration:g}s <= {le.renew_deadline:g}s)",
            )
        if le.renew_deadline <= JITTER_FACTOR * le.retry_period:
            errors.add(
                join(path, "renewDeadline"),
                f"must be greater than {JITTER_FACTOR} x retryPeriod "
                f"({le.renew_deadline:g}s <= {JITTER_FACTOR * le.retry_period:g}s)",
            )
    if le.resource_lock != "leases":
        errors.add(join(path, "resourceLock"), f'only "leases" is supported, got "{le.resource_lock}"')
    if not le.resource_name:
        errors.add(join(path, "resourceName"), "required when leaderElect is true")
    if not le.resource_namespace:
        errors.add(join(path, "resourceNamespace"), "required when leaderElect is true")


def _bind_address(address: str, path: str, errors: Errors) -> None:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        errors.add(path, f'must be "host:port" with a port in 0-65535, got "{address}"')
    elif host.startswith("[") != host.endswith("]"):
        errors.add(path, f'malformed IPv6 host in "{address}" (use "[::]:10259")')


def _profile_plugins(profile: schema.Profile, path: str, errors: Errors) -> None:
    queue_sort = profile.enabled("queueSort")
    if len(queue_sort) != 1:
        names = ", ".join(r.name for r in queue_sort) or "none"
        errors.add(
            join(path, "plugins.queueSort"),
            f"exactly one queueSort plugin must be enabled, got {len(queue_sort)} ({names})",
        )
    if not profile.enabled("bind"):
        errors.add(join(path, "plugins.bind"), "at least one bind plugin must be enabled")


def _profiles(profiles: tuple[schema.Profile, ...], errors: Errors, skip: Collection[int]) -> None:
    seen: dict[str, int] = {}
    for i, profile in enumerate(profiles):
        path = index("profiles", i)
        name = profile.scheduler_name
        if not name:
            errors.add(join(path, "schedulerName"), "required (profiles need unique names)")
        elif name in seen:
            errors.add(
                join(path, "schedulerName"),
                f'duplicate schedulerName "{name}" (also profiles[{seen[name]}])',
            )
        else:
            seen[name] = i
        _percentage(profile.percentage_of_nodes_to_score, join(path, "percentageOfNodesToScore"), errors)
        if i not in skip:
            _profile_plugins(profile, path, errors)

    # All profiles share one scheduling queue, so they must order it the same way.
    checked = [(i, p) for i, p in enumerate(profiles) if i not in skip and p.enabled("queueSort")]
    if not checked:
        return
    first_i, first = checked[0]
    first_sort = first.enabled("queueSort")
    for i, profile in checked[1:]:
        sort = profile.enabled("queueSort")
        if [r.name for r in sort] != [r.name for r in first_sort]:
            errors.add(
                join(index("profiles", i), "plugins.queueSort"),
                f"queueSort must be the same in all profiles: {sort[0].name} here, "
                f"{first_sort[0].name} in profiles[{first_i}]",
            )
        elif profile.plugin_args.get(sort[0].name) != first.plugin_args.get(sort[0].name):
            errors.add(
                join(index("profiles", i), "pluginConfig"),
                f"args of queueSort plugin {sort[0].name} must be the same in all profiles "
                f"(they differ from profiles[{first_i}])",
            )


def validate(config: schema.SchedulerConfig, errors: Errors, *, skip_plugin_checks: Collection[int] = ()) -> None:
    """Check ``config`` as a whole, adding every problem to ``errors``.

    ``skip_plugin_checks`` lists profile indices whose ``plugins``/``pluginConfig`` already had
    decoding errors: their queueSort/bind checks are skipped so one typo is reported once rather
    than also as "no queueSort plugin".
    """
    if config.parallelism <= 0:
        errors.add("parallelism", f"must be greater than 0, got {config.parallelism}")
    _percentage(config.percentage_of_nodes_to_score, "percentageOfNodesToScore", errors)
    if config.pod_initial_backoff_seconds <= 0:
        errors.add("podInitialBackoffSeconds", f"must be greater than 0, got {config.pod_initial_backoff_seconds}")
    elif config.pod_max_backoff_seconds < config.pod_initial_backoff_seconds:
        errors.add(
            "podMaxBackoffSeconds",
            f"must be greater than or equal to podInitialBackoffSeconds "
            f"({config.pod_max_backoff_seconds} < {config.pod_initial_backoff_seconds})",
        )
    cc = config.client_connection
    if cc.qps < 0:
        errors.add("clientConnection.qps", f"must not be negative, got {cc.qps:g}")
    if cc.burst < 0:
        errors.add("clientConnection.burst", f"must not be negative, got {cc.burst}")
    _leader_election(config.leader_election, errors)
    _bind_address(config.healthz_bind_address, "healthzBindAddress", errors)
    _profiles(config.profiles, errors, skip_plugin_checks)
