"""``custom-scheduler snapshot``: write a live cluster's scheduling state as a snapshot file.

The command is the small part: it reads the cluster (:mod:`~custom_scheduler.tools.live_cluster`)
and writes the file (:mod:`~custom_scheduler.tools.snapshot_file`, which documents the format).
What ``explain`` and ``simulate`` build from a state lives in
:mod:`~custom_scheduler.tools.cluster_state`; what every command shares (exit codes,
:class:`~custom_scheduler.tools.plumbing.ToolError`, quiet logs, the configuration) in
:mod:`~custom_scheduler.tools.plumbing`.

This module also re-exports the names the tools and their tests have always imported from
``custom_scheduler.tools.snapshot``, so a caller may keep importing them from here.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from custom_scheduler.tools.cluster_state import ClusterState, build_cache, pod_key, resolve_priority, to_pod
from custom_scheduler.tools.live_cluster import connect, fetch_live, print_warnings
from custom_scheduler.tools.plumbing import (
    DEFAULT_CONFIG_TEXT,
    EXIT_OK,
    EXIT_RUNTIME,
    ToolError,
    deployed_scheduler_config,
    load_scheduler_config,
    quiet_logs,
    run_command,
    write_text,
)
from custom_scheduler.tools.snapshot_file import (
    WORKLOAD_SECTIONS,
    dump_yaml,
    load_cluster,
    load_objects,
    load_pods,
    snapshot_document,
)

__all__ = [
    "DEFAULT_CONFIG_TEXT",
    "EXIT_OK",
    "EXIT_RUNTIME",
    "ClusterState",
    "ToolError",
    "build_cache",
    "cmd_snapshot",
    "connect",
    "deployed_scheduler_config",
    "dump_yaml",
    "fetch_live",
    "load_cluster",
    "load_objects",
    "load_pods",
    "load_scheduler_config",
    "pod_key",
    "print_warnings",
    "quiet_logs",
    "resolve_priority",
    "run_command",
    "snapshot_document",
    "to_pod",
    "write_text",
]


def cmd_snapshot(args: argparse.Namespace) -> int:
    """``custom-scheduler snapshot -o FILE``: LIST the live cluster, write the snapshot file, and
    say what it holds on stderr (stdout may be the file itself, with ``-o -``)."""

    def work() -> dict[str, Any]:
        client = connect(args.kubeconfig)
        state = fetch_live(client)
        print_warnings("snapshot", state)
        doc = snapshot_document(state)
        write_text(args.output, dump_yaml(doc))
        return doc

    doc = run_command("snapshot", work)
    if isinstance(doc, ToolError):
        return doc.code
    if args.output != "-":
        print(
            f"wrote {args.output}: {len(doc['nodes'])} nodes, {len(doc['pods'])} pods, "
            f"{len(doc['namespaces'])} namespaces, {len(doc['priorityClasses'])} priority classes, "
            f"{sum(len(doc[s]) for s in WORKLOAD_SECTIONS)} workloads, {len(doc['podGroups'])} pod groups",
            file=sys.stderr,
        )
    return EXIT_OK
