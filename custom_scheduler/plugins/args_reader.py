"""Reading plugin args from raw config mappings, and the Kubernetes name checks they need.

Why not a schema library: each plugin's ``parse_args`` must accept exactly kube-scheduler's camelCase
field names, apply its defaults, and report *every* problem with a field path
(``profiles[0].pluginConfig[1].args.scoringStrategy.resources[1].weight``) so an operator fixes a
bad file in one pass. :class:`ArgsReader` collects :class:`~custom_scheduler.errors.FieldError` values
while reading and raises one :class:`~custom_scheduler.errors.ConfigError` at the end.

Unknown fields are errors (kube-scheduler decodes its config strictly); ``apiVersion`` and ``kind``
are accepted because kube-scheduler configs commonly carry them inside ``args``.

The name checks mirror ``k8s.io/apimachinery/pkg/util/validation``: qualified names (label keys,
resource names), label values and DNS-1123 subdomains, with messages close to upstream's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from custom_scheduler.errors import ConfigError, FieldError

_QUALIFIED_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS1123_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME_MAX = 63
_LABEL_VALUE_MAX = 63
_DNS1123_SUBDOMAIN_MAX = 253
_QUALIFIED_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)


def qualified_name_errors(value: str) -> list[str]:
    """Problems with ``value`` as a qualified name (``[prefix/]name``); empty when valid."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in dns1123_subdomain_errors(prefix))
    else:
        return [
            f"a qualified name {_QUALIFIED_NAME_MSG} with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > _QUALIFIED_NAME_MAX:
        errs.append(f"name part must be no more than {_QUALIFIED_NAME_MAX} characters")
    if not _QUALIFIED_NAME_RE.match(name):
        errs.append(f"name part {_QUALIFIED_NAME_MSG}")
    return errs


def dns1123_subdomain_errors(value: str) -> list[str]:
    return _format_errors(value, _DNS1123_SUBDOMAIN_MAX, _DNS1123_SUBDOMAIN_RE, _DNS1123_SUBDOMAIN_MSG)


def label_value_errors(value: str) -> list[str]:
    """Problems with ``value`` as a label value; empty when valid (the empty string is valid)."""
    return _format_errors(value, _LABEL_VALUE_MAX, _LABEL_VALUE_RE, _LABEL_VALUE_MSG)


def _format_errors(value: str, max_len: int, pattern: re.Pattern[str], message: str) -> list[str]:
    """Upstream's two checks of a name's format: its length, then its characters."""
    errs: list[str] = []
    if len(value) > max_len:
        errs.append(f"must be no more than {max_len} characters")
    if not pattern.match(value):
        errs.append(message)
    return errs


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


class ArgsReader:
    """Typed reads from raw args with error collection. Call :meth:`raise_errors` when done."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.errors: list[FieldError] = []

    def error(self, path: str, message: str) -> None:
        self.errors.append(FieldError(path, message))

    def raise_errors(self) -> None:
        if self.errors:
            raise ConfigError(self.errors)

    def mapping(self, value: object, path: str, *, fields: Sequence[str], kind: str = "") -> Mapping[str, Any]:
        """``value`` as a mapping with only ``fields`` (plus ``apiVersion``/``kind`` when ``kind``)."""
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.error(path, f"must be an object, got {_type_name(value)}")
            return {}
        allowed = set(fields)
        if kind:
            allowed |= {"apiVersion", "kind"}
            got_kind = value.get("kind")
            if got_kind is not None and got_kind != kind:
                self.error(f"{path}.kind", f"must be {kind!r}, got {got_kind!r}")
        for key in value:
            if key not in allowed:
                self.error(f"{path}.{key}", f"unknown field (known fields: {', '.join(fields)})")
        return value

    def integer(self, doc: Mapping[str, Any], key: str, path: str, default: int) -> int:
        value = doc.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(f"{path}.{key}", f"must be an integer, got {_type_name(value)}")
            return default
        return value

    def string(self, doc: Mapping[str, Any], key: str, path: str, default: str = "") -> str:
        value = doc.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            self.error(f"{path}.{key}", f"must be a string, got {_type_name(value)}")
            return default
        return value

    def items(self, doc: Mapping[str, Any], key: str, path: str) -> list[Any]:
        """A list field (absent or null means empty)."""
        value = doc.get(key)
        if value is None:
            return []
        if isinstance(value, str | bytes) or not isinstance(value, Sequence):
            self.error(f"{path}.{key}", f"must be a list, got {_type_name(value)}")
            return []
        return list(value)

    def entries(self, doc: Mapping[str, Any], key: str, path: str, of: str) -> list[tuple[str, Any, str]]:
        """A map field as (name, value, the entry's path) items (absent or null means none);
        ``of`` completes the error ``must be an object of ...`` when the field is not a map."""
        value = doc.get(key)
        if value is None:
            return []
        if not isinstance(value, Mapping):
            self.error(f"{path}.{key}", f"must be an object of {of}")
            return []
        return [(str(name), item, f"{path}.{key}.{name}") for name, item in value.items()]

    def strings(self, doc: Mapping[str, Any], key: str, path: str) -> tuple[str, ...]:
        out: list[str] = []
        for i, item in enumerate(self.items(doc, key, path)):
            if not isinstance(item, str):
                self.error(f"{path}.{key}[{i}]", f"must be a string, got {_type_name(item)}")
            else:
                out.append(item)
        return tuple(out)
