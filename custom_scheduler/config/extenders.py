"""``extenders:`` of a KubeSchedulerConfiguration: decoding, validation, and what they change in the
profiles (upstream's ``Extender`` config type, ``validateExtenders`` and ``buildExtenders``).

Decoding is strict like the rest of the file (unknown fields are errors). Validation is
kube-scheduler's, with its ``field.Invalid`` texts: a positive ``weight`` with a
``prioritizeVerb``, at most one extender with a ``bindVerb``, ``managedResources`` names that are
valid extended resource names and unique across all extenders. We also refuse what upstream would
only fail on at the first call: a ``urlPrefix`` that is not an ``http(s)://host`` URL, undecodable
``certData``/``keyData``/``caData`` and a negative ``httpTimeout``.

Resources an extender manages with ``ignoredByScheduler: true`` are left to it: every profile's
``NodeResourcesFit`` args get them as ``ignoredResources`` (replacing any configured there, as
upstream's ``buildExtenders`` does), so the Filter does not reject nodes that lack them.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import re
from typing import Any
from urllib.parse import urlsplit

from custom_scheduler.config import schema
from custom_scheduler.config.decoding import Errors, Reader, index, join

__all__ = ["parse_extenders", "validate_extenders", "with_ignored_resources"]

#: The plugin whose args take the extenders' ignored resources (upstream's ``noderesources.Name``).
NODE_RESOURCES_FIT = "NodeResourcesFit"

_QUALIFIED_NAME = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_DNS1123 = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_QUALIFIED_NAME_RE = re.compile(f"^{_QUALIFIED_NAME}$")
_DNS1123_SUBDOMAIN_RE = re.compile(f"^{_DNS1123}$")
_QUALIFIED_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_DNS1123_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)


def _pem(r: Reader, key: str) -> bytes:
    """A ``[]byte`` field: base64 text in YAML, as in JSON."""
    text = r.string(key, "")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        r.errors.add(r.path_of(key), f"expected base64-encoded PEM data: {e}")
        return b""


def _tls(r: Reader) -> schema.ExtenderTLS:
    tls = schema.ExtenderTLS(
        insecure=r.boolean("insecure", False),
        server_name=r.string("serverName", ""),
        cert_file=r.string("certFile", ""),
        key_file=r.string("keyFile", ""),
        ca_file=r.string("caFile", ""),
        cert_data=_pem(r, "certData"),
        key_data=_pem(r, "keyData"),
        ca_data=_pem(r, "caData"),
    )
    r.finish()
    return tls


def _managed(items: list[Any], path: str, errors: Errors) -> tuple[schema.ManagedResource, ...]:
    out = []
    for j, item in enumerate(items):
        r = Reader(item, index(path, j), errors)
        out.append(schema.ManagedResource(r.string("name", ""), r.boolean("ignoredByScheduler", False)))
        r.finish()
    return tuple(out)


def _extender(item: object, path: str, errors: Errors) -> schema.Extender:
    r = Reader(item, path, errors)
    tls_raw = r.raw("tlsConfig")
    timeout = r.duration("httpTimeout", 0.0)
    ext = schema.Extender(
        url_prefix=r.string("urlPrefix", ""),
        filter_verb=r.string("filterVerb", ""),
        preempt_verb=r.string("preemptVerb", ""),
        prioritize_verb=r.string("prioritizeVerb", ""),
        weight=r.integer("weight", 0),
        bind_verb=r.string("bindVerb", ""),
        enable_https=r.boolean("enableHTTPS", False),
        tls_config=None if tls_raw is None else _tls(Reader(tls_raw, r.path_of("tlsConfig"), errors)),
        # Upstream's NewHTTPExtender: a zero timeout is DefaultExtenderTimeout.
        http_timeout=timeout or schema.DEFAULT_EXTENDER_TIMEOUT,
        node_cache_capable=r.boolean("nodeCacheCapable", False),
        managed_resources=_managed(r.sequence("managedResources"), r.path_of("managedResources"), errors),
        ignorable=r.boolean("ignorable", False),
    )
    if timeout < 0:
        errors.add(r.path_of("httpTimeout"), f"must not be negative, got {r.raw('httpTimeout')}")
    r.finish()
    return ext


def parse_extenders(items: list[Any], errors: Errors) -> tuple[schema.Extender, ...]:
    """Decode the ``extenders`` list, every problem recorded with its path."""
    return tuple(_extender(item, index("extenders", i), errors) for i, item in enumerate(items))


def _qualified_name_errors(value: str) -> list[str]:
    """apimachinery's ``IsQualifiedName``: ``[prefix/]name``."""
    parts = value.split("/")
    if len(parts) > 2:
        return [
            f"a qualified name {_QUALIFIED_NAME_MSG} with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')"
        ]
    errs: list[str] = []
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errs.append("prefix part must be non-empty")
        elif len(prefix) > 253:
            errs.append("prefix part must be no more than 253 characters")
        elif not _DNS1123_SUBDOMAIN_RE.match(prefix):
            errs.append(f"prefix part {_DNS1123_MSG} (e.g. 'example.com', regex used for validation is '{_DNS1123}')")
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if not _QUALIFIED_NAME_RE.match(name):
        errs.append(
            f"name part {_QUALIFIED_NAME_MSG} (e.g. 'MyName', or 'my.name', or '123-abc', "
            f"regex used for validation is '{_QUALIFIED_NAME}')"
        )
    return errs


def _is_extended_resource_name(name: str) -> bool:
    """v1helper's ``IsExtendedResourceName``: prefixed, not in ``kubernetes.io``, not ``requests.``,
    and still a qualified name once prefixed with ``requests.`` (as quota would name it)."""
    native = "/" not in name or "kubernetes.io/" in name
    if native or name.startswith("requests."):
        return False
    return not _qualified_name_errors(f"requests.{name}")


def _resource_name(name: str, path: str, errors: Errors) -> None:
    msgs = _qualified_name_errors(name)
    for msg in msgs:
        errors.add(path, f'Invalid value: "{name}": {msg}')
    if not msgs and not _is_extended_resource_name(name):
        errors.add(path, f'Invalid value: "{name}": is an invalid extended resource name')


def _url(ext: schema.Extender, path: str, errors: Errors) -> None:
    parts = urlsplit(ext.url_prefix)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        errors.add(join(path, "urlPrefix"), f'must be an http:// or https:// URL with a host, got "{ext.url_prefix}"')


def validate_extenders(extenders: tuple[schema.Extender, ...], errors: Errors) -> None:
    """Upstream's ``validateExtenders``, plus the URL check."""
    binders = 0
    managed: set[str] = set()
    for i, ext in enumerate(extenders):
        path = index("extenders", i)
        _url(ext, path, errors)
        if ext.prioritize_verb and ext.weight <= 0:
            errors.add(join(path, "weight"), f"Invalid value: {ext.weight}: must have a positive weight applied to it")
        if ext.bind_verb:
            binders += 1
        for j, res in enumerate(ext.managed_resources):
            res_path = join(index(join(path, "managedResources"), j), "name")
            _resource_name(res.name, res_path, errors)
            if res.name in managed:
                errors.add(res_path, f'Invalid value: "{res.name}": duplicate extender managed resource name')
            managed.add(res.name)
    if binders > 1:
        errors.add(
            "extenders",
            f'Invalid value: "found {binders} extenders implementing bind": only one extender can implement bind',
        )


def with_ignored_resources(
    profiles: tuple[schema.Profile, ...], extenders: tuple[schema.Extender, ...]
) -> tuple[schema.Profile, ...]:
    """Every profile with NodeResourcesFit's ``ignoredResources`` set to the resources extenders
    manage with ``ignoredByScheduler`` (unchanged when there are none). A profile without
    NodeResourcesFit args (the plugin disabled) is left as it is; upstream refuses to start then."""
    ignored = tuple(r.name for e in extenders for r in e.managed_resources if r.ignored_by_scheduler)
    if not ignored:
        return profiles
    out = []
    for prof in profiles:
        args = prof.plugin_args.get(NODE_RESOURCES_FIT)
        if args is None or not dataclasses.is_dataclass(args) or not hasattr(args, "ignored_resources"):
            out.append(prof)
            continue
        new_args = {**prof.plugin_args, NODE_RESOURCES_FIT: dataclasses.replace(args, ignored_resources=ignored)}  # type: ignore[type-var]
        out.append(dataclasses.replace(prof, plugin_args=new_args))
    return tuple(out)
