"""``DynamicResourcesArgs`` (kubescheduler.config.k8s.io/v1): reading, defaults and validation.

Apart from :mod:`custom_scheduler.plugins.dynamic_resources` to keep that module to its size;
upstream's defaults and ``ValidateDynamicResourcesArgs`` with every feature gate at its 1.37
default (both fields allowed).

- ``filterTimeout`` (default ``10s``; ``0s`` disables the bound; negative is refused): how long
  Filter may search for one node's devices.
- ``bindingTimeout`` (default ``10m0s``; at least ``1s``): how long PreBind waits for devices'
  binding conditions (:mod:`custom_scheduler.plugins.dra_binding`), and how old an allocation
  whose binding conditions are not met may be before Filter counts its claim as unavailable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from custom_scheduler.config import durations
from custom_scheduler.plugins import args_reader

#: Upstream's ``DynamicResourcesFilterTimeoutDefault`` and ``DynamicResourcesBindingTimeoutDefault``.
DEFAULT_FILTER_TIMEOUT = 10.0
DEFAULT_BINDING_TIMEOUT = 600.0
#: ``ValidateDynamicResourcesArgs``: bindingTimeout must be at least this.
MIN_BINDING_TIMEOUT = 1.0
ARGS_KIND = "DynamicResourcesArgs"


@dataclass(frozen=True, slots=True)
class DynamicResourcesArgs:
    """``DynamicResourcesArgs`` (kubescheduler.config.k8s.io/v1), in seconds."""

    filter_timeout: float = DEFAULT_FILTER_TIMEOUT
    """Longest search for one node's devices in Filter; 0 means no bound."""
    binding_timeout: float = DEFAULT_BINDING_TIMEOUT
    """How long PreBind waits for devices' binding conditions."""

    def to_config(self) -> dict[str, Any]:
        return {
            "filterTimeout": durations.format_duration(self.filter_timeout),
            "bindingTimeout": durations.format_duration(self.binding_timeout),
        }


def _json_type(value: object) -> str:
    """The JSON type name Go's decoder puts in "cannot unmarshal <type> into ..."."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, Mapping):
        return "object"
    return "array" if isinstance(value, list | tuple) else type(value).__name__


def _duration(r: args_reader.ArgsReader, doc: Mapping[str, Any], key: str, path: str, default: float) -> float:
    """A ``metav1.Duration`` field: a Go duration string, with the decoder's messages."""
    raw = doc.get(key)
    if raw is None:
        return default
    if not isinstance(raw, str):
        r.error(
            f"{path}.{key}",
            f"json: cannot unmarshal {_json_type(raw)} into Go struct field {ARGS_KIND}.{key} of type string",
        )
        return default
    try:
        return durations.parse_duration(raw)
    except ValueError:
        r.error(f"{path}.{key}", f'time: invalid duration "{raw}"')
        return default


def parse_args(raw: Mapping[str, Any] | None, path: str) -> DynamicResourcesArgs:
    """Read, default and validate ``DynamicResourcesArgs`` (upstream's ``SetDefaults_`` and
    ``ValidateDynamicResourcesArgs``, every gate at its default: both fields allowed); raises
    ConfigError with every bad field."""
    r = args_reader.ArgsReader(path)
    doc = r.mapping(raw, path, fields=("filterTimeout", "bindingTimeout"), kind=ARGS_KIND)
    filter_timeout = _duration(r, doc, "filterTimeout", path, DEFAULT_FILTER_TIMEOUT)
    binding_timeout = _duration(r, doc, "bindingTimeout", path, DEFAULT_BINDING_TIMEOUT)
    if filter_timeout < 0:
        shown = durations.format_duration(filter_timeout)
        r.error(f"{path}.filterTimeout", f'Invalid value: "{shown}": must be zero or positive')
    if binding_timeout < MIN_BINDING_TIMEOUT:
        shown = durations.format_duration(binding_timeout)
        r.error(f"{path}.bindingTimeout", f'Invalid value: "{shown}": must be at least 1 second')
    r.raise_errors()
    return DynamicResourcesArgs(filter_timeout, binding_timeout)
