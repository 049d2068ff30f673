"""The scenarios custom-scheduler exists for, end to end on the real API server, with the example
configs and manifests under ``examples/`` (so the examples are known to work):

- GPU nodes (examples/gpu): GPU pods only on GPU nodes and packed; ordinary pods never on GPU nodes
  while another node fits, and a clear FailedScheduling reason once only GPU nodes are left.
- Dedicated pools (examples/pools): members only on pool nodes, non-members never there.
- Load-aware placement (examples/load-aware): the daemon reads NodeMetrics through
  :class:`~custom_scheduler.framework.loadmetrics.MetricsServerSource` from a loopback server that speaks
  ``metrics.k8s.io/v1beta1`` (the real aggregation layer would need front-proxy certificates) and
  steers a burst away from the busy node.
- Priority (examples/priority): an online pod preempts batch pods.

Node names get a unique suffix; PriorityClasses and extra namespaces are created per test.
"""

from __future__ import annotations

import contextlib
import copy
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_scheduler import config
from custom_scheduler.devenv import cluster, kwok
from custom_scheduler.framework import loadmetrics
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient, pod_path
from custom_scheduler.plugins import accelerators, load_aware
from custom_scheduler.plugins.builtin import full_registry
from tests.builders import make_node, make_pod
from tests.integration.env import Env
from tests.unit.framework.test_loadmetrics import FakeMetricsServer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

Json = dict[str, Any]


def example_config(name: str, mutate: Callable[[Json], None] | None = None) -> str:
    """``examples/<name>/config.yaml`` without leader election (one in-process replica)."""
    doc = yaml.safe_load((EXAMPLES / name / "config.yaml").read_text())
    doc["leaderElection"] = {"leaderElect": False}
    if mutate is not None:
        mutate(doc)
    return yaml.safe_dump(doc)


def manifests(name: str, file: str) -> dict[str, Json]:
    """The objects of ``examples/<name>/<file>`` by metadata.name."""
    docs = [d for d in yaml.safe_load_all((EXAMPLES / name / file).read_text()) if d]
    return {d["metadata"]["name"]: d for d in docs}


@pytest.fixture
def example_nodes(kube: KubeClient, kwok_proc: kwok.Kwok) -> Iterator[Callable[[str], dict[str, str]]]:
    """Create the Nodes of ``examples/<name>/nodes.yaml`` (run by the session's kwok: Ready, with
    their taints, names suffixed); returns example name → actual name. Deleted afterwards."""
    created: list[str] = []
    suffix = uuid.uuid4().hex[:6]

    def make(example: str) -> dict[str, str]:
        names: dict[str, str] = {}
        for name, obj in manifests(example, "nodes.yaml").items():
            actual = f"{name}-{suffix}"
            obj["metadata"]["name"] = actual
            obj["metadata"]["labels"]["kubernetes.io/hostname"] = actual
            created.append(actual)
            kwok.create_node(kube, obj)
            names[name] = actual
        return names

    yield make
    for name in created:
        kwok.delete_node(kube, name)


@pytest.fixture
def extra_namespace(kube: KubeClient) -> Iterator[Callable[[dict[str, str] | None], str]]:
    made: list[str] = []

    def make(labels: dict[str, str] | None = None) -> str:
        name = f"t-{uuid.uuid4().hex[:10]}"
        cluster.create_namespace(kube, name, labels)
        made.append(name)
        return name

    yield make
    for name in made:
        with contextlib.suppress(api_errors.KubeError):
            kube.delete(f"/api/v1/namespaces/{name}")


@pytest.fixture
def priority_classes(kube: KubeClient) -> Iterator[Callable[[str], dict[str, str]]]:
    """Create the PriorityClasses of ``examples/<name>/priorityclasses.yaml`` with unique names;
    returns example name → actual name. Deleted afterwards."""
    created: list[str] = []
    suffix = uuid.uuid4().hex[:6]

    def make(example: str) -> dict[str, str]:
        names: dict[str, str] = {}
        for name, obj in manifests(example, "priorityclasses.yaml").items():
            obj["metadata"]["name"] = f"{name}-{suffix}"
            cluster.create_priority_class(kube, obj)
            created.append(obj["metadata"]["name"])
            names[name] = obj["metadata"]["name"]
        return names

    yield make
    for name in created:
        with contextlib.suppress(api_errors.KubeError):
            kube.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")


def wait_bound(env: Env, names: list[str], namespace: str = "") -> dict[str, str]:
    """Wait until the pods ``names`` (of the test's namespace unless another is given) are bound;
    their name -> node."""
    ns = namespace or env.namespace

    def check() -> dict[str, str] | None:
        b = {p["metadata"]["name"]: p["spec"].get("nodeName") or "" for p in cluster.list_pods(env.kube, ns)}
        got = {n: b.get(n, "") for n in names}
        return got if all(got.values()) else None

    result: dict[str, str] = cluster.wait_for(check, timeout=30, what=f"{names} bound")
    return result


def renamed(obj: Json, name: str) -> Json:
    o = copy.deepcopy(obj)
    o["metadata"]["name"] = name
    return o


@pytest.mark.parametrize("example", ["gpu", "pools", "load-aware", "priority"])
def test_example_config_loads_and_round_trips(example: str) -> None:
    """What ``check-config`` does: load with every plugin's validation; the effective config reloads
    to the same value."""
    reg = full_registry()
    cfg = config.load_config_file(str(EXAMPLES / example / "config.yaml"), reg)
    assert config.load_config(config.render_effective(cfg), reg) == cfg
    plugins = set(cfg.profiles[0].plugin_names())
    expected = {"gpu": "AcceleratorIsolation", "pools": "NodePools", "load-aware": "NodeLoad"}
    assert expected.get(example, "PrioritySort") in plugins


# --- GPU -----------------------------------------------------------------------------------------


def test_gpu_pods_packed_on_gpu_nodes_and_ordinary_pods_kept_off(
    env: Env, example_nodes: Callable[[str], dict[str, str]]
) -> None:
    names = example_nodes("gpu")
    gpu_nodes = {names["gpu-a100-1"], names["gpu-a100-2"], names["gpu-t4-1"]}
    a100 = {names["gpu-a100-1"], names["gpu-a100-2"]}
    cpu_nodes = {names["cpu-1"], names["cpu-2"]}
    pods = manifests("gpu", "pods.yaml")
    app = env.start_scheduler(example_config("gpu"))

    # Packed: the second 1-GPU pod goes next to the first rather than to an empty GPU node.
    env.create_pod(pods["train-1"])
    first = env.wait_bound("train-1")["train-1"]
    env.create_pod(pods["train-2"])
    second = env.wait_bound("train-2")["train-2"]
    assert first in gpu_nodes
    assert second == first

    # GPU model / memory: by node affinity (NodeAffinity) and by annotation (AcceleratorIsolation).
    env.create_pod(pods["a100-by-affinity"])
    env.create_pod(pods["a100-by-annotation"])
    got = wait_bound(env, ["a100-by-affinity", "a100-by-annotation"])
    assert set(got.values()) <= a100

    # A burst of ordinary pods, each tolerating every taint: the empty 32-cpu GPU nodes would win
    # on LeastAllocated, but they all land on the two 8-cpu CPU nodes, which fit exactly 16 of them.
    web = pods["web"]
    web["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1", "memory": "1Gi"}
    web_names = [f"web-{i}" for i in range(16)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(env.create_pod, [renamed(web, n) for n in web_names]))
    placed = wait_bound(env, web_names)
    assert set(placed.values()) <= cpu_nodes

    # Only GPU nodes have room left: a clear reason, not a GPU node.
    env.create_pod(renamed(web, "web-overflow"))
    note = env.wait_failed_scheduling("web-overflow")[0]
    assert f"3 {accelerators.ERR_REASON_RESERVED}" in note
    assert "2 Insufficient cpu" in note
    assert env.placements()["web-overflow"] == ""

    # The same pod without the blanket toleration is kept off by the example's taint as well
    # (what keeps other schedulers' pods away).
    plain = renamed(web, "web-no-toleration")
    del plain["spec"]["tolerations"]
    env.create_pod(plain)
    note = env.wait_failed_scheduling("web-no-toleration")[0]
    assert "3 node(s) had untolerated taint(s)" in note
    assert app.cache.check_invariants() == []


# --- pools ---------------------------------------------------------------------------------------


def test_pool_members_only_on_pool_nodes_and_non_members_never_there(
    env: Env,
    example_nodes: Callable[[str], dict[str, str]],
    extra_namespace: Callable[[dict[str, str] | None], str],
    priority_classes: Callable[[str], dict[str, str]],
) -> None:
    names = example_nodes("pools")
    bigdata = {names["bigdata-1"], names["bigdata-2"]}
    online = {names["online-1"]}
    general = {names["general-1"], names["general-2"]}
    analytics = extra_namespace(None)
    shop = extra_namespace({"tier": "online"})
    classes = priority_classes("priority")

    def mutate(doc: Json) -> None:  # the example's "analytics" namespace is this test's namespace
        args = doc["profiles"][0]["pluginConfig"][0]["args"]
        args["pools"][0]["members"]["namespaces"] = [analytics]

    app = env.start_scheduler(example_config("pools", mutate))
    cluster.wait_for(lambda: app.namespaces.get(shop) is not None, timeout=15, what="namespace in the informer")
    pods = manifests("pools", "pods.yaml")
    pods["checkout"]["spec"]["priorityClassName"] = classes["online"]

    for name in ("spark-driver", "big-etl", "checkout"):
        env.create_pod(pods[name])
    in_ns = renamed(pods["web"], "by-namespace")
    in_ns["metadata"]["namespace"] = analytics
    env.kube.post(pod_path(analytics, ""), in_ns)
    by_ns_labels = renamed(pods["web"], "by-namespace-labels")
    env.kube.post(pod_path(shop, ""), by_ns_labels)
    web_names = [f"web-{i}" for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(env.create_pod, [renamed(pods["web"], n) for n in web_names]))

    got = wait_bound(env, ["spark-driver", "big-etl", "checkout", *web_names])
    assert got["spark-driver"] in bigdata  # by label
    assert got["big-etl"] in bigdata  # by size (48Gi >= 32Gi)
    assert got["checkout"] in online  # by priority (the "online" PriorityClass: 100000)
    # Non-members never on pool nodes, although the 64-cpu bigdata nodes are the emptiest.
    assert {got[n] for n in web_names} <= general
    assert wait_bound(env, ["by-namespace"], analytics)["by-namespace"] in bigdata
    assert wait_bound(env, ["by-namespace-labels"], shop)["by-namespace-labels"] in online

    # A member that (by its own affinity) cannot use its pool stays pending; the reasons name the pools.
    stray = renamed(pods["spark-driver"], "spark-elsewhere")
    stray["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "custom-scheduler.io/pool", "operator": "NotIn", "values": ["bigdata"]}
                        ]
                    }
                ]
            }
        }
    }
    env.create_pod(stray)
    note = env.wait_failed_scheduling("spark-elsewhere")[0]
    assert '2 node(s) are outside pool "bigdata" required by the pod' in note
    assert '1 node(s) belong to pool "online" and the pod is not a member' in note
    assert "2 node(s) didn't match Pod's node affinity/selector" in note
    assert app.cache.check_invariants() == []


def test_non_member_reason_names_the_pool(env: Env, example_nodes: Callable[[str], dict[str, str]]) -> None:
    """A non-member that asks for bigdata nodes by affinity: the pool nodes say why they refuse it."""
    example_nodes("pools")
    app = env.start_scheduler(example_config("pools"))
    pod = renamed(manifests("pools", "pods.yaml")["web"], "wants-bigdata")
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "custom-scheduler.io/pool", "operator": "In", "values": ["bigdata"]}]}
                ]
            }
        }
    }
    env.create_pod(pod)
    note = env.wait_failed_scheduling("wants-bigdata")[0]
    assert '2 node(s) belong to pool "bigdata" and the pod is not a member' in note
    assert "3 node(s) didn't match Pod's node affinity/selector" in note
    assert app.cache.check_invariants() == []


# --- load-aware ----------------------------------------------------------------------------------


@pytest.fixture
def metrics_server() -> Iterator[FakeMetricsServer]:
    with FakeMetricsServer(lag=1.0, window="10.5s") as s:
        yield s


@pytest.fixture
def metrics_sources() -> loadmetrics.Sources:
    """The daemon's NodeLoad sources (handed to App, as an embedding program would)."""
    return loadmetrics.Sources()


@pytest.fixture
def installed_source(
    metrics_server: FakeMetricsServer, metrics_sources: loadmetrics.Sources
) -> Iterator[loadmetrics.MetricsServerSource]:
    """The daemon's metrics source, pointed at the loopback server, installed and refreshing."""
    src = loadmetrics.MetricsServerSource(metrics_server.client(), interval=0.3)
    metrics_sources.install(src)
    src.start()
    yield src
    src.stop()
    metrics_sources.uninstall()


def test_load_aware_steers_a_burst_away_from_busy_nodes(
    env: Env,
    example_nodes: Callable[[str], dict[str, str]],
    metrics_server: FakeMetricsServer,
    installed_source: loadmetrics.MetricsServerSource,
    metrics_sources: loadmetrics.Sources,
) -> None:
    names = example_nodes("load-aware")
    busy, warm, idle = names["busy-1"], names["warm-1"], names["idle-1"]
    metrics_server.set(busy, "7200m", "16Gi")  # 90% cpu: above the example's 85% threshold
    metrics_server.set(warm, "4", "16Gi")  # 50%
    metrics_server.set(idle, "0", "0")
    cluster.wait_for(lambda: installed_source.get(idle) is not None, timeout=10, what="first metrics refresh")
    app = env.start_scheduler(example_config("load-aware"), metrics_sources=metrics_sources)
    # The daemon requeues pods a load threshold rejected whenever fresh metrics arrive.
    installed_source.add_listener(lambda: app.queue.move_all_to_active_or_backoff(load_aware.METRICS_REFRESHED))

    template = manifests("load-aware", "pods.yaml")["worker"]["spec"]["template"]
    workers = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**copy.deepcopy(template["metadata"]), "name": f"worker-{i}"},
            "spec": copy.deepcopy(template["spec"]),
        }
        for i in range(8)
    ]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(env.create_pod, workers))
    got = wait_bound(env, [w["metadata"]["name"] for w in workers])
    per_node = {n: sum(1 for v in got.values() if v == n) for n in (busy, warm, idle)}
    # Never the busy node; mostly the idle one; but not all of the burst on it: the pods placed
    # there since the sample count as load, so the warm node takes some once idle looks busier.
    assert per_node[busy] == 0, per_node
    assert per_node[idle] > per_node[warm] >= 1, per_node
    assert per_node[idle] < 8, per_node

    # Every node over the threshold: rejected with a clear reason ...
    for n in (busy, warm, idle):
        metrics_server.set(n, "7800m", "8Gi")
    cluster.wait_for(
        lambda: (u := installed_source.get(idle)) is not None and u.milli_cpu == 7800, timeout=10, what="refresh"
    )
    late = copy.deepcopy(workers[0])
    late["metadata"]["name"] = "late"
    env.create_pod(late)
    note = env.wait_failed_scheduling("late")[0]
    assert "3 node(s) are overloaded: cpu usage above 85%" in note
    # ... and placed as soon as the metrics show room again.
    metrics_server.set(warm, "1", "8Gi")
    assert env.wait_bound("late")["late"] == warm
    assert app.cache.check_invariants() == []


# --- priority ------------------------------------------------------------------------------------


def test_online_pod_preempts_batch_pods(
    env: Env, example_nodes: Callable[[str], dict[str, str]], priority_classes: Callable[[str], dict[str, str]]
) -> None:
    node = example_nodes("priority")["small-1"]
    classes = priority_classes("priority")
    pods = manifests("priority", "pods.yaml")
    for p in pods.values():
        p["spec"]["priorityClassName"] = classes[p["spec"]["priorityClassName"]]
        p["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}  # other tests' nodes stay out
    env.start_scheduler(example_config("priority"))
    batch = [n for n in pods if n.startswith("batch-")]
    for n in batch:
        env.create_pod(pods[n])
    wait_bound(env, batch)

    online = env.create_pod(pods["online-checkout"])
    assert online["spec"]["priority"] == 100000

    def check() -> bool:  # kwok finishes the victims' graceful deletes
        return env.placements().get("online-checkout") == node

    cluster.wait_for(check, timeout=45, interval=0.3, what="online pod bound after preemption")
    batch_left = [n for n in env.placements() if n.startswith("batch-")]
    assert len(batch_left) == 2  # two 1-cpu batch pods made room for the 2-cpu online pod


def test_a_gpu_annotation_its_profile_ignores_gets_a_warning_event(env: Env) -> None:
    """The default profile has no AcceleratorIsolation: a pod asking for a GPU product by
    annotation is scheduled as any pod, and told once that the annotation does nothing here."""
    env.node(make_node("plain").capacity(cpu="4", memory="8Gi", pods="110"))
    env.start_scheduler()
    obj = make_pod("wants-a100").req(cpu="100m").obj()
    obj["metadata"]["annotations"] = {accelerators.ANNOTATION_PRODUCT: "NVIDIA-A100"}
    env.create_pod(obj)
    env.wait_bound("wants-a100")
    events = cluster.wait_for(lambda: env.events("AnnotationIgnored", about="wants-a100"), timeout=15, what="event")
    assert [e["type"] for e in events] == ["Warning"]
    assert events[0]["note"] == (
        f"annotation {accelerators.ANNOTATION_PRODUCT} is ignored: profile custom-scheduler does not enable "
        "AcceleratorIsolation"
    )
