"""PodFinisher's pure rules (when a graceful deletion is due, the final delete's options) and one
sweep against a fake client: the real API server's answer to a stale UID precondition is checked in
tests/integration/test_pod_finisher.py."""

from __future__ import annotations

from typing import Any

import pytest

from custom_scheduler.devenv.pod_finisher import PodFinisher, due_at, final_delete_body
from custom_scheduler.kube import api_errors
from tests.builders import make_pod

NOW = 1_000_000.0
STAMP = "1970-01-12T13:46:50Z"  # NOW + 10 s


def _pre_stop(obj: dict[str, Any], init: bool = False) -> dict[str, Any]:
    key = "initContainers" if init else "containers"
    if init:
        obj["spec"][key] = [{"name": "side", "image": "x", "restartPolicy": "Always"}]
    obj["spec"][key][0]["lifecycle"] = {"preStop": {"exec": {"command": ["sleep", "79"]}}}
    return obj


def _deleting(obj: dict[str, Any], stamp: str = STAMP) -> dict[str, Any]:
    obj["metadata"]["deletionTimestamp"] = stamp
    return obj


@pytest.mark.parametrize(
    ("pod", "due"),
    [
        pytest.param(make_pod("a").node("n1").obj(), None, id="not-terminating"),
        pytest.param(_deleting(make_pod("a").obj()), None, id="unbound-is-the-api-servers"),
        pytest.param(_deleting(make_pod("a").node("n1").obj()), NOW, id="plain-pod-at-once"),
        pytest.param(_deleting(_pre_stop(make_pod("a").node("n1").obj())), NOW + 10, id="prestop-waits-its-grace"),
        pytest.param(
            _deleting(_pre_stop(make_pod("a").node("n1").obj(), init=True)), NOW + 10, id="sidecar-prestop-waits"
        ),
        pytest.param(_deleting(_pre_stop(make_pod("a").node("n1").obj()), "garbage"), NOW, id="bad-stamp-now"),
    ],
)
def test_due_at(pod: dict[str, Any], due: float | None) -> None:
    assert due_at(pod, NOW) == due


def test_final_delete_names_the_instance_by_uid() -> None:
    body = final_delete_body(make_pod("a").uid("u-1").obj())
    assert body["gracePeriodSeconds"] == 0
    assert body["preconditions"] == {"uid": "u-1"}


class _Kube:
    """Lists the given pods; a delete of a pod in ``conflict`` answers 409 as a stale UID does."""

    def __init__(self, pods: list[dict[str, Any]], conflict: set[str]) -> None:
        self.pods, self.conflict = pods, conflict
        self.listed: list[str] = []
        self.deleted: list[tuple[str, Any]] = []

    def get(self, path: str) -> dict[str, Any]:
        self.listed.append(path)
        return {"items": self.pods}

    def delete(self, path: str, body: Any) -> None:
        if path.rsplit("/", 1)[1] in self.conflict:
            raise api_errors.Conflict(409, "Precondition failed: UID in precondition")
        self.deleted.append((path, body["preconditions"]["uid"]))


def test_sweep_finishes_what_is_due_and_leaves_a_renamed_pod() -> None:
    pods = [
        _deleting(make_pod("due", "ns").uid("u-due").node("n1").obj()),
        _deleting(_pre_stop(make_pod("waits", "ns").uid("u-w").node("n1").obj())),
        _deleting(make_pod("reborn", "ns").uid("u-old").node("n1").obj()),
        make_pod("running", "ns").uid("u-r").node("n1").obj(),
    ]
    kube = _Kube(pods, conflict={"reborn"})
    finisher = PodFinisher(kube, namespace="ns", clock=lambda: NOW)  # type: ignore[arg-type]
    assert finisher.sweep() == 1
    assert kube.listed == ["/api/v1/namespaces/ns/pods"]
    assert kube.deleted == [("/api/v1/namespaces/ns/pods/due", "u-due")]
    assert finisher.finished == 1
