"""The upstream kube-scheduler (the release the control plane was built from) as a test oracle.

:class:`KubeScheduler` starts the real binary from ``control_plane.bin_dir`` against the test API
server (:func:`default_profile_yaml`: one profile, upstream's own default plugins), and reads back
what it decided from its own log: the per-plugin weighted scores it logs at verbosity 10 and the
``Successfully bound`` line. It exists because ``bench/run.py`` still writes the 1.20
configuration (``v1beta1``, ``healthzBindAddress``, ``--port``), which 1.37 refuses; this launcher
writes the ``kubescheduler.config.k8s.io/v1`` form and serves nothing (``--secure-port=0``), so it
needs no certificates, ports or authn set-up.

Log lines (klog text format, ``pkg/scheduler/schedule_one.go`` of v1.37)::

    "Plugin scored node for pod" pod="ns/name" plugin="TaintToleration" node="n1" score=300
    "Successfully bound pod to node" pod="ns/name" node="n1" evaluatedNodes=5 feasibleNodes=3

Only the files whose lines are read are raised (``--vmodule``): at ``--v=10`` everywhere the
binary logs every API request and response body, which costs more CPU than the test itself. What
is in kube-scheduler's caches, which tests wait for (:meth:`KubeScheduler.logged`), shows in:

- the informers' handlers (``eventhandlers.go``, verbosity 3), one line per node or pod event::

    "Add event for scheduled pod" pod="ns/name"
    "Delete event for node" node="name"

- the ResourceSlice tracker (``dynamic-resource-allocation/resourceslice/tracker/tracker.go``,
  verbosity 5; DRADeviceTaintRules is GA in 1.37, so every slice goes through it) once a slice is
  in the cache DynamicResources reads, and DynamicResources' allocated-device tracking
  (``allocateddevices.go``, verbosity 6) once an allocated claim's devices count as in use::

    "ResourceSlice synced" resourceslice="name"
    "Observed device allocation" device="driver/pool/device" claim="ns/name"

``CS_KUBE_VMODULE`` replaces the pattern when debugging a difference, e.g.
``schedule_one=10,eventhandlers=5,cache=5`` to see every cache event.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from custom_scheduler.devenv import cluster
from custom_scheduler.devenv.controlplane import ControlPlane

#: The default ``--vmodule``: the files whose lines the tests read (see the module docstring).
VMODULE = "schedule_one=10,eventhandlers=3,tracker=5,allocateddevices=6"

_SCORED = re.compile(
    r'"Plugin scored node for pod" pod="(?P<pod>[^"]+)" plugin="(?P<plugin>[^"]+)" '
    r'node="(?P<node>[^"]+)" score=(?P<score>-?\d+)'
)
_BOUND = re.compile(
    r'"Successfully bound pod to node" pod="(?P<pod>[^"]+)" node="(?P<node>[^"]+)" '
    r"evaluatedNodes=(?P<evaluated>\d+) feasibleNodes=(?P<feasible>\d+)"
)


@dataclass(slots=True)
class Binding:
    """What kube-scheduler logged for one pod it bound."""

    node: str
    evaluated: int
    feasible: int
    #: (plugin, node) -> weighted score (normalised × weight). Empty when only one node was feasible:
    #: kube-scheduler then skips scoring altogether (``schedulePod``: "only one node, just use it").
    scores: dict[tuple[str, str], int] = field(default_factory=dict)

    @property
    def scored_nodes(self) -> set[str]:
        return {node for _, node in self.scores}


def default_profile_yaml(kubeconfig: Path, scheduler_name: str) -> str:
    """A ``KubeSchedulerConfiguration`` with one profile, ``scheduler_name``, running
    kube-scheduler's *own* default plugins: no ``plugins`` section, so the binary's
    ``getDefaultPlugins`` and the feature gates on by default in its release decide (what our
    default profile lacks or places differently then shows as a difference, rather than being
    configured away). Only what a comparison needs is set: every node is scored
    (``percentageOfNodesToScore: 100``, as ours does below 100 nodes) and the client is not
    throttled."""
    lines = [
        "apiVersion: kubescheduler.config.k8s.io/v1",
        "kind: KubeSchedulerConfiguration",
        "leaderElection: {leaderElect: false}",
        f"clientConnection: {{kubeconfig: {kubeconfig}, qps: 1000, burst: 1000}}",
        "percentageOfNodesToScore: 100",
        "profiles:",
        f"- schedulerName: {scheduler_name}",
    ]
    return "".join(f"{line}\n" for line in lines)


class KubeScheduler:
    """The kube-scheduler process; :meth:`binding` waits for and parses one pod's decision."""

    def __init__(self, control_plane: ControlPlane, workdir: Path, config_text: str) -> None:
        self.workdir = workdir
        self.config = workdir / "kube-scheduler.yaml"
        self.config.write_text(config_text)
        self.log_path = workdir / "kube-scheduler.log"
        self.binary = control_plane.bin_dir / "kube-scheduler"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0, kinds: Sequence[str] = ("Node", "Pod")) -> KubeScheduler:
        """Start the binary and wait until its informers of ``kinds`` listed (1.37 logs no "synced"
        line at ``--v=2``; the reflectors' ``Caches populated`` lines are the first sign). The
        handlers fill the cache right after: a test that needs them done waits for their lines
        (:meth:`logged`)."""
        argv = [
            str(self.binary),
            f"--config={self.config}",
            "--secure-port=0",
            "--v=2",
            "--vmodule=" + os.environ.get("CS_KUBE_VMODULE", VMODULE),
            # The batching of 1.35+ reuses a previous pod's result for an "equivalent" pod (a node hint
            # checked with Filter only, no scoring), so a pod could be placed without any score lines.
            "--feature-gates=OpportunisticBatching=false",
        ]
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"kube-scheduler exited {self._proc.returncode}:\n{self.log_tail()}")
            text = self.log_path.read_text(errors="replace")
            if all(f'"Caches populated" type="*v1.{kind}"' in text for kind in kinds):
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"kube-scheduler did not sync its caches within {timeout}s:\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s: only the process this object started."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def log_size(self) -> int:
        """The log's current length: pass it to :meth:`binding` to read only what comes after."""
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def logged(self, lines: Iterable[str], since: int = 0) -> list[str]:
        """Those of ``lines`` (each a substring of one log line) not logged yet after offset
        ``since``: empty once all are there."""
        with self.log_path.open("rb") as f:
            f.seek(since)
            text = f.read().decode(errors="replace")
        return [line for line in lines if line not in text]

    def wait_logged(self, lines: Iterable[str], since: int) -> None:
        """Wait until every one of ``lines`` is in the log after byte ``since`` (its cache caught
        up with what the test created); AssertionError with what is missing and the log's tail."""
        want = list(lines)

        def caught_up() -> bool:
            if not self.alive():
                raise AssertionError(f"kube-scheduler exited:\n{self.log_tail()}")
            return not self.logged(want, since)

        try:
            cluster.wait_for(caught_up, timeout=30, interval=0.05, what="kube-scheduler's cache to catch up")
        except TimeoutError as e:
            raise AssertionError(f"{e}: not logged: {self.logged(want, since)}\n{self.log_tail()}") from None

    def binding(self, pod_key: str, since: int = 0) -> Binding | None:
        """The pod's ``Successfully bound`` line and the score lines of its cycle, or None while the
        bind is not logged yet. The score lines precede the bind line (scoring happens in the
        scheduling cycle, the line is logged after the binding API call), so once the bind line is
        there its scores are complete."""
        with self.log_path.open("rb") as f:
            f.seek(since)
            text = f.read().decode(errors="replace")
        bound: Binding | None = None
        scores: dict[tuple[str, str], int] = {}
        for line in text.splitlines():
            m = _SCORED.search(line)
            if m and m["pod"] == pod_key:
                scores[(m["plugin"], m["node"])] = int(m["score"])
                continue
            m = _BOUND.search(line)
            if m and m["pod"] == pod_key:
                bound = Binding(m["node"], int(m["evaluated"]), int(m["feasible"]))
        if bound is not None:
            bound.scores = scores
        return bound
