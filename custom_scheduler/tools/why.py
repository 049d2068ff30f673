"""``why NS/POD``: the decisions the daemon recorded about one pod, in order.

Read from the decision record's ConfigMap ring (:mod:`custom_scheduler.core.decision_store`), so
it answers after the pod was deleted, after the daemon restarted and after a failover, for as long
as the ring still holds the entries. Each attempt shows what the scheduler saw: the reasons per
plugin and node counts of an unschedulable attempt, the preemption it started, the node chosen
with its top plugin scores and the runner-up, and who bound it. The pod's state now (bound,
pending, gone) is added from the API server when it can be read.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from custom_scheduler.core import decision_record as dr
from custom_scheduler.core.decision_store import RingConfig, parse_ring_ref, read_ring
from custom_scheduler.kube import api_errors as kerrors
from custom_scheduler.tools.plumbing import EXIT_OK, ToolError, run_command
from custom_scheduler.tools.report import table

Entry = dict[str, Any]


def when(t: Any) -> str:
    """An entry's time as UTC ISO 8601 (``?`` for a missing or bad one)."""
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(t)))
    except (TypeError, ValueError, OverflowError):
        return "?"


def ring_of(ref: str | None, *, shadow: bool = False) -> RingConfig:
    try:
        cfg = parse_ring_ref(ref, shadow=shadow)
    except ValueError as e:
        raise ToolError(str(e)) from None
    if cfg is None:
        raise ToolError("--record: give the ring as NAMESPACE/NAME")
    return cfg


def _scores(top: Any) -> str:
    if not isinstance(top, list):
        return ""
    return ", ".join(f"{p[0]} {p[1]}" for p in top if isinstance(p, list) and len(p) == 2)


def detail_lines(e: Mapping[str, Any]) -> list[str]:
    """What one entry says, as lines for the table's last column."""
    kind = e.get("e")
    if kind in ("scheduled", "waiting"):
        head = f"node {e.get('n')}"
        if "s" in e:
            head += f" (score {e['s']}: {_scores(e.get('top'))})"
        lines = [head + (" - waiting on Permit" if kind == "waiting" else "")]
        if "f" in e:
            lines.append(f"{e['f']} feasible of {e.get('v')} evaluated")
        ru = e.get("ru")
        if isinstance(ru, dict):
            lines.append(f"runner-up {ru.get('n')} (score {ru.get('s')}: {_scores(ru.get('top'))})")
        elif "s" not in e and isinstance(e.get("f"), int) and e["f"] > 1:
            lines.append("scores and runner-up not recorded (the daemon runs with --decision-record-scores off)")
        return lines
    if kind == "unschedulable":
        lines = [str(e.get("m", ""))]
        why = e.get("why")
        if isinstance(why, dict):
            for plugin, reasons in why.items():
                if isinstance(reasons, dict):
                    lines += [f"{plugin}: {r} ({n} node{'s' if n != 1 else ''})" for r, n in reasons.items()]
        if e.get("nom"):
            victims = ", ".join(e.get("victims") or []) or "none"
            lines.append(f"preemption: nominated {e['nom']}, preempting {victims}")
        return lines
    if kind == "preempted":
        return [f"preempted on {e.get('n')} by {e.get('by')}"]
    if kind == "bound":
        return [f"bound to {e.get('n')} by {e.get('by')}"]
    if kind == "shadow":
        return [f"shadow {e.get('res')}: shadow {e.get('n') or '-'}, real {e.get('real')}: {e.get('why')}"]
    return [str(e.get("m", ""))]


def why_report(key: str, entries: Sequence[Entry], cfg: RingConfig, now: str | None) -> dict[str, Any]:
    """The report as data (what ``-o json|yaml`` prints)."""
    mine = dr.entries_for(entries, key)
    return {
        "pod": key,
        "record": f"{cfg.namespace}/{cfg.name}",
        "found": bool(mine),
        "recordedSince": when(entries[0].get("t")) if entries else None,
        "entriesInRecord": len(entries),
        "now": now,
        "decisions": mine,
    }


def why_text(rep: Mapping[str, Any]) -> str:
    if not rep["found"]:
        since = (
            f" (it holds {rep['entriesInRecord']} entries since {rep['recordedSince']})"
            if rep["entriesInRecord"]
            else ""
        )
        msg = (
            f"No decision recorded for {rep['pod']} in {rep['record']}{since}: the pod is not scheduled by "
            "custom-scheduler, was not decided yet (entries are written every few seconds), or its entries "
            "left the ring."
        )
        return msg + (f"\nNow: {rep['now']}.\n" if rep["now"] else "\n")
    decisions = rep["decisions"]
    uids = sorted({str(e.get("u", "")) for e in decisions})
    head = f"{rep['pod']}: {len(decisions)} recorded, from {rep['record']}"
    if len(uids) > 1:
        head += f" ({len(uids)} pods of this name: uids {', '.join(u[:8] for u in uids)})"
    rows: list[list[str]] = []
    for e in decisions:
        lines = detail_lines(e)
        rows.append([when(e.get("t")), str(e.get("e", "")), str(e.get("p", "")), lines[0]])
        rows += [["", "", "", line] for line in lines[1:]]
    out = [head, *table(("TIME", "EVENT", "PROFILE", "DETAIL"), rows, shrink=3, width=160)]
    if rep["now"]:
        out.append(f"Now: {rep['now']}.")
    return "\n".join(out) + "\n"


def pod_now(client: Any, key: str) -> str | None:
    """The pod's state on the API server now, in words (None when it cannot be read)."""
    ns, _, name = key.partition("/")
    try:
        pod = client.get(f"/api/v1/namespaces/{ns}/pods/{name}")
    except kerrors.NotFound:
        return "the pod does not exist (deleted)"
    except kerrors.KubeError:
        return None
    node = (pod.get("spec") or {}).get("nodeName")
    return f"bound to {node}" if node else "pending (not bound)"


def render(data: Mapping[str, Any], output: str, text: str) -> str:
    if output == "json":
        return json.dumps(data, indent=2) + "\n"
    if output == "yaml":
        import yaml

        return str(yaml.safe_dump(dict(data), sort_keys=False))
    return text


def cmd_why(args: argparse.Namespace) -> int:
    def work() -> int:
        key = args.pod if "/" in args.pod else f"{args.namespace}/{args.pod}"
        ns, _, name = key.partition("/")
        if not ns or not name or "/" in name:
            raise ToolError(f"pod {args.pod!r}: expected NAMESPACE/NAME")
        from custom_scheduler.tools.live_cluster import connect

        cfg = ring_of(args.record)
        client = connect(args.kubeconfig)
        rep = why_report(key, read_ring(client, cfg), cfg, pod_now(client, key))
        print(render(rep, args.output, why_text(rep)), end="")
        return EXIT_OK

    got = run_command("why", work)
    return got.code if isinstance(got, ToolError) else got
