"""The Node and Pod LISTs the command line starts before the daemon is built: the informers take
their answers instead of listing again, and what changed after them arrives through the watch."""

from __future__ import annotations

import time
from pathlib import Path

from custom_scheduler.devenv.controlplane import free_port
from custom_scheduler.kube.client import KubeClient
from custom_scheduler.kube.credentials import Credentials
from custom_scheduler.kube.prefetch import DAEMON_LISTS, Prefetch
from tests.builders import make_node, make_pod
from tests.faultproxy import FaultProxy
from tests.integration.env import Env


def _lists(proxy: FaultProxy, path: str) -> list[str]:
    """The LISTs (not watches) of ``path`` the proxy forwarded."""
    return [p for m, p, _ in proxy.log if m == "GET" and p.split("?")[0] == path and "watch=true" not in p]


def test_informers_take_the_prefetched_lists_and_see_what_changed_after_them(
    env: Env, proxy: FaultProxy, tmp_path: Path
) -> None:
    before = env.node(make_node("before").capacity(cpu="4", memory="8Gi", pods="10"))
    client = KubeClient.from_kubeconfig(proxy.kubeconfig(tmp_path), qps=0, burst=1)
    early = Prefetch(client).start()
    assert all(job.done.wait(30) for job in early._jobs.values())  # both LISTs answered
    after = env.node(make_node("after").capacity(cpu="4", memory="8Gi", pods="10"))  # only in the watch
    app = env.start_scheduler(client=client, prefetched=early)
    assert before in app.nodes.store  # from the prefetched LIST, synced before the start returns
    deadline = time.monotonic() + 30  # the watch delivers "after" in its own time
    while after not in app.nodes.store:
        assert time.monotonic() < deadline, "the node created after the prefetch never reached the store"
        time.sleep(0.05)
    for path, _ in DAEMON_LISTS:
        assert len(_lists(proxy, path)) == 1, f"{path} was listed again: {_lists(proxy, path)}"
    env.create_pod(make_pod("fits").req(cpu="100m").obj())
    env.wait_bound("fits")


def test_a_failed_prefetch_leaves_the_informer_to_list_on_its_own(env: Env, proxy: FaultProxy, tmp_path: Path) -> None:
    node = env.node(make_node("solo").capacity(cpu="4", memory="8Gi", pods="10"))
    nobody = KubeClient(Credentials(host=f"http://127.0.0.1:{free_port()}"), qps=0, burst=1)  # nothing listens
    early = Prefetch(nobody).start()
    assert all(job.done.wait(30) for job in early._jobs.values())
    client = KubeClient.from_kubeconfig(proxy.kubeconfig(tmp_path), qps=0, burst=1)
    app = env.start_scheduler(client=client, prefetched=early)
    assert node in app.nodes.store
    own = _lists(proxy, "/api/v1/nodes")
    assert len(own) == 1  # the informer's own
    assert "resourceVersion=0" in own[0]  # as client-go's first LIST: from the watch cache
