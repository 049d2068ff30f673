"""``extenders:`` in the config: decoding with defaults, kube-scheduler's validation, and the
resources left to extenders (``ignoredByScheduler``) reaching NodeResourcesFit's args."""

from __future__ import annotations

import base64
from collections.abc import Callable

import pytest

from custom_scheduler.config import SchedulerConfig, load_config
from custom_scheduler.config.render import to_dict
from custom_scheduler.config.schema import Extender, ExtenderTLS, ManagedResource
from custom_scheduler.errors import ConfigError
from custom_scheduler.plugins.builtin import full_registry
from tests.unit.config.conftest import HEADER

Load = Callable[[str], SchedulerConfig]

PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def _full() -> SchedulerConfig:
    b64 = base64.b64encode(PEM).decode()
    return load_config(
        HEADER
        + f"""
extenders:
- urlPrefix: https://ext.example:8443/scheduler
  filterVerb: filter
  preemptVerb: preempt
  prioritizeVerb: prioritize
  weight: 5
  bindVerb: bind
  enableHTTPS: true
  tlsConfig: {{insecure: false, serverName: ext, certFile: /c, keyFile: /k, caFile: /ca, caData: {b64}}}
  httpTimeout: 1500ms
  nodeCacheCapable: true
  managedResources: [{{name: example.com/gpu, ignoredByScheduler: true}}, {{name: example.com/fpga}}]
  ignorable: true
""",
        full_registry(),
    )


def test_every_field_decoded() -> None:
    cfg = _full()
    assert cfg.extenders == (
        Extender(
            url_prefix="https://ext.example:8443/scheduler",
            filter_verb="filter",
            preempt_verb="preempt",
            prioritize_verb="prioritize",
            weight=5,
            bind_verb="bind",
            enable_https=True,
            tls_config=ExtenderTLS(server_name="ext", cert_file="/c", key_file="/k", ca_file="/ca", ca_data=PEM),
            http_timeout=1.5,
            node_cache_capable=True,
            managed_resources=(ManagedResource("example.com/gpu", True), ManagedResource("example.com/fpga")),
            ignorable=True,
        ),
    )


@pytest.mark.parametrize(
    ("timeout", "want"),
    [
        pytest.param("", 5.0, id="unset"),
        pytest.param("httpTimeout: 0s", 5.0, id="zero"),
        pytest.param("httpTimeout: 30s", 30.0, id="set"),
    ],
)
def test_http_timeout_defaults_to_five_seconds(load: Load, timeout: str, want: float) -> None:
    cfg = load(f"extenders:\n- urlPrefix: http://e\n  {timeout}\n")
    assert cfg.extenders[0].http_timeout == want


CASES = [
    pytest.param(
        "- {urlPrefix: 'http://e', prioritizeVerb: p}",
        {"extenders[0].weight": "Invalid value: 0: must have a positive weight applied to it"},
        id="weight",
    ),
    pytest.param(
        "- {urlPrefix: 'http://a', bindVerb: b}\n- {urlPrefix: 'http://b', bindVerb: b}",
        {"extenders": 'Invalid value: "found 2 extenders implementing bind": only one extender can implement bind'},
        id="two-binders",
    ),
    pytest.param(
        "- {urlPrefix: 'http://a', managedResources: [{name: example.com/x}]}\n"
        "- {urlPrefix: 'http://b', managedResources: [{name: example.com/x}]}",
        {"extenders[1].managedResources[0].name": 'Invalid value: "example.com/x": duplicate extender'},
        id="duplicate-resource",
    ),
    pytest.param(
        "- {urlPrefix: 'http://a', managedResources: [{name: cpu}]}",
        {"extenders[0].managedResources[0].name": 'Invalid value: "cpu": is an invalid extended resource name'},
        id="native-resource",
    ),
    pytest.param(
        "- {urlPrefix: 'http://a', managedResources: [{name: 'example.com/-bad'}]}",
        {"extenders[0].managedResources[0].name": 'Invalid value: "example.com/-bad": name part must consist of'},
        id="bad-name",
    ),
    pytest.param("- {filterVerb: f}", {"extenders[0].urlPrefix": "must be an http:// or https:// URL"}, id="no-url"),
    pytest.param("- {urlPrefix: 'ftp://e'}", {"extenders[0].urlPrefix": "must be an http"}, id="scheme"),
    pytest.param(
        "- {urlPrefix: 'http://e', httpTimeout: 5}",
        {"extenders[0].httpTimeout": "expected a duration string"},
        id="timeout-type",
    ),
    pytest.param(
        "- {urlPrefix: 'http://e', httpTimeout: -1s}",
        {"extenders[0].httpTimeout": "must not be negative"},
        id="negative",
    ),
    pytest.param(
        "- {urlPrefix: 'http://e', tlsConfig: {caData: '%%%'}}",
        {"extenders[0].tlsConfig.caData": "expected base64-encoded PEM data"},
        id="ca-data",
    ),
    pytest.param(
        "- {urlPrefix: 'http://e', filterverb: f}",
        {"extenders[0].filterverb": 'unknown field "filterverb"'},
        id="unknown",
    ),
    pytest.param(
        "- {urlPrefix: 'http://e', weight: high}", {"extenders[0].weight": "expected an integer"}, id="weight-type"
    ),
]


@pytest.mark.parametrize(("items", "want"), CASES)
def test_invalid_extenders(load: Load, items: str, want: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as info:
        load("extenders:\n" + items + "\n")
    got = {e.path: e.message for e in info.value.errors}
    assert set(got) == set(want), got
    for path, message in want.items():
        assert got[path].startswith(message), got[path]


def test_ignored_by_scheduler_resources_replace_node_resources_fit_ignored_resources() -> None:
    cfg = load_config(
        HEADER
        + """
extenders:
- urlPrefix: http://e
  managedResources: [{name: example.com/gpu, ignoredByScheduler: true}, {name: example.com/fpga}]
profiles:
- schedulerName: a
  pluginConfig:
  - {name: NodeResourcesFit, args: {ignoredResources: [example.com/other]}}
- schedulerName: b
""",
        full_registry(),
    )
    for prof in cfg.profiles:
        assert prof.plugin_args["NodeResourcesFit"].ignored_resources == ("example.com/gpu",)


def test_without_ignored_resources_the_args_stay() -> None:
    cfg = load_config(
        HEADER
        + """
extenders: [{urlPrefix: 'http://e', managedResources: [{name: example.com/gpu}]}]
profiles:
- pluginConfig: [{name: NodeResourcesFit, args: {ignoredResources: [example.com/other]}}]
""",
        full_registry(),
    )
    assert cfg.profiles[0].plugin_args["NodeResourcesFit"].ignored_resources == ("example.com/other",)


def test_rendered_as_v1_with_key_material_redacted() -> None:
    """``check-config`` and ``/configz`` show the extenders in v1's field names; PEM data is never
    printed, only that it is set."""
    [ext] = to_dict(_full())["extenders"]
    assert ext == {
        "urlPrefix": "https://ext.example:8443/scheduler",
        "filterVerb": "filter",
        "preemptVerb": "preempt",
        "prioritizeVerb": "prioritize",
        "weight": 5,
        "bindVerb": "bind",
        "enableHTTPS": True,
        "tlsConfig": {
            "insecure": False,
            "serverName": "ext",
            "certFile": "/c",
            "keyFile": "/k",
            "caFile": "/ca",
            "caData": "<redacted>",
        },
        "httpTimeout": "1.5s",
        "nodeCacheCapable": True,
        "managedResources": [
            {"name": "example.com/gpu", "ignoredByScheduler": True},
            {"name": "example.com/fpga", "ignoredByScheduler": False},
        ],
        "ignorable": True,
    }
    assert to_dict(load_config(HEADER, full_registry()))["extenders"] == []
