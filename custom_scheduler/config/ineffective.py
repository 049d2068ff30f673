"""The fields a ``KubeSchedulerConfiguration`` may set that this scheduler accepts without effect.

Decoding is strict (an unknown field is an error), so a file written for kube-scheduler loads
unchanged; but a few fields of upstream's v1 API are accepted only so that it does, and change
nothing here. Accepting them silently would let an operator believe they work, so they are listed
once, here, with the reason; ``custom-scheduler check-config`` prints a warning for each one a file
sets and the README's configuration section lists them.

Every other field of upstream's v1 ``KubeSchedulerConfiguration`` has its effect (``extenders``
aside, which :mod:`custom_scheduler.config.extenders` handles): ``percentageOfNodesToScore``,
``podInitialBackoffSeconds``/``podMaxBackoffSeconds``, ``profiles``, ``delayCacheUntilActive``,
``leaderElection`` (``resourceLock`` only ``leases``), ``clientConnection.kubeconfig``/``qps``/
``burst``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ARGS_WITHOUT_EFFECT", "FIELDS_WITHOUT_EFFECT", "Ineffective", "ineffective_fields"]

#: Field path (dots into nested mappings) → why it has no effect here.
FIELDS_WITHOUT_EFFECT: Mapping[str, str] = {
    "parallelism": (
        "filters, scores and preemption's dry runs run on the scheduling thread, one node after the "
        "other; evictions always have up to 16 API calls in flight"
    ),
    "enableProfiling": "there is no /debug/pprof endpoint",
    "enableContentionProfiling": "there is no /debug/pprof endpoint",
    "clientConnection.contentType": "the client always sends and accepts JSON",
    "clientConnection.acceptContentTypes": "the client always sends and accepts JSON",
}

#: (plugin, args field) → why it has no effect here.
ARGS_WITHOUT_EFFECT: Mapping[tuple[str, str], str] = {
    ("DynamicResources", "bindingTimeout"): (
        "device binding conditions are not implemented yet; it takes effect once they are"
    ),
}


@dataclass(frozen=True, slots=True)
class Ineffective:
    """One field a document sets that has no effect: where, and why."""

    path: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}: accepted without effect ({self.why})"


def _lookup(doc: Mapping[str, object], dotted: str) -> object:
    value: object = doc
    for key in dotted.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def ineffective_fields(raw: object) -> list[Ineffective]:
    """The fields without effect that ``raw`` (a parsed config document) sets to a non-null
    value: the top-level ones in :data:`FIELDS_WITHOUT_EFFECT` order, then plugin args in
    document order. Anything that is not a mapping sets nothing."""
    if not isinstance(raw, Mapping):
        return []
    out = [Ineffective(path, why) for path, why in FIELDS_WITHOUT_EFFECT.items() if _lookup(raw, path) is not None]
    profiles = raw.get("profiles")
    for i, profile in enumerate(profiles if isinstance(profiles, list) else ()):
        configs = profile.get("pluginConfig") if isinstance(profile, Mapping) else None
        for j, entry in enumerate(configs if isinstance(configs, list) else ()):
            if not isinstance(entry, Mapping) or not isinstance(args := entry.get("args"), Mapping):
                continue
            for (plugin, key), why in ARGS_WITHOUT_EFFECT.items():
                if entry.get("name") == plugin and args.get(key) is not None:
                    out.append(Ineffective(f"profiles[{i}].pluginConfig[{j}].args.{key}", why))
    return out
