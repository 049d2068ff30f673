"""Operator tools beside the daemon: ``explain``, ``simulate`` and ``snapshot``.

All three decide with the daemon's own code (:func:`custom_scheduler.framework.profiles.build_frameworks`,
the :class:`~custom_scheduler.core.cache.Cache` and :class:`~custom_scheduler.core.algorithm.Algorithm`),
so their answers are the daemon's answers:

- ``explain POD``: every node's Filter verdicts and every feasible node's scores for one pod, on a
  live cluster or a snapshot (:mod:`.explain`);
- ``simulate --cluster SNAPSHOT --pods PODS``: place pending pods offline, in queue order, and report
  placements and node utilisation, optionally as an HTML page (:mod:`.simulate`);
- ``snapshot -o FILE``: write a live cluster's nodes and pods as a snapshot (:mod:`.snapshot`);
- ``ui``: serve simulate as an interactive page on 127.0.0.1 (:mod:`.ui_server`);
- ``why NS/POD`` and ``shadow-report``: read the daemon's decision record (:mod:`.why`,
  :mod:`.shadow_report`).

The CLI wires them with :func:`register`, which only declares arguments: the modules (and the
scheduler code they drive) are imported when a command runs, so other commands start fast. Each
handler returns an exit code: 0 success, 1 a cluster or plugin failure, 2 bad input (one message on
stderr, never a traceback).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Handler = Callable[[argparse.Namespace], int]


def cmd_explain(args: argparse.Namespace) -> int:
    from custom_scheduler.tools import explain_cli

    return explain_cli.cmd_explain(args)


def cmd_simulate(args: argparse.Namespace) -> int:
    if getattr(args, "explain", None):
        # The --explain hook: explain_cli builds on simulate, so simulate cannot import it back.
        from custom_scheduler.tools import explain_cli

        return explain_cli.cmd_simulate_explain(args)
    from custom_scheduler.tools import simulate

    return simulate.cmd_simulate(args)


def cmd_ui(args: argparse.Namespace) -> int:
    from custom_scheduler.tools import ui_server

    return ui_server.cmd_ui(args)


def cmd_why(args: argparse.Namespace) -> int:
    from custom_scheduler.tools import why

    return why.cmd_why(args)


def cmd_shadow_report(args: argparse.Namespace) -> int:
    from custom_scheduler.tools import shadow_report

    return shadow_report.cmd_shadow_report(args)


def cmd_snapshot(args: argparse.Namespace) -> int:
    from custom_scheduler.tools import snapshot

    return snapshot.cmd_snapshot(args)


def cmd_defrag(args: argparse.Namespace) -> int:
    from custom_scheduler.tools import defrag

    return defrag.cmd_defrag(args)


#: Where manifests/configmap.yaml (and the chart) put the daemon's configuration.
DEPLOYED_CONFIG_MAP = "kube-system/custom-scheduler-config"


def _explain_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pod", metavar="POD", help="namespace/name of a pod, a pod YAML file, or NAME in --pods")
    p.add_argument(
        "--pods",
        default=None,
        metavar="FILE",
        help="a file of pods: explain POD (NAME or ns/name) after the pods before it are placed offline",
    )
    p.add_argument(
        "--configz",
        default=None,
        metavar="URL",
        help="the daemon's /configz (default: the Lease holder's pod, at its pod IP, else through the API server)",
    )
    p.add_argument("--kubeconfig", default=None, help="live cluster (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--cluster", default=None, metavar="SNAPSHOT", help="explain offline against a snapshot file")
    p.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="KubeSchedulerConfiguration (default, live: the daemon's /configz, else its ConfigMap, else the "
        "default profile)",
    )
    p.add_argument(
        "--config-map",
        default=DEPLOYED_CONFIG_MAP,
        metavar="NS/NAME",
        help=f"the deployed config's ConfigMap, read when live without --config (default {DEPLOYED_CONFIG_MAP})",
    )
    p.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml"), default="table")
    p.add_argument("--profile", default=None, metavar="NAME", help="profile to use (default: the pod's schedulerName)")
    p.add_argument("-n", "--namespace", default="default", help="namespace of a POD given without one")
    p.add_argument("--seed", type=int, default=None, help="fix the random tie-break among equal top scores")
    p.add_argument("--top", type=int, default=3, metavar="N", help="score detail for the N best nodes (0: all)")


def _simulate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", required=True, metavar="SNAPSHOT", help="cluster snapshot (see `snapshot`)")
    p.add_argument("--pods", required=True, metavar="PODS", help="YAML file of pods to place, in queue order")
    p.add_argument("--config", default=None, metavar="FILE", help="KubeSchedulerConfiguration (default profile)")
    p.add_argument("--seed", type=int, default=None, help="fix random tie-breaks (one is picked and printed if unset)")
    p.add_argument("--html", default=None, metavar="FILE", help="also write an HTML report with utilisation charts")
    p.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    p.add_argument("--profile", default=None, metavar="NAME", help="profile for every pod (default: schedulerName)")
    p.add_argument(
        "--explain", default=None, metavar="NAME", help="explain pod NAME after the pods before it are placed"
    )


def _ui_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", default=None, metavar="SNAPSHOT", help="pre-fill the page with this snapshot")
    p.add_argument("--pods", default=None, metavar="PODS", help="pre-fill the page with these pending pods")
    p.add_argument("--config", default=None, metavar="FILE", help="pre-fill the KubeSchedulerConfiguration")
    p.add_argument("--seed", type=int, default=None, help="pre-fill the tie-break seed")
    p.add_argument("--profile", default=None, metavar="NAME", help="pre-fill the profile for every pod")
    p.add_argument("--address", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8089, help="port to listen on (default 8089; 0: a free one)")


def _why_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pod", metavar="NS/POD", help="the pod, as namespace/name (a deleted one too)")
    p.add_argument("-n", "--namespace", default="default", help="namespace of a POD given without one")
    p.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument(
        "--record",
        default=None,
        metavar="NS/NAME",
        help="the decision record's ConfigMap ring (default kube-system/custom-scheduler-decisions)",
    )
    p.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")


def _shadow_report_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument(
        "--record",
        default=None,
        metavar="NS/NAME",
        help="the shadow's decision record ring (default kube-system/custom-scheduler-shadow-decisions)",
    )
    p.add_argument("--profile", default=None, metavar="NAME", help="only this profile")
    p.add_argument(
        "--limit", type=int, default=50, metavar="N", help="pods placed otherwise listed per profile (0: all)"
    )
    p.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")


def _snapshot_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="file to write ('-' for stdout)")
    p.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")


def _defrag_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--shape", default=None, help='pods to make room for: "COUNTx RES=QTY[,RES=QTY...]", e.g. "2x nvidia.com/gpu=8"'
    )
    p.add_argument(
        "--pod", default=None, metavar="NS/NAME", help="a pending pod (or its gang's pending pods) as the shape"
    )
    p.add_argument("--priority", type=int, default=None, help="with --shape: never move pods of higher priority")
    p.add_argument("--kubeconfig", default=None, help="live cluster (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--cluster", default=None, metavar="SNAPSHOT", help="plan offline against a snapshot file")
    p.add_argument("--config", default=None, metavar="FILE", help="KubeSchedulerConfiguration (default: as explain)")
    p.add_argument(
        "--config-map", default=DEPLOYED_CONFIG_MAP, metavar="NS/NAME", help="the deployed config's ConfigMap"
    )
    p.add_argument("--domain-label", default=None, metavar="LABEL", help="place the whole shape in one domain of LABEL")
    p.add_argument("--include-bare", action="store_true", help="also move pods no controller owns (they are lost)")
    p.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    p.add_argument("--execute", action="store_true", help="evict the verified plan's pods (live cluster only)")
    p.add_argument("--rate", type=float, default=30.0, metavar="PODS_PER_MIN", help="evictions per minute (default 30)")
    p.add_argument("--max-evictions", type=int, default=None, metavar="N", help="refuse a plan needing more than N")


@dataclass(frozen=True, slots=True)
class _Command:
    """One command as the CLI declares it: what runs it, its help texts, its arguments."""

    handler: Handler
    help: str
    description: str
    arguments: Callable[[argparse.ArgumentParser], None]


#: The commands by name, in the order ``--help`` lists them.
_COMMANDS: dict[str, _Command] = {
    "explain": _Command(
        cmd_explain,
        help="each plugin's verdict and score for a pod on every node, and the node it goes to",
        description="Explain where a pod goes and why: every node's Filter verdicts, every feasible "
        "node's scores and the chosen node, computed with the daemon's own code. A bound pod is removed "
        "from its node first and explained as if pending (where the scheduler would place it now).",
        arguments=_explain_arguments,
    ),
    "simulate": _Command(
        cmd_simulate,
        help="place pods on a cluster snapshot offline; report placements and utilisation",
        description="Place pending pods one by one in queue order on a cluster snapshot with the "
        "daemon's framework and algorithm, without an API server; report placements, unschedulable "
        "pods with their reasons, and node utilisation before and after.",
        arguments=_simulate_arguments,
    ),
    "ui": _Command(
        cmd_ui,
        help="serve the simulator as an interactive page (edit YAML, run, drill into each pod)",
        description="Serve a page on which a snapshot, pending pods and a configuration are edited as "
        "YAML and simulated with simulate's own code; it shows placements, each pod's attempts and its "
        "node x plugin verdicts and scores, pod groups and utilisation charts. Prints the URL.",
        arguments=_ui_arguments,
    ),
    "snapshot": _Command(
        cmd_snapshot,
        help="write a live cluster's nodes and their pods to a YAML file (input of simulate/explain)",
        description="Write the nodes, their assigned non-terminal pods, namespaces, PriorityClasses and "
        "PodDisruptionBudgets of a live cluster as one YAML document (managedFields, unused status "
        "and container details that scheduling ignores are stripped).",
        arguments=_snapshot_arguments,
    ),
    "defrag": _Command(
        cmd_defrag,
        help="which pods to move so a request shape fits (verified offline); optionally evict them",
        description="Plan the least disruptive moves (controller-owned pods only, gangs whole, PDBs and "
        "priorities respected) that make room for a request shape or a pending pod, verify the plan "
        "with the daemon's framework offline, and with --execute evict per plan at a bounded rate.",
        arguments=_defrag_arguments,
    ),
    "why": _Command(
        cmd_why,
        help="the decisions recorded about a pod: attempts, reasons, node, scores, runner-up, binder",
        description="Print the scheduling decisions the daemon recorded about one pod, oldest first, "
        "from its decision record (a ConfigMap ring that outlives the pod, restarts and failovers): "
        "unschedulable reasons per plugin with node counts, preemptions (nominated node, victims, by "
        "whom), the node chosen with its top plugin scores and the runner-up, and who bound it.",
        arguments=_why_arguments,
    ),
    "shadow-report": _Command(
        cmd_shadow_report,
        help="how often the shadow (run --dry-run) agreed with the real binding, and where it did not",
        description="Read a shadow instance's decision record and print, per profile, how many pods "
        "it chose the same node for as the scheduler that really bound them, and list the pods it "
        "would have placed otherwise with the reason (plugin scores on both nodes, or the real node "
        "infeasible for the shadow).",
        arguments=_shadow_report_arguments,
    ),
}

COMMANDS = tuple(_COMMANDS)


def register(subparsers: Any) -> dict[str, Handler]:
    """Add ``explain``, ``simulate`` and ``snapshot`` to an argparse ``subparsers`` object.

    Each subparser sets ``func``, so ``args.func(args)`` runs the command and returns its exit
    code; the same handlers are also returned by command name.
    """
    for name, c in _COMMANDS.items():
        p = subparsers.add_parser(name, help=c.help, description=c.description)
        c.arguments(p)
        p.set_defaults(func=c.handler)
    return {name: c.handler for name, c in _COMMANDS.items()}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one tool command (``main(["simulate", "--cluster", ...])``), for tests and scripts."""
    parser = argparse.ArgumentParser(prog="custom-scheduler")
    sub = parser.add_subparsers(dest="command", required=True)
    handlers = register(sub)
    args = parser.parse_args(argv)
    try:
        return handlers[args.command](args)
    except KeyboardInterrupt:
        return 130
