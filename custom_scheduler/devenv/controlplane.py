"""A real etcd, kube-apiserver and kube-controller-manager on loopback, for tests, the demo and the
benchmarks.

Why it lives in the package: the README's demo and `bench/` need the same local control plane as the
test suite, and none of them may fall back to a mock. The binaries come from `hack/testenv.sh`
(``$KUBEBUILDER_ASSETS``, the cache, or a build from Go modules); this module only runs them.

What it sets up, and why:
- etcd, kube-apiserver and kube-controller-manager on free loopback ports, state under one temporary
  directory that :meth:`ControlPlane.stop` removes; all are stopped by PID, never by name.
- Only the secure port, ``--authorization-mode=RBAC`` and a static token file. The admin token maps to
  a user in ``system:masters``; :data:`EXTRA_IDENTITIES` adds identities that tests can use to prove
  RBAC (the scheduler's ServiceAccount user among them).
- The APIs current clusters send a scheduler: ``resource.k8s.io/v1`` (DRA, on by default since 1.34)
  and, from 1.37, the PodGroup API ``scheduling.k8s.io/v1beta1`` behind the ``GenericWorkload`` gate.
- The controllers whose objects reach a scheduler (:data:`CONTROLLERS`): workloads create the pods,
  the namespace and garbage collectors clean up, the PV binder and the resourceclaim controller
  complete what VolumeBinding and DRA start. Node-lifecycle only on request (``node_lifecycle``,
  below). Not the ServiceAccount controller: the ``ServiceAccount``
  admission plugin is disabled instead, so a pod can be created the instant its namespace exists.
- ``service_accounts=True`` (off by default; Kubernetes' e2e suite, :mod:`~custom_scheduler.devenv.e2e`,
  needs it) turns that plugin back on and gives kube-controller-manager the API server's CA
  (``--root-ca-file``), so the ServiceAccount and root-CA publisher controllers, when the caller
  names them in ``controllers``, provide what a real cluster's namespaces have: the ``default``
  ServiceAccount and the ``kube-root-ca.crt`` ConfigMap.
- ``node_lifecycle=True`` (off by default) adds :data:`NODE_LIFECYCLE_CONTROLLERS`: Nodes whose
  heartbeat stops become ``Ready=Unknown``, NotReady or unreachable Nodes are tainted
  (``node.kubernetes.io/not-ready`` / ``unreachable``, NoSchedule and NoExecute) and their pods are
  evicted once their tolerations run out (taint-based eviction, its own controller since 1.29). Only
  a cluster whose Nodes heartbeat wants that: the test session's, whose Nodes kwok runs. The demo
  and the benchmarks make Nodes by hand (Ready once, no Lease); with it on they would turn
  unreachable after :data:`NODE_MONITOR_GRACE` and refuse every pod (the session keeps that grace
  long for its own hand-made Nodes).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import orjson

ADMIN_TOKEN_USER = "admin"

#: kube-controller-manager's controllers that run (everything a scheduler's pods come from or wait on).
CONTROLLERS: tuple[str, ...] = (
    "deployment-controller",
    "replicaset-controller",
    "statefulset-controller",
    "job-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "disruption-controller",
    "persistentvolume-binder-controller",
    "persistentvolumeclaim-protection-controller",
    "persistentvolume-protection-controller",
    "ephemeral-volume-controller",
    "resourceclaim-controller",
)

#: The controllers ``node_lifecycle=True`` adds: node health (conditions, taints) and the eviction
#: of pods from tainted Nodes (kube-controller-manager's names for them in 1.29+).
NODE_LIFECYCLE_CONTROLLERS: tuple[str, ...] = ("node-lifecycle-controller", "taint-eviction-controller")

#: How long a Node may go without a heartbeat (Lease renewal or status update) before it is
#: ``Ready=Unknown`` and tainted unreachable, and the same for a new Node. Longer than
#: kube-controller-manager's defaults (50 s, 60 s) on purpose: the test session also holds Nodes
#: made by hand (tests that write their pods' status themselves, the demo's), which never
#: heartbeat and must stay schedulable for as long as a test may run on a loaded machine. A node
#: that reports NotReady (``kwok.make_not_ready``) is tainted at the next monitor period whatever
#: the grace; only a silent kubelet takes this long to notice.
NODE_MONITOR_GRACE = "10m"
NODE_STARTUP_GRACE = "10m"
#: How often the controller looks (default 5 s): shorter, so a test sees a NotReady Node tainted
#: within a couple of seconds; a handful of Nodes makes that cheap.
NODE_MONITOR_PERIOD = "2s"

#: Identities (token user → groups) that tests may use, besides the admin.
EXTRA_IDENTITIES: dict[str, tuple[str, ...]] = {
    "system:serviceaccount:kube-system:custom-scheduler": (
        "system:serviceaccounts",
        "system:serviceaccounts:kube-system",
        "system:authenticated",
    ),
    "nobody": ("system:authenticated",),
}

REPO_ROOT = Path(__file__).resolve().parents[2]


class ControlPlaneError(RuntimeError):
    """The control plane could not be provisioned or did not become ready."""


_LISTEN_PORTS = (20000, 32000)
"""Where :func:`free_port` picks from: below Linux's ephemeral range (32768-60999 by default)."""
_handed_out: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now, outside the ephemeral range.

    Why not ``bind(0)``: the kernel hands out a port from the ephemeral range, and between our
    closing it and the server binding it any outgoing connection (there are thousands in a test
    session) may take it as its local port: kube-apiserver then fails with "address already in
    use" (seen in CI). A port below the ephemeral range is never chosen for an outgoing
    connection; it is drawn at random (several processes pick at once) and checked by binding.
    """
    low, high = _LISTEN_PORTS
    eph_low, eph_high = _ephemeral_range()
    candidates = [p for p in range(low, high) if not eph_low <= p <= eph_high and p not in _handed_out]
    for port in random.sample(candidates, min(200, len(candidates))):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # a crowded machine: the kernel's pick
        s.bind(("127.0.0.1", 0))
        chosen: int = s.getsockname()[1]
        return chosen


DEFAULT_NEED = "etcd kube-apiserver kube-controller-manager"


@contextlib.contextmanager
def signals_as_exit(signals: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGHUP)) -> Iterator[None]:
    """Turn ``signals`` into :class:`SystemExit` (128 + the signal's number) while the block runs.

    Why: the control plane's processes run in sessions of their own (so a Ctrl-C meant for a test
    runner does not reach them), which also means nothing stops them when their owner dies. Python's
    default SIGTERM kills the owner without running its ``finally`` blocks, so ``demo --keep`` then
    SIGTERM used to leave etcd, kube-apiserver and kube-controller-manager running. As an exception
    the signal unwinds the stack, and each ``finally`` stops what it started, by PID. Only the main
    thread can install handlers; elsewhere the block runs unchanged.
    """

    def exit_on(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, exit_on) for s in signals}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def find_binaries(need: str = DEFAULT_NEED) -> Path:
    """Locate (or provision) the control-plane binaries through ``hack/testenv.sh``."""
    script = REPO_ROOT / "hack" / "testenv.sh"
    if not script.exists():
        assets = os.environ.get("KUBEBUILDER_ASSETS")
        if assets:
            return Path(assets)
        raise ControlPlaneError(f"{script} is missing and KUBEBUILDER_ASSETS is not set")
    proc = subprocess.run(  # noqa: PLW1510 - the return code is checked just below
        ["bash", str(script), "--need", need], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise ControlPlaneError(f"hack/testenv.sh failed:\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


@dataclass
class ControlPlane:
    """etcd, kube-apiserver and (unless :attr:`running_controllers` is empty) kube-controller-manager,
    started by :meth:`start` and stopped by :meth:`stop`."""

    bin_dir: Path
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="cs-controlplane-")))
    controllers: tuple[str, ...] = CONTROLLERS
    service_accounts: bool = False
    node_lifecycle: bool = False
    etcd_port: int = 0
    port: int = 0
    kcm_port: int = 0
    tokens: dict[str, str] = field(default_factory=dict)
    version: str = ""
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    # -- addresses and credentials -------------------------------------------------------------
    @property
    def host(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        return self.workdir / "certs" / "apiserver.crt"

    @property
    def admin_token(self) -> str:
        return self.tokens[ADMIN_TOKEN_USER]

    def kubeconfig(self, user: str = ADMIN_TOKEN_USER) -> Path:
        """Write (once) and return a kubeconfig for ``user``'s token."""
        safe = user.replace(":", "_")
        path = self.workdir / f"kubeconfig-{safe}.yaml"
        if not path.exists():
            doc = {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "local", "cluster": {"server": self.host, "certificate-authority": str(self.ca_file)}}
                ],
                "users": [{"name": safe, "user": {"token": self.tokens[user]}}],
                "contexts": [{"name": "local", "context": {"cluster": "local", "user": safe}}],
                "current-context": "local",
            }
            path.write_bytes(orjson.dumps(doc))  # JSON is valid YAML
        return path

    @property
    def minor_version(self) -> int:
        """The server's minor version (37 for 1.37), so tests can skip where a field is unknown."""
        return _minor(self.version)

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self, timeout: float = 90.0) -> ControlPlane:
        """Start etcd, kube-apiserver and (if asked) kube-controller-manager; wait until ready.

        A port taken between :func:`free_port`'s check and the server's bind (another process on
        the machine picked the same one) costs one more attempt on fresh ports, not a failure.
        """
        for attempt in range(3):
            try:
                self._start(timeout)
                return self
            except ControlPlaneError as exc:
                self.stop()
                if "address already in use" not in str(exc) or attempt == 2:
                    raise
            except BaseException:
                self.stop()
                raise
        return self

    def _start(self, timeout: float) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.version = self._binary_version()
        self.etcd_port, peer_port, self.port, self.kcm_port = free_port(), free_port(), free_port(), free_port()
        self._write_tokens()
        self._generate_sa_keys()
        etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        self._spawn(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                "--name=default",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
                "--log-level=warn",
            ],
        )
        self._wait_for(lambda: self._http_ok(f"{etcd_url}/health"), timeout, "etcd /health")
        self._spawn("kube-apiserver", self._apiserver_args(etcd_url))
        self._wait_for(lambda: self._http_ok(f"{self.host}/readyz"), timeout, "kube-apiserver /readyz")
        info = orjson.loads(self._get(f"{self.host}/version"))
        self.version = str(info.get("gitVersion", "")).lstrip("v") or self.version
        if self.running_controllers:
            self._spawn("kube-controller-manager", self._controller_manager_args())
            self._wait_for(self._controller_manager_ok, timeout, "kube-controller-manager /healthz")

    def _binary_version(self) -> str:
        """``kube-apiserver --version`` ("Kubernetes v1.37.2"): the flags below depend on it."""
        proc = subprocess.run(
            [str(self.bin_dir / "kube-apiserver"), "--version"], capture_output=True, text=True, check=False
        )
        words = proc.stdout.split()
        if proc.returncode != 0 or not words:
            raise ControlPlaneError(f"{self.bin_dir / 'kube-apiserver'} --version failed: {proc.stderr[-2000:]}")
        return words[-1].lstrip("v")

    @property
    def feature_gates(self) -> str:
        """The gates the API server runs with ("" for none), for a scheduler that must see the same
        APIs (kube-scheduler adds GangScheduling to its defaults only with ``GenericWorkload``)."""
        return self._feature_gates()

    def _feature_gates(self) -> str:
        """Gates the coming work needs, only where the release has them (an unknown gate is fatal)."""
        gates = []
        if self.minor_version >= 35:
            gates.append("GenericWorkload=true")
        if self.minor_version >= 36:
            # Alpha: PodGroup.spec.schedulingConstraints.topology (a gang kept in one domain).
            gates.append("TopologyAwareWorkloadScheduling=true")
        return ",".join(gates)

    def _apiserver_args(self, etcd_url: str) -> list[str]:
        w = self.workdir
        extra = []
        if gates := self._feature_gates():
            extra.append(f"--feature-gates={gates}")
        if self.minor_version >= 37:
            extra.append("--runtime-config=scheduling.k8s.io/v1beta1=true")
        elif self.minor_version >= 35:
            extra.append("--runtime-config=scheduling.k8s.io/v1alpha1=true")
        return [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # 1.31+ refuses a loopback advertise address for the kubernetes Service endpoints;
            # nothing here reaches the API server through that Service.
            "--endpoint-reconciler-type=none",
            f"--secure-port={self.port}",
            f"--cert-dir={w / 'certs'}",
            f"--token-auth-file={w / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            *(() if self.service_accounts else ("--disable-admission-plugins=ServiceAccount",)),
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={w / 'sa.pub'}",
            f"--service-account-signing-key-file={w / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            "--event-ttl=1h",
            # Loopback tests and benchmarks create thousands of objects a second from one client.
            "--max-requests-inflight=2000",
            "--max-mutating-requests-inflight=1000",
            *extra,
            "--v=0",
        ]

    @property
    def running_controllers(self) -> tuple[str, ...]:
        """``controllers``, plus :data:`NODE_LIFECYCLE_CONTROLLERS` with ``node_lifecycle``."""
        extra = tuple(c for c in NODE_LIFECYCLE_CONTROLLERS if self.node_lifecycle and c not in self.controllers)
        return (*self.controllers, *extra)

    def _controller_manager_args(self) -> list[str]:
        w = self.workdir
        extra = [f"--feature-gates={gates}"] if (gates := self._feature_gates()) else []
        if self.service_accounts:
            extra.append(f"--root-ca-file={self.ca_file}")
        if self.node_lifecycle:
            extra += [
                f"--node-monitor-grace-period={NODE_MONITOR_GRACE}",
                f"--node-startup-grace-period={NODE_STARTUP_GRACE}",
                f"--node-monitor-period={NODE_MONITOR_PERIOD}",
            ]
        return [
            str(self.bin_dir / "kube-controller-manager"),
            f"--kubeconfig={self.kubeconfig()}",
            f"--authentication-kubeconfig={self.kubeconfig()}",
            f"--authorization-kubeconfig={self.kubeconfig()}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.kcm_port}",
            f"--cert-dir={w / 'kcm-certs'}",
            f"--controllers={','.join(self.running_controllers)}",
            "--leader-elect=false",
            "--use-service-account-credentials=false",
            f"--service-account-private-key-file={w / 'sa.key'}",
            # Controllers react at once; the defaults (20 QPS) would make a 1000-pod Deployment
            # take a minute to appear, and the benchmarks measure the scheduler, not the client.
            "--kube-api-qps=1000",
            "--kube-api-burst=2000",
            "--concurrent-deployment-syncs=10",
            "--concurrent-replicaset-syncs=10",
            "--concurrent-statefulset-syncs=10",
            "--concurrent-job-syncs=10",
            "--concurrent-gc-syncs=20",
            *extra,
            "--v=0",
        ]

    def _controller_manager_ok(self) -> bool:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # its serving certificate is self-signed at start-up
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{self.kcm_port}/healthz", timeout=5, context=ctx) as r:
                return bool(r.status == 200)
        except (OSError, urllib.error.URLError, ssl.SSLError):
            return False

    def stop(self) -> None:
        """Stop the controller-manager, the API server, then etcd (by PID), then remove the working
        directory."""
        for name in ("kube-controller-manager", "kube-apiserver", "etcd"):
            proc = self._procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                # Graceful enough: nothing here outlives the control plane, so don't wait long
                # for kube-apiserver to drain long-running watches.
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def restart_apiserver(self, timeout: float = 90.0) -> None:
        """Stop and start kube-apiserver on the same port, keeping etcd (for fault tests)."""
        proc = self._procs.pop("kube-apiserver")
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:  # open watches keep it draining; crash it instead
            proc.kill()
            proc.wait(timeout=10)
        self._spawn("kube-apiserver", self._apiserver_args(f"http://127.0.0.1:{self.etcd_port}"))
        self._wait_for(lambda: self._http_ok(f"{self.host}/readyz"), timeout, "kube-apiserver /readyz")

    def log_tail(self, name: str, n: int = 40) -> str:
        path = self.workdir / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])

    # -- helpers ----------------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str]) -> None:
        log = (self.workdir / f"{name}.log").open("ab")
        self._procs[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )

    def _write_tokens(self) -> None:
        import secrets

        lines = []
        users = {ADMIN_TOKEN_USER: ("system:masters",), **EXTRA_IDENTITIES}
        for i, (user, groups) in enumerate(users.items()):
            token = secrets.token_hex(16)
            self.tokens[user] = token
            group_field = ",".join(groups)
            lines.append(f'{token},{user},uid-{i},"{group_field}"')
        (self.workdir / "tokens.csv").write_text("\n".join(lines) + "\n")

    def _generate_sa_keys(self) -> None:
        key, pub = self.workdir / "sa.key", self.workdir / "sa.pub"
        for argv in (
            ["openssl", "genrsa", "-out", str(key), "2048"],
            ["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(pub)],
        ):
            proc = subprocess.run(argv, capture_output=True, check=False)
            if proc.returncode != 0:
                raise ControlPlaneError(f"{' '.join(argv)} failed: {proc.stderr.decode(errors='replace')}")

    def _ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def _get(self, url: str) -> bytes:
        req = urllib.request.Request(url)
        if url.startswith("https"):
            req.add_header("Authorization", f"Bearer {self.admin_token}")
            with urllib.request.urlopen(req, timeout=5, context=self._ssl_context()) as r:
                body: bytes = r.read()
                return body
        with urllib.request.urlopen(req, timeout=5) as r:
            plain: bytes = r.read()
            return plain

    def _http_ok(self, url: str) -> bool:
        if url.startswith("https") and not self.ca_file.exists():
            return False
        try:
            self._get(url)
        except (OSError, urllib.error.URLError, ssl.SSLError):
            return False
        return True

    def _wait_for(self, check: object, timeout: float, what: str) -> None:
        assert callable(check)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise ControlPlaneError(
                        f"{name} exited with {proc.returncode} while waiting for {what}:\n{self.log_tail(name)}"
                    )
            if check():
                return
            time.sleep(0.1)
        tails = "\n".join(f"--- {n}\n{self.log_tail(n)}" for n in self._procs)
        raise ControlPlaneError(f"timed out after {timeout:.0f}s waiting for {what}\n{tails}")


def _minor(version: str) -> int:
    """1.37.2 → 37; anything unparsable → 0."""
    parts = version.lstrip("v").split(".")
    if len(parts) < 2:
        return 0
    digits = "".join(ch for ch in parts[1] if ch.isdigit())
    return int(digits or 0)
