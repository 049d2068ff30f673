"""Operator tools beside the daemon: ``explain``, ``simulate`` and ``snapshot``.

All three decide with the daemon's own code (:func:`custom_scheduler.framework.profiles.build_frameworks`,
the :class:`~custom_scheduler.core.cache.Cache` and :class:`~custom_scheduler.core.algorithm.Algorithm`),
so their answers are the daemon's answers:

- ``explain POD``: every node's Filter verdicts and every feasible node's scores for one pod, on a
  live cluster or a snapshot (:mod:`.explain`);
- ``simulate --cluster SNAPSHOT --pods PODS``: place pending pods offline, in queue order, and report
  placements and node utilisation, optionally as an HTML page (:mod:`.simulate`);
- ``snapshot -o FILE``: write a live cluster's nodes and pods as a snapshot (:mod:`.snapshot`).

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
    from custom_scheduler.tools import explain

    return explain.cmd_explain(args)


def cmd_simulate(args: argparse.Namespace) -> int:
    from custom_scheduler.tools import simulate

    return simulate.cmd_simulate(args)


def cmd_snapshot(args: argparse.Namespace) -> int:
    from custom_scheduler.tools import snapshot

    return snapshot.cmd_snapshot(args)


#: Where manifests/configmap.yaml (and the chart) put the daemon's configuration.
DEPLOYED_CONFIG_MAP = "kube-system/custom-scheduler-config"


def _explain_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pod", metavar="POD", help="namespace/name of a pod, or a pod YAML file")
    p.add_argument("--kubeconfig", default=None, help="live cluster (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--cluster", default=None, metavar="SNAPSHOT", help="explain offline against a snapshot file")
    p.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="KubeSchedulerConfiguration (default: live, the deployed ConfigMap; else the default profile)",
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


def _snapshot_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="file to write ('-' for stdout)")
    p.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")


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
    "snapshot": _Command(
        cmd_snapshot,
        help="write a live cluster's nodes and their pods to a YAML file (input of simulate/explain)",
        description="Write the nodes, their assigned non-terminal pods, namespaces, PriorityClasses and "
        "PodDisruptionBudgets of a live cluster as one YAML document (managedFields, unused status "
        "and container details that scheduling ignores are stripped).",
        arguments=_snapshot_arguments,
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
