"""``/configz`` on the health server over real HTTPS: component-base's document
(``{"componentconfig": ...}``, JSON) of the config running *now*, behind the same delegated
authentication and authorization as ``/metrics`` (a fake review API here; the real one in
tests/integration/test_configz.py)."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest

from custom_scheduler.config import SchedulerConfig, load_config, render
from custom_scheduler.plugins.builtin import full_registry
from custom_scheduler.server.delegated_auth import DelegatingAuth
from custom_scheduler.server.health import HealthServer
from custom_scheduler.server.metrics import Metrics
from custom_scheduler.server.serving import ServingCerts
from tests.secure import FakeReviewApi
from tests.secure import get as https_get

#: Allowed /metrics only; allowed /configz only; known but allowed nothing; system:masters.
SCRAPER, CONFIG_READER, NOBODY, MASTER = "scraper", "config-reader", "nobody", "master"
USERS = {SCRAPER: "prometheus", CONFIG_READER: "reader", NOBODY: "nobody"}
HEADER = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"


class Holder:
    """The daemon's ``app.config``: what /configz reads per request."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config


@pytest.fixture
def holder() -> Holder:
    return Holder(load_config(HEADER + "profiles:\n- schedulerName: first\n", full_registry()))


@pytest.fixture
def server(holder: Holder) -> Iterator[HealthServer]:
    api = FakeReviewApi(
        {
            SCRAPER: ("prometheus", ()),
            CONFIG_READER: ("reader", ()),
            NOBODY: ("nobody", ()),
            MASTER: ("admin", ("system:masters",)),
        },
        {("prometheus", "/metrics", "get"), ("reader", "/configz", "get")},
    )
    srv = HealthServer(
        "127.0.0.1:0",
        lambda: True,
        Metrics(process_collectors=False),
        auth=DelegatingAuth(api),
        certs=ServingCerts.self_signed(["127.0.0.1"]),
        configz=lambda: render.configz_json(holder.config),
    ).start()
    yield srv
    srv.stop()


@pytest.mark.parametrize(
    ("token", "configz", "metrics"),
    [
        pytest.param(None, 401, 401, id="anonymous"),
        pytest.param("not-a-token", 401, 401, id="unknown-token"),
        pytest.param(NOBODY, 403, 403, id="authenticated-without-rbac"),
        pytest.param(SCRAPER, 403, 200, id="metrics-reader-is-not-a-config-reader"),
        pytest.param(CONFIG_READER, 200, 403, id="config-reader"),
        pytest.param(MASTER, 200, 200, id="system-masters"),
    ],
)
def test_configz_is_guarded_exactly_like_metrics(
    server: HealthServer, token: str | None, configz: int, metrics: int
) -> None:
    """The same checks, per path: a refusal of /configz is the same answer a refusal of /metrics
    is (its path named in the 403), and being allowed one path says nothing about the other."""
    answers = {path: https_get(f"{server.url}{path}", token=token) for path in ("/configz", "/metrics")}
    assert (answers["/configz"][0], answers["/metrics"][0]) == (configz, metrics)
    if configz == metrics != 200:  # the same refusal, but for the path it names
        assert answers["/configz"][1].replace(b"/configz", b"/metrics") == answers["/metrics"][1]
    for path, (status, body, content_type) in answers.items():
        if status in (401, 403):
            assert content_type == "application/json"
            assert b"componentconfig" not in body
            assert b"scheduler_" not in body
        if status == 401:
            assert orjson.loads(body)["reason"] == "Unauthorized"
        if status == 403:
            user = USERS[str(token)]
            assert orjson.loads(body)["message"].startswith(f'forbidden: User "{user}" cannot get path "{path}"')


def test_configz_serves_the_running_config_and_follows_a_reload(server: HealthServer, holder: Holder) -> None:
    status, body, content_type = https_get(f"{server.url}/configz", token=MASTER)
    assert (status, content_type) == (200, "application/json")
    doc = orjson.loads(body)
    assert doc == render.configz(holder.config)
    cc = doc["componentconfig"]
    assert (cc["kind"], cc["apiVersion"]) == ("KubeSchedulerConfiguration", "kubescheduler.config.k8s.io/v1")
    assert [p["schedulerName"] for p in cc["profiles"]] == ["first"]

    holder.config = load_config(
        HEADER
        + "profiles:\n- schedulerName: second\n  pluginConfig:\n"
        + "  - {name: DynamicResources, args: {filterTimeout: 3s}}\n",
        full_registry(),
    )
    cc = orjson.loads(https_get(f"{server.url}/configz", token=MASTER)[1])["componentconfig"]
    assert [p["schedulerName"] for p in cc["profiles"]] == ["second"]
    [dra] = [c for c in cc["profiles"][0]["pluginConfig"] if c["name"] == "DynamicResources"]
    assert dra["args"]["filterTimeout"] == "3s"


def test_without_a_configz_source_the_path_is_unknown() -> None:
    srv = HealthServer(
        "127.0.0.1:0",
        lambda: True,
        Metrics(process_collectors=False),
        auth=DelegatingAuth(FakeReviewApi({MASTER: ("admin", ("system:masters",))}, set())),
    )
    assert srv.respond("/configz", authorization=f"Bearer {MASTER}")[0] == 404
