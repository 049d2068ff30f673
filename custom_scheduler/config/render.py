"""The effective config back to ``KubeSchedulerConfiguration`` YAML (``check-config`` prints it).

The output is the operator's answer to "what will actually run": every default filled in,
durations as Go strings (``"15s"``), and each profile's plugins fully expanded per extension point.
Each point is written as ``{enabled: [...], disabled: [{name: "*"}]}``: the ``*`` switches off the
defaults, so the printed lists are the whole truth and loading the output again yields the same
config (``load_config(render_effective(c)) == c``), even if the default profile later grows.

Plugin args are rendered when the Args object offers ``to_config()`` (returning a mapping in the
YAML's shape) or is a dataclass, whose fields are written in camelCase (``scoring_strategy`` →
``scoringStrategy``), recursively; ``None`` fields are left out, enums become their values, tuples
and sets become lists, mapping keys are kept as they are (they are data, e.g. label keys). Args of
any other type, and ``None`` (plugins without args), produce no ``pluginConfig`` entry.

:func:`configz` is the same document as kube-scheduler's ``/configz`` serves it: the versioned
config under ``componentconfig``, as JSON, with ``kind``/``apiVersion`` in the document and in each
plugin's args (upstream converts every args object to its v1 type, which carries both). One
difference in shape: upstream shows each profile's plugins as merged with the defaults (the default
``multiPoint`` list, the points as configured); here every point is expanded, as ``check-config``
prints it, which states the same effective plugins and loads back to the same config.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping
from typing import Any

import yaml

from custom_scheduler.config import durations, schema

__all__ = ["CONFIGZ_NAME", "args_to_dict", "camel_case", "configz", "configz_json", "render_effective", "to_dict"]

#: The name kube-scheduler registers its config under in ``/configz`` (``configz.New``).
CONFIGZ_NAME = "componentconfig"


def camel_case(snake: str) -> str:
    """``scoring_strategy`` → ``scoringStrategy``."""
    head, *rest = snake.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _value(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return _value(value.value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            camel_case(f.name): _value(v)
            for f in dataclasses.fields(value)
            if not f.name.startswith("_") and (v := getattr(value, f.name)) is not None
        }
    if isinstance(value, Mapping):
        return {str(k): _value(v) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        return sorted((_value(v) for v in value), key=str)
    if isinstance(value, list | tuple):
        return [_value(v) for v in value]
    return str(value)


def args_to_dict(args: Any) -> dict[str, Any] | None:
    """An Args object as its ``pluginConfig`` ``args`` mapping, or None when it cannot be rendered."""
    to_config = getattr(args, "to_config", None)
    if callable(to_config):
        rendered = to_config()
        return {str(k): _value(v) for k, v in rendered.items()} if isinstance(rendered, Mapping) else None
    if dataclasses.is_dataclass(args) and not isinstance(args, type):
        out: dict[str, Any] = _value(args)
        return out
    return None


def _plugins(profile: schema.Profile) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for point in schema.EXTENSION_POINTS:
        refs = profile.enabled(point)
        enabled = [{"name": r.name, "weight": r.weight} if point == "score" else {"name": r.name} for r in refs]
        out[point] = {"enabled": enabled, "disabled": [{"name": "*"}]}
    return out


def _profile(profile: schema.Profile) -> dict[str, Any]:
    out: dict[str, Any] = {"schedulerName": profile.scheduler_name}
    if profile.percentage_of_nodes_to_score is not None:
        out["percentageOfNodesToScore"] = profile.percentage_of_nodes_to_score
    out["plugins"] = _plugins(profile)
    plugin_config = []
    for name, args in profile.plugin_args.items():
        rendered = args_to_dict(args)
        if rendered is not None:
            plugin_config.append({"name": name, "args": rendered})
    out["pluginConfig"] = plugin_config
    return out


def to_dict(config: schema.SchedulerConfig) -> dict[str, Any]:
    """The effective config as plain data in ``KubeSchedulerConfiguration``'s shape and key order."""
    le = config.leader_election
    cc = config.client_connection
    return {
        "apiVersion": schema.API_VERSION,
        "kind": schema.KIND,
        "parallelism": config.parallelism,
        "leaderElection": {
            "leaderElect": le.leader_elect,
            "leaseDuration": durations.format_duration(le.lease_duration),
            "renewDeadline": durations.format_duration(le.renew_deadline),
            "retryPeriod": durations.format_duration(le.retry_period),
            "resourceLock": le.resource_lock,
            "resourceName": le.resource_name,
            "resourceNamespace": le.resource_namespace,
        },
        "clientConnection": {
            "kubeconfig": cc.kubeconfig,
            "acceptContentTypes": cc.accept_content_types,
            "contentType": cc.content_type,
            "qps": cc.qps,
            "burst": cc.burst,
        },
        "healthzBindAddress": config.healthz_bind_address,
        "enableProfiling": config.enable_profiling,
        "enableContentionProfiling": config.enable_contention_profiling,
        "percentageOfNodesToScore": config.percentage_of_nodes_to_score,
        "podInitialBackoffSeconds": config.pod_initial_backoff_seconds,
        "podMaxBackoffSeconds": config.pod_max_backoff_seconds,
        "profiles": [_profile(p) for p in config.profiles],
        "extenders": [_extender(e) for e in config.extenders],
        "delayCacheUntilActive": config.delay_cache_until_active,
    }


def _extender(e: schema.Extender) -> dict[str, Any]:
    """One ``extenders[]`` entry in v1's field names; verbs and TLS fields left out when empty (as
    upstream's JSON omits them). Key material is never rendered, only whether it is set: this
    document is printed by ``check-config`` and served on ``/configz``."""
    out: dict[str, Any] = {"urlPrefix": e.url_prefix}
    for key, verb in (
        ("filterVerb", e.filter_verb),
        ("preemptVerb", e.preempt_verb),
        ("prioritizeVerb", e.prioritize_verb),
    ):
        if verb:
            out[key] = verb
    out["weight"] = e.weight
    if e.bind_verb:
        out["bindVerb"] = e.bind_verb
    out["enableHTTPS"] = e.enable_https
    if e.tls_config is not None:
        t = e.tls_config
        tls: dict[str, Any] = {"insecure": t.insecure}
        for key, value in (
            ("serverName", t.server_name),
            ("certFile", t.cert_file),
            ("keyFile", t.key_file),
            ("caFile", t.ca_file),
        ):
            if value:
                tls[key] = value
        for key, data in (("certData", t.cert_data), ("keyData", t.key_data), ("caData", t.ca_data)):
            if data:
                tls[key] = "<redacted>"
        out["tlsConfig"] = tls
    out["httpTimeout"] = durations.format_duration(e.http_timeout)
    out["nodeCacheCapable"] = e.node_cache_capable
    if e.managed_resources:
        out["managedResources"] = [
            {"name": m.name, "ignoredByScheduler": m.ignored_by_scheduler} for m in e.managed_resources
        ]
    out["ignorable"] = e.ignorable
    return out


def render_effective(config: schema.SchedulerConfig) -> str:
    """The effective config as a YAML document (what ``custom-scheduler check-config`` prints)."""
    return yaml.safe_dump(to_dict(config), sort_keys=False, default_flow_style=False, allow_unicode=True)


def configz(config: schema.SchedulerConfig) -> dict[str, Any]:
    """The ``/configz`` document: ``{"componentconfig": <the effective config>}``, with the type
    meta of the config and of every plugin's args (``<Plugin>Args``), as upstream's JSON has."""
    doc = to_dict(config)
    versioned: dict[str, Any] = {"kind": schema.KIND, "apiVersion": schema.API_VERSION}
    versioned.update((k, v) for k, v in doc.items() if k not in versioned)
    for omitempty in ("extenders", "delayCacheUntilActive"):  # upstream's JSON leaves them out when empty
        if not versioned.get(omitempty):
            versioned.pop(omitempty, None)
    for profile in versioned["profiles"]:
        for entry in profile["pluginConfig"]:
            meta = {"kind": f"{entry['name']}Args", "apiVersion": schema.API_VERSION}
            entry["args"] = {**meta, **entry["args"]}
    return {CONFIGZ_NAME: versioned}


def configz_json(config: schema.SchedulerConfig) -> bytes:
    """:func:`configz` as the compact JSON body ``/configz`` answers with."""
    return json.dumps(configz(config), separators=(",", ":"), ensure_ascii=False).encode()
