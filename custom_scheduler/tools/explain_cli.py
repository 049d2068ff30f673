"""``custom-scheduler explain``: its inputs resolved, the explanation run in context, the report.

The inputs: the configuration (:mod:`.explain_config`: ``--config``, else the running daemon's
``/configz``, else its ConfigMap, else the default profile), the cluster (live, or a snapshot with
``--cluster``) and the pod (``namespace/name``, a one-pod file, or NAME of a ``--pods`` file,
explained after the pods before it: :mod:`.explain_context`). A pending gang member is explained
as its group cycle decides. Kept apart from :mod:`.explain`, which only explains, because the
context needs ``simulate``, which itself builds on :mod:`.explain`.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any

from custom_scheduler.framework.registry import Registry
from custom_scheduler.tools.explain import Explanation, format_explanation
from custom_scheduler.tools.explain_config import ConfigSource, choose_config
from custom_scheduler.tools.explain_context import explain_after, explain_member
from custom_scheduler.tools.snapshot import (
    EXIT_OK,
    EXIT_RUNTIME,
    ClusterState,
    ToolError,
    connect,
    fetch_live,
    load_cluster,
    load_objects,
    load_pods,
    print_warnings,
    run_command,
)

_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def looks_like_file(arg: str) -> bool:
    return os.path.exists(arg) or arg.endswith((".yaml", ".yml", ".json")) or arg == "-"


def parse_pod_ref(arg: str, namespace: str) -> tuple[str, str]:
    """``namespace/name`` or ``name`` (in ``namespace``)."""
    parts = arg.split("/")
    if len(parts) == 1:
        ns, name = namespace, parts[0]
    elif len(parts) == 2:
        ns, name = parts
    else:
        raise ToolError(f"POD {arg!r}: expected namespace/name or a pod YAML file")
    for what, v in (("namespace", ns), ("name", name)):
        if not v or len(v) > 253 or not _NAME_RE.match(v):
            raise ToolError(f"POD {arg!r}: invalid {what} {v!r} (and no such file)")
    return ns, name


def load_pod_file(path: str) -> dict[str, Any]:
    objs = load_objects(path, "pod file", default_kind="Pod")
    pods = [o for o in objs if o["kind"] == "Pod"]
    if len(pods) != 1:
        raise ToolError(
            f"pod file {path}: expected exactly one Pod, found {len(pods)}"
            + (f" (name the one to explain: `explain --pods {path} NAME`)" if len(pods) > 1 else "")
        )
    return pods[0]


def _config(args: argparse.Namespace, registry: Registry, client: Any, kubeconfig: str) -> ConfigSource:
    return choose_config(
        registry,
        path=args.config,
        client=client,
        configz=getattr(args, "configz", None),
        config_map=args.config_map,
        kubeconfig=kubeconfig,
    )


def _live_pod(client: Any, ns: str, name: str) -> dict[str, Any]:
    from custom_scheduler.kube import api_errors as kerrors
    from custom_scheduler.kube.client import pod_path

    try:
        doc: dict[str, Any] = client.get(pod_path(ns, name))
    except kerrors.NotFound:
        raise ToolError(f"pod {ns}/{name} not found") from None
    return doc


def explain_command(args: argparse.Namespace, registry: Registry) -> Explanation:
    """Resolve the inputs of ``explain`` (live or offline) and explain. Raises ToolError, KubeError."""
    if args.kubeconfig is not None and args.cluster is not None:
        raise ToolError("--kubeconfig and --cluster are exclusive: explain against a live cluster or a snapshot")
    pods_file = getattr(args, "pods", None)
    source = choose_config(registry, path=args.config) if args.config is not None or args.cluster else None
    pod_docs = load_pods(pods_file) if pods_file else None
    one_file = pod_docs is None and looks_like_file(args.pod)
    pod_doc = load_pod_file(args.pod) if one_file else None
    ref = None if (pod_docs is not None or one_file) else parse_pod_ref(args.pod, args.namespace)
    if args.cluster is not None:
        state: ClusterState = load_cluster(args.cluster)
        if ref is not None and (pod_doc := state.find_pod(*ref)) is None:
            raise ToolError(f"pod {ref[0]}/{ref[1]} is not in {args.cluster} (a snapshot holds assigned pods only)")
    else:
        # As the daemon's --kubeconfig: the flag, else the given config's clientConnection.
        kubeconfig = args.kubeconfig
        if kubeconfig is None:
            kubeconfig = source.config.client_connection.kubeconfig if source is not None else ""
        client = connect(kubeconfig)
        if source is None:  # no --config: the running daemon's, else the fallbacks
            source = _config(args, registry, client, kubeconfig)
        if ref is not None:
            pod_doc = _live_pod(client, *ref)
        state = fetch_live(client)
        print_warnings("explain", state)
    assert source is not None
    cfg = source.config
    kw: dict[str, Any] = {"profile": args.profile, "seed": args.seed}
    if pod_docs is not None:
        ex = explain_after(state, pod_docs, args.pod, cfg, registry, **kw)
    else:
        assert pod_doc is not None
        ex = explain_member(state, pod_doc, cfg, registry, unbind=not one_file, **kw)
    ex.config_source = source.description
    if args.output in ("json", "yaml"):
        print(f"custom-scheduler explain: configuration of {source.description}", file=sys.stderr)
    return ex


def cmd_explain(args: argparse.Namespace) -> int:
    from custom_scheduler.plugins.builtin import full_registry

    ex = run_command("explain", lambda: explain_command(args, full_registry()))
    if isinstance(ex, ToolError):
        return ex.code
    sys.stdout.write(format_explanation(ex, args.output, args.top))
    return EXIT_RUNTIME if ex.error else EXIT_OK


def cmd_simulate_explain(args: argparse.Namespace) -> int:
    """``simulate --explain NAME``: the simulation up to NAME, then NAME explained in that state."""
    from custom_scheduler.plugins.builtin import full_registry

    def work() -> Explanation:
        registry = full_registry()
        source = choose_config(registry, path=args.config)
        ex = explain_after(
            load_cluster(args.cluster),
            load_pods(args.pods),
            args.explain,
            source.config,
            registry,
            profile=args.profile,
            seed=args.seed,
        )
        ex.config_source = source.description
        return ex

    ex = run_command("simulate", work)
    if isinstance(ex, ToolError):
        return ex.code
    sys.stdout.write(format_explanation(ex, args.output))
    return EXIT_RUNTIME if ex.error else EXIT_OK
