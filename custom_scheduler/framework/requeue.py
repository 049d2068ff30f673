"""One profile's requeue rules: which plugin's hints a cluster event asks, for which rejected pod.

Built once per :class:`~custom_scheduler.framework.runtime.Framework` from its plugins'
``events_to_register`` (upstream's queueing-hint map, ``buildQueueingHintMap``). The scheduling
queue asks :meth:`RequeueRules.worth_requeuing` for each pod the event may concern, with the
plugins that rejected that pod's last attempt (upstream's ``isPodWorthRequeuing``):

- a pod no plugin rejected (an error, or a rejection with no plugin named) is always retried;
- a wildcard event (ForceActivate, the unschedulable timeout) retries every pod;
- otherwise only the rejecting plugins' registrations that match the event are asked, in order,
  and the first QUEUE retries the pod; a hint that raises counts as QUEUE, so a bug in a hint
  never strands a pod;
- a rejecting plugin that registers nothing (no ``events_to_register``) is retried on every event,
  as upstream unrolls such a plugin into a wildcard; so is a name no plugin of the profile has
  (an extender's, or a plugin removed by a config reload), which upstream would leave for the
  unschedulable timeout: retrying is the side that never strands a pod.

:meth:`RequeueRules.interested` answers the cheap first question, before any pod is looked at:
which plugins care about this event at all. The queue keeps its unschedulable pods indexed by
rejecting plugin, so an event nobody registered for touches no pod.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from typing import Any, TypeVar

import structlog

from custom_scheduler.api.model import Pod
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework.interface import EnqueueExtensions

log = structlog.get_logger("custom_scheduler.framework.requeue")

T = TypeVar("T")

#: ``interested``'s answer when a plugin without registrations exists: every rejected pod counts.
EVERYONE = None


class RequeueRules:
    """The registrations of one profile's plugins, by plugin name."""

    def __init__(self, registrations: Mapping[str, tuple[ce.ClusterEventWithHint, ...] | None]) -> None:
        # None: the plugin registers nothing, so any event may help it (a wildcard).
        self._by_plugin = dict(registrations)
        self._interest: dict[ce.ClusterEvent, frozenset[str]] = {}
        # (plugin, event) -> the plugin's registrations matching the event, None for "any event"
        # (no registrations, or a wildcard event): worth_requeuing runs once per rejected pod and
        # event, and matching each registration there cost as much as the hints themselves.
        self._matching: dict[tuple[str, ce.ClusterEvent], tuple[ce.ClusterEventWithHint, ...] | None] = {}

    @classmethod
    def of(cls, plugins: Mapping[str, object]) -> RequeueRules:
        """From a profile's plugin instances (by name)."""
        regs: dict[str, tuple[ce.ClusterEventWithHint, ...] | None] = {}
        for name, plugin in plugins.items():
            regs[name] = tuple(plugin.events_to_register()) if isinstance(plugin, EnqueueExtensions) else None
        return cls(regs)

    @property
    def plugins(self) -> frozenset[str]:
        """Every plugin of the profile."""
        return frozenset(self._by_plugin)

    def registrations(self) -> list[ce.ClusterEventWithHint]:
        """Every plugin's registrations (for which informers the profile needs)."""
        return [reg for regs in self._by_plugin.values() if regs is not None for reg in regs]

    def registered(self, plugin: str) -> tuple[ce.ClusterEventWithHint, ...] | None:
        """What ``plugin`` registered (None: nothing, it takes every event)."""
        return self._by_plugin.get(plugin)

    def interested(self, event: ce.ClusterEvent) -> frozenset[str]:
        """The plugins whose rejections ``event`` may lift: those registering a matching event and
        those registering nothing. Cached per event (the registrations never change)."""
        found = self._interest.get(event)
        if found is None:
            found = frozenset(
                name
                for name, regs in self._by_plugin.items()
                if regs is None or event.is_wildcard or ce.any_interest(regs, event)
            )
            self._interest[event] = found
        return found

    def targets(self, plugin: str, event: ce.ClusterEvent, old: Any, new: Any) -> frozenset[str] | None:
        """The pods ``plugin``'s registrations for ``event`` can concern (their ``targets``), or
        None when one of them can concern any pod (or has no ``targets``)."""
        return self._narrowing(plugin, event, lambda reg: None if reg.targets is None else reg.targets(old, new))

    def pod_keys(self, plugin: str, pod: Pod) -> frozenset[Hashable] | None:
        """The keys ``pod``, rejected by ``plugin``, waits on: the union over the plugin's keyed
        registrations (None when it has none, or one of them says any change may concern the pod)."""
        keyed = [reg.pod_keys for reg in self._by_plugin.get(plugin) or () if reg.pod_keys is not None]
        return _union(fn(pod) for fn in keyed) if keyed else None

    def event_keys(self, plugin: str, event: ce.ClusterEvent, old: Any, new: Any) -> frozenset[Hashable] | None:
        """The keys ``event`` carries for ``plugin``'s registrations (None: no narrowing, when a
        matching registration has no ``event_keys`` or it answers None)."""
        return self._narrowing(plugin, event, lambda reg: None if reg.event_keys is None else reg.event_keys(old, new))

    def _narrowing(
        self, plugin: str, event: ce.ClusterEvent, ask: Callable[[ce.ClusterEventWithHint], frozenset[T] | None]
    ) -> frozenset[T] | None:
        """The union of ``ask`` over ``plugin``'s registrations matching ``event``; None (no
        narrowing) for a plugin without registrations, a wildcard event, or any None answer."""
        regs = self._by_plugin.get(plugin)
        if regs is None or event.is_wildcard:
            return None
        return _union(ask(reg) for reg in regs if ce.matches(reg.event, event))

    def worth_requeuing(self, pod: Pod, rejectors: Collection[str], event: ce.ClusterEvent, old: Any, new: Any) -> bool:
        """Whether ``event`` may make ``pod``, rejected by ``rejectors``, schedulable."""
        if not rejectors:
            return True
        matching = self._matching
        for plugin in rejectors:
            try:
                regs = matching[plugin, event]
            except KeyError:
                regs = matching[plugin, event] = self._matching_registrations(plugin, event)
            if regs is None:
                return True
            for reg in regs:
                if reg.hint is None or _ask(reg.hint, plugin, pod, event, old, new) is ce.Hint.QUEUE:
                    return True
        return False

    def _matching_registrations(
        self, plugin: str, event: ce.ClusterEvent
    ) -> tuple[ce.ClusterEventWithHint, ...] | None:
        regs = self._by_plugin.get(plugin, EVERYONE)
        if regs is None or event.is_wildcard:
            return None
        return tuple(reg for reg in regs if ce.matches(reg.event, event))


def _union(parts: Iterable[frozenset[T] | None]) -> frozenset[T] | None:
    """The union of ``parts``, or None as soon as one is None."""
    found: set[T] = set()
    for got in parts:
        if got is None:
            return None
        found |= got
    return frozenset(found)


def _ask(hint: ce.HintFn, plugin: str, pod: Pod, event: ce.ClusterEvent, old: Any, new: Any) -> ce.Hint:
    try:
        return hint(pod, old, new)
    except Exception as e:  # a hint's bug must not strand the pod: upstream queues it too
        error = f"{type(e).__name__}: {e}"
        log.error("queueing_hint_failed", plugin=plugin, cluster_event=event.label, pod=pod.key, error=error)
        return ce.Hint.QUEUE
