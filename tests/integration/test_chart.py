"""chart/custom-scheduler, checked with the real helm and the real API server.

- helm is the pinned release ``hack/helm.sh`` builds from Go modules (a missing Go toolchain fails
  the test, as a missing kubectl does: a machine that cannot check the chart is noticed).
- ``helm lint --strict`` passes, with the defaults and with every optional object on.
- The defaults render what ``manifests/`` holds: the same ClusterRole rules as ``rbac.yaml`` (the
  two are kept in sync by hand; this is the check), the same scheduler configuration as
  ``configmap.yaml`` (and it passes ``custom-scheduler check-config``), the same pod spec.
- ``kubectl apply --dry-run=server`` accepts every rendered object. The CRD kinds (ServiceMonitor,
  PrometheusRule, Certificate) are validated by the same API server against their real schemas:
  the CRDs are taken from the pinned prometheus-operator and cert-manager Go modules (their
  repositories ship the CRD YAML) and installed for this module's tests, then removed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_scheduler import config
from custom_scheduler.devenv.controlplane import REPO_ROOT, ControlPlane
from custom_scheduler.plugins.builtin import full_registry
from tests import kubectl as k

CHART = REPO_ROOT / "chart" / "custom-scheduler"
DEPLOY = REPO_ROOT / "deploy"
#: Go modules (pinned here) whose source holds the CRDs of the kinds the chart may render.
CRD_SOURCES: dict[str, tuple[str, ...]] = {
    "github.com/prometheus-operator/prometheus-operator@v0.85.0": (
        "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",
        "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml",
    ),
    "github.com/cert-manager/cert-manager@v1.21.2": ("deploy/crds/cert-manager.io_certificates.yaml",),
}
CRD_KINDS = {"ServiceMonitor", "PrometheusRule", "Certificate"}


def _all_on(monitoring_namespace: str) -> dict[str, Any]:
    """Values with every optional object rendered (the Prometheus objects in ``monitoring_namespace``)."""
    return {
        "tls": {"certManager": {"enabled": True, "issuerRef": {"name": "cluster-ca"}}},
        "networkPolicy": {"enabled": True, "apiServer": {"cidrs": ["10.0.0.1/32"]}, "dns": True},
        "serviceMonitor": {
            "enabled": True,
            "prometheus": {"serviceAccount": "prometheus", "namespace": monitoring_namespace},
        },
        "prometheusRule": {"enabled": True, "namespace": monitoring_namespace},
        "grafanaDashboard": {"enabled": True, "namespace": monitoring_namespace},
    }


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """argv prefix of the pinned helm, with its config, cache and data in a temporary directory."""
    proc = subprocess.run(
        ["bash", str(REPO_ROOT / "hack" / "helm.sh")], capture_output=True, text=True, timeout=3600, check=False
    )
    assert proc.returncode == 0, f"hack/helm.sh failed:\n{proc.stderr[-3000:]}"
    home = tmp_path_factory.mktemp("helm-home")
    with pytest.MonkeyPatch.context() as mp:
        for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
            mp.setenv(var, str(home / var.lower()))
        yield [str(Path(proc.stdout.strip()) / "helm")]


def _run(argv: list[str], *, check: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, cwd=cwd)
    if check:
        assert proc.returncode == 0, f"{' '.join(argv)}:\n{proc.stderr}\n{proc.stdout}"
    return proc


def _values_args(tmp: Path, values: dict[str, Any] | None) -> list[str]:
    if not values:
        return []
    path = tmp / f"values-{len(list(tmp.glob('values-*')))}.yaml"
    path.write_text(yaml.safe_dump(values))
    return ["--values", str(path)]


def render(helm: list[str], tmp: Path, values: dict[str, Any] | None = None, **kw: str) -> list[dict[str, Any]]:
    """``helm template`` the chart (release custom-scheduler in kube-system unless ``kw`` says)."""
    release, namespace = kw.get("release", "custom-scheduler"), kw.get("namespace", "kube-system")
    argv = [*helm, "template", release, str(CHART), "--namespace", namespace, "--kube-version", "1.37.2"]
    return k.load_docs(_run([*argv, *_values_args(tmp, values)]).stdout)


def one(docs: list[dict[str, Any]], kind: str, name: str = "") -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and (not name or d["metadata"]["name"] == name)]
    return doc


@pytest.fixture(scope="module")
def crds(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The ServiceMonitor, PrometheusRule and Certificate CRDs from their projects' Go modules,
    installed (and established) on the test API server for this module, removed after."""
    if shutil.which("go") is None:
        pytest.fail("no Go toolchain: it fetches the CRDs from the Go module proxy (hack/dev.sh setup needs it too)")
    docs: list[dict[str, Any]] = []
    workdir = tmp_path_factory.mktemp("crds")  # outside any Go module: a plain module download
    for module, paths in CRD_SOURCES.items():
        out = _run(["go", "mod", "download", "-json", module], cwd=workdir)
        root = Path(json.loads(out.stdout)["Dir"])
        docs += [d for p in paths for d in k.load_docs((root / p).read_text())]
    names = [d["metadata"]["name"] for d in docs]
    k.apply_docs(control_plane, docs)
    k.kubectl(control_plane, "wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{n}" for n in names))
    yield
    k.kubectl(control_plane, "delete", "crd", "--wait=false", *names)


def _kinds(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(d["kind"], d["metadata"]["name"]) for d in docs}


# -- lint ----------------------------------------------------------------------------------------


def test_helm_lint_passes_with_defaults_and_everything_on(helm: list[str], tmp_path: Path) -> None:
    """``helm lint --strict``: the chart's metadata, templates and values are well-formed."""
    for values in (None, _all_on("monitoring")):
        proc = _run([*helm, "lint", "--strict", str(CHART), *_values_args(tmp_path, values)], check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout


# -- the defaults are manifests/ -----------------------------------------------------------------


def test_default_render_has_the_objects_of_the_manifests(helm: list[str], tmp_path: Path) -> None:
    """Same kinds and names as ``kubectl kustomize manifests/`` (release custom-scheduler), nothing optional."""
    docs = render(helm, tmp_path)
    manifests: list[dict[str, Any]] = []
    for name in ("serviceaccount", "rbac", "configmap", "deployment", "service", "pdb"):
        manifests += k.load_docs(k.manifest(f"{name}.yaml").read_text())
    assert _kinds(docs) == _kinds(manifests)
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] not in {"ClusterRole", "ClusterRoleBinding"}} == {
        "kube-system"
    }


def test_rbac_equals_the_manifests(helm: list[str], tmp_path: Path) -> None:
    """The ClusterRoles' and the Lease Role's rules are manifests/rbac.yaml's, rule for rule."""
    docs = render(helm, tmp_path)
    manifest = k.load_docs(k.manifest("rbac.yaml").read_text())
    for kind, name in (
        ("ClusterRole", "custom-scheduler"),
        ("ClusterRole", "custom-scheduler-metrics-reader"),
        ("Role", "custom-scheduler-leader-election"),
        ("Role", "custom-scheduler-decision-record"),
    ):
        assert one(docs, kind, name)["rules"] == one(manifest, kind, name)["rules"], name
    for kind, name in (
        ("ClusterRoleBinding", "custom-scheduler-auth-delegator"),
        ("RoleBinding", "custom-scheduler-leader-election"),
        ("RoleBinding", "custom-scheduler-decision-record"),
    ):
        assert one(docs, kind, name)["roleRef"] == one(manifest, kind, name)["roleRef"]
        assert one(docs, kind, name)["subjects"] == one(manifest, kind, name)["subjects"]


def test_config_is_the_manifests_and_passes_check_config(helm: list[str], tmp_path: Path) -> None:
    """The ConfigMap's scheduler-config.yaml is manifests/configmap.yaml's (as YAML) and valid; a
    changed Lease name moves the Role's resourceNames with it."""
    (cm,) = [d for d in render(helm, tmp_path) if d["kind"] == "ConfigMap"]
    text = cm["data"]["scheduler-config.yaml"]
    assert yaml.safe_load(text) == yaml.safe_load(k.scheduler_config_text())
    path = tmp_path / "scheduler-config.yaml"
    path.write_text(text)
    checked = _run([sys.executable, "-m", "custom_scheduler", "check-config", str(path)])
    assert yaml.safe_load(checked.stdout)["leaderElection"]["leaderElect"] is True
    assert config.load_config(text, full_registry()).leader_election.resource_name == "custom-scheduler"

    values = {"config": {"leaderElection": {"resourceName": "other-lease", "resourceNamespace": "kube-public"}}}
    docs = render(helm, tmp_path, values)
    role = one(docs, "Role", "custom-scheduler-leader-election")
    assert role["metadata"]["namespace"] == "kube-public"
    assert role["rules"][1]["resourceNames"] == ["other-lease"]
    le = config.load_config(one(docs, "ConfigMap")["data"]["scheduler-config.yaml"], full_registry()).leader_election
    assert (le.resource_name, le.resource_namespace) == ("other-lease", "kube-public")


def test_pod_spec_is_the_manifests(helm: list[str], tmp_path: Path) -> None:
    """The Deployment's pod spec is manifests/deployment.yaml's (the chart's selector adds the
    instance label), with 2 replicas and system-cluster-critical."""
    dep = one(render(helm, tmp_path), "Deployment")
    (manifest,) = k.load_docs(k.manifest("deployment.yaml").read_text())
    assert dep["spec"]["replicas"] == manifest["spec"]["replicas"] == 2
    ours, theirs = dep["spec"]["template"]["spec"], manifest["spec"]["template"]["spec"]
    assert ours["priorityClassName"] == "system-cluster-critical"
    assert {key: v for key, v in ours.items() if key != "affinity"} == {
        key: v for key, v in theirs.items() if key != "affinity"
    }
    term = ours["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]


def test_many_replicas_without_leader_election_are_refused(helm: list[str], tmp_path: Path) -> None:
    values = {"config": {"leaderElection": {"leaderElect": False}}}
    argv = [*helm, "template", "x", str(CHART), *_values_args(tmp_path, values)]
    proc = _run(argv, check=False)
    assert proc.returncode != 0
    assert "needs config.leaderElection.leaderElect: true" in proc.stderr


# -- the optional objects ------------------------------------------------------------------------


def test_cert_manager_and_existing_secret_serve_tls_from_the_secret(helm: list[str], tmp_path: Path) -> None:
    """cert-manager: a Certificate for the Service's names into "<fullname>-tls", mounted and passed
    with --tls-cert-file/--tls-private-key-file. An existing Secret: the same, without a Certificate."""
    docs = render(helm, tmp_path, _all_on("monitoring"))
    cert = one(docs, "Certificate")
    assert cert["spec"]["issuerRef"] == {"name": "cluster-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    assert "custom-scheduler.kube-system.svc" in cert["spec"]["dnsNames"]
    for values, secret in (
        (_all_on("monitoring"), cert["spec"]["secretName"]),
        ({"tls": {"existingSecret": "mine"}}, "mine"),
    ):
        docs = render(helm, tmp_path, values)
        spec = one(docs, "Deployment")["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        assert {
            "--tls-cert-file=/etc/custom-scheduler/tls/tls.crt",
            "--tls-private-key-file=/etc/custom-scheduler/tls/tls.key",
        } <= set(container["args"])
        assert {"name": "tls", "mountPath": "/etc/custom-scheduler/tls", "readOnly": True} in container["volumeMounts"]
        assert {"name": "tls", "secret": {"secretName": secret}} in spec["volumes"]
    assert not [d for d in render(helm, tmp_path, {"tls": {"existingSecret": "mine"}}) if d["kind"] == "Certificate"]


def test_service_monitor_authorizes_with_a_service_account_token_secret(helm: list[str], tmp_path: Path) -> None:
    """authorization: Bearer from a kubernetes.io/service-account-token Secret of the Prometheus's
    ServiceAccount, in its namespace (with the ServiceMonitor), bound to the metrics-reader role."""
    docs = render(helm, tmp_path, _all_on("monitoring"))
    monitor, secret = one(docs, "ServiceMonitor"), one(docs, "Secret")
    binding = one(docs, "ClusterRoleBinding", "custom-scheduler-metrics-reader")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert "bearerTokenFile" not in endpoint
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": secret["metadata"]["name"], "key": "token"},
    }
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["annotations"] == {"kubernetes.io/service-account.name": "prometheus"}
    assert monitor["metadata"]["namespace"] == secret["metadata"]["namespace"] == "monitoring"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]
    assert binding["roleRef"]["name"] == "custom-scheduler-metrics-reader"
    assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/name"
    service = one(docs, "Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert service["metadata"]["labels"]["app.kubernetes.io/name"] == "custom-scheduler"  # the job label


def test_network_policy_opens_only_the_metrics_port_and_the_api_server(helm: list[str], tmp_path: Path) -> None:
    docs = render(helm, tmp_path, _all_on("monitoring"))
    policy = one(docs, "NetworkPolicy")["spec"]
    (container,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    (ingress,) = policy["ingress"]
    assert ingress["ports"] == [{"port": container["ports"][0]["containerPort"], "protocol": "TCP"}]
    assert ingress["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        }
    ]
    api, dns = policy["egress"]
    assert api == {
        "ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}],
        "to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}],
    }
    assert {p["port"] for p in dns["ports"]} == {53}


def test_rules_and_dashboard_are_the_deploy_files(helm: list[str], tmp_path: Path) -> None:
    """The PrometheusRule's groups and the dashboard ConfigMap (labelled for Grafana's sidecar) are
    deploy/'s files, which are links to the chart's files/."""
    docs = render(helm, tmp_path, _all_on("monitoring"))
    rules = yaml.safe_load((DEPLOY / "prometheus" / "custom-scheduler-rules.yaml").read_text())
    assert one(docs, "PrometheusRule")["spec"] == rules["spec"]
    dashboard = one(docs, "ConfigMap", "custom-scheduler-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["custom-scheduler.json"]) == json.loads(
        (DEPLOY / "grafana" / "custom-scheduler.json").read_text()
    )
    for path in ("prometheus/custom-scheduler-rules.yaml", "grafana/custom-scheduler.json"):
        assert (DEPLOY / path).resolve().is_relative_to(CHART / "files"), path


# -- the API server accepts them -----------------------------------------------------------------


def test_default_render_is_accepted_by_the_api_server(
    helm: list[str], tmp_path: Path, control_plane: ControlPlane
) -> None:
    """``kubectl apply --server-side --dry-run=server`` of the default render: admission,
    validation and defaulting of every object."""
    docs = render(helm, tmp_path)
    out = k.apply_docs(control_plane, docs, dry_run=True)
    assert out.count("(server dry run)") == len(docs), out


def test_everything_on_is_accepted_including_the_crd_kinds(
    helm: list[str], tmp_path: Path, control_plane: ControlPlane, namespace: str, crds: None
) -> None:
    """Every optional object too, the ServiceMonitor, PrometheusRule and Certificate validated
    against their CRDs' schemas by the API server (a wrong field would be refused: strict field
    validation)."""
    docs = render(helm, tmp_path, _all_on(namespace))
    assert {d["kind"] for d in docs} >= CRD_KINDS
    out = k.apply_docs(control_plane, docs, dry_run=True)
    assert out.count("(server dry run)") == len(docs), out
    broken = one(docs, "ServiceMonitor")
    broken["spec"]["endpoints"][0]["bearerTokenFileTypo"] = "x"
    proc = k.kubectl(
        control_plane,
        "apply",
        "--server-side",
        "--dry-run=server",
        "-f",
        "-",
        stdin=yaml.safe_dump(broken),
        check=False,
    )
    assert proc.returncode != 0, "the CRD schema is enforced"
    assert "bearerTokenFileTypo" in proc.stderr


def test_manifests_service_monitor_is_accepted(control_plane: ControlPlane, namespace: str, crds: None) -> None:
    """manifests/servicemonitor.yaml (Secret, ClusterRoleBinding, ServiceMonitor) against the real
    schemas; its namespace "monitoring" is swapped for the test's own."""
    docs = k.load_docs(k.manifest("servicemonitor.yaml").read_text())
    for doc in docs:
        if "namespace" in doc["metadata"]:
            doc["metadata"]["namespace"] = namespace
    out = k.apply_docs(control_plane, docs, dry_run=True)
    assert out.count("(server dry run)") == len(docs) == 3, out
