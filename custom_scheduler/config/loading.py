"""YAML → :class:`~custom_scheduler.config.schema.SchedulerConfig`: parse, decode, default, validate.

The pipeline is linear and collects rather than stops: YAML is parsed with ``safe_load`` (plus a
duplicate-key check, as kube-scheduler's strict decoding has), every field is decoded with its
path (:mod:`~custom_scheduler.config.decoding`), each profile's plugins are merged with the
default profile (:mod:`~custom_scheduler.config.merging`), plugin args go through their plugin's
``parse_args``, and the result is validated as a whole (:mod:`~custom_scheduler.config.validation`).
Only then, if nothing at all was wrong, is the config returned; otherwise one
:class:`~custom_scheduler.errors.ConfigError` carries every problem found.

A ``SchedulerConfig`` is therefore always valid. Loading has no side effects beyond reading the
file and calling the registry's parsers, so the daemon can load a changed ConfigMap, and keep the
running config if the new one is refused.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from custom_scheduler.config import merging, schema, validation
from custom_scheduler.config.decoding import Errors, Reader, index, join, type_name
from custom_scheduler.config.extenders import parse_extenders, validate_extenders, with_ignored_resources
from custom_scheduler.errors import ConfigError

__all__ = ["from_dict", "load_config", "load_config_file", "parse_yaml"]

_TOP_LEVEL_HINTS = {
    "metricsBindAddress": "not supported: /metrics is served on healthzBindAddress",
    "algorithmSource": "removed from the config API (v1beta1 and later use profiles)",
}


class _YamlMap(dict[Any, Any]):
    """A YAML mapping that remembers keys the document gave more than once."""

    duplicates: tuple[str, ...] = ()


class _StrictLoader(yaml.SafeLoader):
    """``SafeLoader`` whose mappings record duplicate keys instead of silently keeping the last."""


def _construct_map(loader: _StrictLoader, node: yaml.MappingNode) -> Any:
    data = _YamlMap()
    yield data
    seen: set[str] = set()
    dups: list[str] = []
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value != "<<":
            if key_node.value in seen:
                dups.append(key_node.value)
            seen.add(key_node.value)
    data.update(loader.construct_mapping(node))
    data.duplicates = tuple(dups)


_StrictLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)


def _report_duplicates(value: object, path: str, errors: Errors) -> None:
    if isinstance(value, Mapping):
        for key in getattr(value, "duplicates", ()):
            errors.add(join(path, key), f'duplicate field "{key}"')
        for key, child in value.items():
            _report_duplicates(child, join(path, str(key)), errors)
    elif isinstance(value, list):
        for i, child in enumerate(value):
            _report_duplicates(child, index(path, i), errors)


def parse_yaml(text: str, *, source_name: str | None = None) -> Any:
    """Parse one YAML document strictly (duplicate keys are errors). Raises ConfigError.

    ``source_name`` (a file name) is what YAML syntax errors say they are "in".
    """
    stream = io.StringIO(text)
    stream.name = source_name or "<config>"
    try:
        raw = yaml.load(stream, Loader=_StrictLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.YAMLError as e:
        raise ConfigError(f"invalid YAML: {e}") from e
    errors = Errors()
    _report_duplicates(raw, "", errors)
    errors.raise_if_any()
    return raw


def _leader_election(r: Reader) -> schema.LeaderElectionConfig:
    d = schema.LeaderElectionConfig()
    le = schema.LeaderElectionConfig(
        leader_elect=r.boolean("leaderElect", d.leader_elect),
        lease_duration=r.duration("leaseDuration", d.lease_duration),
        renew_deadline=r.duration("renewDeadline", d.renew_deadline),
        retry_period=r.duration("retryPeriod", d.retry_period),
        resource_lock=r.string("resourceLock", "") or d.resource_lock,
        resource_name=r.string("resourceName", "") or d.resource_name,
        resource_namespace=r.string("resourceNamespace", "") or d.resource_namespace,
    )
    r.finish()
    return le


def _client_connection(r: Reader) -> schema.ClientConnectionConfig:
    d = schema.ClientConnectionConfig()
    cc = schema.ClientConnectionConfig(
        kubeconfig=r.string("kubeconfig", d.kubeconfig),
        # kube-scheduler's own defaulting: 0 (or unset) means its opinionated 50/100.
        qps=r.number("qps", 0.0) or d.qps,
        burst=r.integer("burst", 0) or d.burst,
        content_type=r.string("contentType", "") or d.content_type,
        accept_content_types=r.string("acceptContentTypes", d.accept_content_types),
    )
    r.finish()
    return cc


def _parse_args(spec: schema.PluginInfo, raw: Mapping[str, Any] | None, path: str, errors: Errors) -> Any:
    try:
        return spec.parse_args(raw, path)
    except ConfigError as e:
        errors.absorb(e)
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        # A parser that did not anticipate some input shape; still the config's fault, still a path.
        errors.add(path, f"invalid args for {spec.name}: {type(e).__name__}: {e}")
    return None


def _plugin_config(
    items: list[Any], path: str, enabled: tuple[str, ...], registry: schema.PluginCatalog, errors: Errors
) -> dict[str, Any]:
    configured: dict[str, tuple[Mapping[str, Any] | None, str]] = {}
    for j, item in enumerate(items):
        r = Reader(item, index(join(path, "pluginConfig"), j), errors)
        name = r.opt_string("name")
        args = r.raw("args")
        r.finish()
        args_path = r.path_of("args")
        if not name:
            if isinstance(item, Mapping):
                errors.add(r.path_of("name"), "required")
            continue
        if name not in registry:
            errors.add(r.path_of("name"), f'unknown plugin "{name}"')
            continue
        if name in configured:
            errors.add(r.path_of("name"), f'duplicate pluginConfig for "{name}" (also {configured[name][1]})')
            continue
        if args is not None and not isinstance(args, Mapping):
            errors.add(args_path, f"expected a mapping, got {type_name(args)}")
            continue
        if args is not None:
            args = _strip_type_meta(args, name, args_path, errors)
        configured[name] = (args, args_path)
    out = {name: _parse_args(registry[name], raw, p, errors) for name, (raw, p) in configured.items()}
    for name in enabled:
        if name not in out:
            out[name] = _parse_args(registry[name], None, f"{path}.pluginConfig[{name}].args", errors)
    return out


def _strip_type_meta(args: Mapping[str, Any], name: str, path: str, errors: Errors) -> Mapping[str, Any] | None:
    """Accept (and drop) ``apiVersion``/``kind`` inside args, as kube-scheduler does, when they match."""
    kind = args.get("kind")
    if kind is not None and kind != f"{name}Args":
        errors.add(join(path, "kind"), f'expected "{name}Args", got "{kind}"')
    version = args.get("apiVersion")
    if version is not None and version != schema.API_VERSION:
        errors.add(join(path, "apiVersion"), f'expected "{schema.API_VERSION}", got "{version}"')
    rest = {k: v for k, v in args.items() if k not in {"kind", "apiVersion"}}
    return rest or None


def _profiles(
    items: list[Any], registry: schema.PluginCatalog, errors: Errors, skip: set[int]
) -> tuple[schema.Profile, ...]:
    items = items or [{}]
    profiles = []
    for i, item in enumerate(items):
        r = Reader(item, index("profiles", i), errors)
        raw_name = r.raw("schedulerName")
        name = r.opt_string("schedulerName")
        if raw_name is None and len(items) == 1:
            name = schema.DEFAULT_SCHEDULER_NAME
        elif name is None and raw_name is not None:
            name = f"<invalid profiles[{i}]>"  # wrong type, already reported; not also "required"
        percentage = r.opt_integer("percentageOfNodesToScore")
        before = len(errors)
        plugins = merging.effective_plugins(r.raw("plugins"), r.path_of("plugins"), registry=registry, errors=errors)
        names = tuple(dict.fromkeys(ref.name for refs in plugins.values() for ref in refs))
        args = _plugin_config(r.sequence("pluginConfig"), r.path, names, registry, errors)
        if len(errors) != before:
            skip.add(i)
        r.finish()
        profiles.append(
            schema.Profile(
                scheduler_name=name or "",
                plugins=plugins,
                plugin_args=args,
                percentage_of_nodes_to_score=percentage,
            )
        )
    return tuple(profiles)


def from_dict(raw: object, registry: schema.PluginCatalog) -> schema.SchedulerConfig:
    """Decode, default and validate an already-parsed config document. Raises ConfigError."""
    errors = Errors()
    if not isinstance(raw, Mapping):
        hint = (
            f' ("{raw}"; to load a file, pass a pathlib.Path or use load_config_file)' if isinstance(raw, str) else ""
        )
        raise ConfigError(f"expected a KubeSchedulerConfiguration mapping, got {type_name(raw)}{hint}")
    r = Reader(raw, "", errors)
    for key, want in (("apiVersion", schema.API_VERSION), ("kind", schema.KIND)):
        got = r.raw(key)
        if got is None:
            errors.add(key, f'required: "{want}"')
        elif got != want:
            errors.add(key, f'unsupported {key} "{got}" (expected "{want}")')
    d = schema.SchedulerConfig(profiles=())
    enable_profiling = r.boolean("enableProfiling", d.enable_profiling)
    extenders = parse_extenders(r.sequence("extenders"), errors)
    skip: set[int] = set()
    config = schema.SchedulerConfig(
        parallelism=r.integer("parallelism", d.parallelism),
        percentage_of_nodes_to_score=r.integer("percentageOfNodesToScore", d.percentage_of_nodes_to_score),
        pod_initial_backoff_seconds=r.integer("podInitialBackoffSeconds", d.pod_initial_backoff_seconds),
        pod_max_backoff_seconds=r.integer("podMaxBackoffSeconds", d.pod_max_backoff_seconds),
        leader_election=_leader_election(r.child("leaderElection")),
        client_connection=_client_connection(r.child("clientConnection")),
        healthz_bind_address=r.string("healthzBindAddress", d.healthz_bind_address),
        enable_profiling=enable_profiling,
        # As upstream: contention profiling defaults on only when profiling is on.
        enable_contention_profiling=r.boolean("enableContentionProfiling", enable_profiling),
        delay_cache_until_active=r.boolean("delayCacheUntilActive", d.delay_cache_until_active),
        profiles=with_ignored_resources(_profiles(r.sequence("profiles"), registry, errors, skip), extenders),
        extenders=extenders,
    )
    r.finish(hints=_TOP_LEVEL_HINTS)
    validation.validate(config, errors, skip_plugin_checks=skip)
    validate_extenders(config.extenders, errors)
    errors.raise_if_any()
    return config


def load_config(source: str | os.PathLike[str], registry: schema.PluginCatalog) -> schema.SchedulerConfig:
    """Load a config from YAML text or from a file.

    ``source`` is a file when it is path-like, or a one-line string that names an existing file or
    ends in ``.yaml``/``.yml``/``.json`` (so a missing file is reported as such); any other string
    is the YAML text itself.

    Raises:
        ConfigError: with every problem found, each with its field path.
    """
    if isinstance(source, os.PathLike) or _looks_like_path(source):
        return load_config_file(source, registry)
    return from_dict(parse_yaml(source), registry)


def _looks_like_path(text: str) -> bool:
    if "\n" in text or not text.strip():
        return False
    if text.endswith((".yaml", ".yml", ".json")):
        return True
    try:
        return Path(text).is_file()
    except (OSError, ValueError):  # e.g. a long one-line YAML document: ENAMETOOLONG
        return False


def load_config_file(path: str | os.PathLike[str], registry: schema.PluginCatalog) -> schema.SchedulerConfig:
    """Load a config file. Raises ConfigError (also when the file cannot be read)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ConfigError(f"cannot read config file {os.fspath(path)}: {reason}") from e
    return from_dict(parse_yaml(text, source_name=os.fspath(path)), registry)
