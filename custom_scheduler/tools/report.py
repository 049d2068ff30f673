"""Human output of explain and simulate: terminal tables (at most 100 columns) and an HTML page.

Everything here renders the plain dicts that ``-o json`` / ``-o yaml`` print
(:meth:`~custom_scheduler.tools.explain.Explanation.to_dict`,
:meth:`~custom_scheduler.tools.simulation_result.SimulationResult.to_dict`), so the human and
machine views can never disagree. The HTML page is self-contained: inline CSS and SVG, no scripts, no fonts.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

WIDTH = 100

#: Short column titles for the default plugins; other plugins get their CamelCase initials.
SHORT_NAMES = {
    "NodeUnschedulable": "Unsched",
    "NodeName": "NodeName",
    "TaintToleration": "Taint",
    "NodeAffinity": "NodeAff",
    "NodePorts": "Ports",
    "NodeResourcesFit": "Fit",
    "PodTopologySpread": "Spread",
    "InterPodAffinity": "PodAff",
    "NodeResourcesBalancedAllocation": "Balanced",
    "ImageLocality": "Image",
    "VolumeBinding": "Volume",
    "VolumeRestrictions": "VolRestr",
    "VolumeZone": "VolZone",
    "NodeVolumeLimits": "VolLimit",
}


# -- text helpers -----------------------------------------------------------------------------------


def ellipsize(s: str, n: int) -> str:
    """``s`` cut to ``n`` characters, keeping its head and tail (node names differ at both ends)."""
    if len(s) <= n:
        return s
    if n <= 3:
        return s[:n]
    head = (n - 1) // 2 + (n - 1) % 2
    tail = n - 1 - head
    return s[:head] + "~" + (s[-tail:] if tail else "")


def short_names(names: Sequence[str]) -> dict[str, str]:
    """Unique short column titles for plugin names."""
    out: dict[str, str] = {}
    used: set[str] = set()
    for name in names:
        short = SHORT_NAMES.get(name)
        if short is None:
            short = name if len(name) <= 8 else "".join(re.findall(r"[A-Z0-9]", name)) or name[:8]
        base, i = short, 2
        while short in used:
            short = f"{base}{i}"
            i += 1
        used.add(short)
        out[name] = short
    return out


def wrap_words(words: Iterable[str], width: int, indent: str = "", sep: str = ", ") -> list[str]:
    """Join ``words`` with ``sep`` into lines no longer than ``width`` (counting ``indent``)."""
    lines: list[str] = []
    cur = ""
    words = list(words)
    for i, word in enumerate(words):
        w = ellipsize(word, max(8, width - len(indent) - len(sep)))
        piece = w + (sep.rstrip() if i < len(words) - 1 else "")
        candidate = f"{cur} {piece}" if cur else piece
        if cur and len(indent) + len(candidate) > width:
            lines.append(indent + cur)
            cur = piece
        else:
            cur = candidate
    if cur:
        lines.append(indent + cur)
    return lines


def wrap_text(text: str, width: int, indent: str = "", first: str | None = None) -> list[str]:
    """Word-wrap prose; ``first`` replaces ``indent`` on the first line."""
    return [
        ln if i or first is None else first + ln[len(indent) :]
        for i, ln in enumerate(wrap_words(text.split(), width, indent, sep=" "))
    ] or [first if first is not None else indent]


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    right: Iterable[int] = (),
    shrink: int = 0,
    indent: str = "  ",
    width: int = WIDTH,
) -> list[str]:
    """Aligned columns; column ``shrink`` is ellipsized when the table would exceed ``width``."""
    cells = [[str(c) for c in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    n = len(headers)
    widths = [max(len(r[i]) for r in cells) for i in range(n)]
    over = len(indent) + sum(widths) + 2 * (n - 1) - width
    if over > 0:
        widths[shrink] = max(len(headers[shrink]), 8, widths[shrink] - over)
    right_set = set(right)
    lines = []
    for r in cells:
        parts = []
        for i, cell in enumerate(r):
            c = ellipsize(cell, widths[i]) if i == shrink else cell
            parts.append(c.rjust(widths[i]) if i in right_set else c.ljust(widths[i]))
        lines.append((indent + "  ".join(parts)).rstrip())
    return lines


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# -- explain ----------------------------------------------------------------------------------------


def explain_text(d: Mapping[str, Any], *, wide: bool = False, top: int = 3, width: int = WIDTH) -> str:
    """The human view of an explanation: the pod, then (unless it errs or is gated) the filters,
    the scores, the result and whether it agrees with the pod's binding."""
    out = _explain_head(d, width)
    if d.get("error"):
        out.append("")
        out.extend(wrap_text(f"Error: {d['error']}", width, "  ", first=""))
        return "\n".join(out) + "\n"
    if d.get("gang"):
        out.append("")
        out.extend(gang_lines(d["gang"], width))
    if d.get("gated"):
        out.extend(_gate_lines(d["gated"], width))
        out.extend(_note_lines(d, width))
        return "\n".join(out) + "\n"
    out.extend(_filter_summary(d, width))
    if wide:
        out.append("")
        out.extend(_filter_matrix(d, width))
    if d.get("scores"):
        out.extend(_score_section(d, wide=wide, top=top, width=width))
    out.extend(_result_lines(d, width))
    out.extend(_agreement_lines(d, width))
    out.extend(_note_lines(d, width))
    return "\n".join(out) + "\n"


def _explain_head(d: Mapping[str, Any], width: int) -> list[str]:
    head = f"Pod {d['pod']}, profile {d['profile']}, {plural(d['nodesTotal'], 'node')} ({d['cluster']})"
    out = wrap_text(head, width)
    if d.get("boundNode"):
        out.extend(
            wrap_text(
                f"Bound to {d['boundNode']}: explained as if unbound (removed from {d['boundNode']} first), "
                "i.e. where the scheduler would place it now.",
                width,
            )
        )
    return out


def _gate_lines(gate: Mapping[str, Any], width: int) -> list[str]:
    """Why a gated pod has no verdicts, and what lets it in."""
    out = ["", "Result: gated (not attempted)"]
    out.extend(wrap_text(gate["message"], width, "  "))
    until = (
        "its PodGroup exists and has minCount members (a PodGroup created, its minCount lowered, or a member created)"
        if gate["plugin"] == "GangScheduling"
        else "the pod is updated so that it passes (for SchedulingGates: every gate removed)"
    )
    out.extend(
        wrap_text(
            f"PreEnqueue plugin {gate['plugin']} keeps the pod out of the scheduling queue: the scheduler "
            f"makes no attempt (no event, no PodScheduled condition) until {until}.",
            width,
            "  ",
            first="",
        )
    )
    return out


def _filter_summary(d: Mapping[str, Any], width: int) -> list[str]:
    """The nodes grouped by (plugin, reason): the feasible ones last, the largest group first."""
    out = ["", f"Filters: {d['feasibleNodes']} of {plural(d['nodesTotal'], 'node')} feasible"]
    groups: dict[tuple[str, str], list[str]] = {}
    for n in d["nodes"]:
        key = ("", "feasible") if n["feasible"] else (n["plugin"] or "PreFilter", ", ".join(n["reasons"]))
        groups.setdefault(key, []).append(n["name"])
    order = sorted(groups.items(), key=lambda kv: (kv[0] == ("", "feasible"), -len(kv[1]), kv[0]))
    count_w = max((len(plural(len(v), "node")) for v in groups.values()), default=6)
    for (plugin, reason), names in order:
        label = plural(len(names), "node").ljust(count_w)
        text = reason if not plugin else f"{plugin}: {reason}"
        mark = "ok " if not plugin else "NO "
        out.extend(wrap_text(text, width, " " * (5 + count_w + 2), first=f"  {mark}{label}  "))
        out.extend(wrap_words(names, width, " " * (5 + count_w + 2)))
    if d.get("skipped", {}).get("filter"):
        out.extend(wrap_text(f"(skipped by PreFilter: {', '.join(d['skipped']['filter'])})", width, "   ", first="  "))
    return out


def _score_section(d: Mapping[str, Any], *, wide: bool, top: int, width: int) -> list[str]:
    """The score matrix, then each shown node's plugin-by-plugin detail (``top`` of them unless wide)."""
    scores = d["scores"]
    out = [""]
    out.extend(_score_matrix(d, width))
    shown = scores if (wide or top <= 0) else scores[:top]
    out.append("")
    out.append("Score detail" + ("" if len(shown) == len(scores) else f" (top {len(shown)} of {len(scores)})"))
    rows: list[list[Any]] = []
    for s in shown:
        first = True
        for p in s["plugins"]:
            rows.append(
                [s["node"] if first else "", p["plugin"], p["weight"], p["raw"], p["normalized"], p["weighted"]]
            )
            first = False
        rows.append(["" if not first else s["node"], "= total", "", "", "", s["total"]])
    out.extend(table(["NODE", "PLUGIN", "WEIGHT", "RAW", "NORMALISED", "WEIGHTED"], rows, right=(2, 3, 4, 5)))
    return out


def _result_lines(d: Mapping[str, Any], width: int) -> list[str]:
    """The chosen node (and its ties), or why there is none and what preemption would do."""
    res = d["result"]
    out = [""]
    if res["schedulable"]:
        ties = res.get("ties") or []
        line = f"Result: {res['node']} (score {res['score']})"
        if len(ties) > 1:
            others = [t for t in ties if t != res["node"]]
            line += f"; tied with {', '.join(others)}: the scheduler picks one of the {len(ties)} at random"
        out.extend(wrap_text(line, width, "  ", first=""))
        return out
    out.append("Result: unschedulable")
    out.extend(wrap_text(res["message"], width, "  "))
    pre = d.get("preemption")
    if pre:
        victims = ", ".join(pre["victims"]) or "no pods"
        out.extend(
            wrap_text(
                f"Preemption: the daemon would evict {victims} on {pre['node']} and nominate that node; "
                "the pod is scheduled there once they are gone (explain evicts nothing).",
                width,
                "  ",
                first="",
            )
        )
    return out


def _agreement_lines(d: Mapping[str, Any], width: int) -> list[str]:
    agree = d.get("agreesWithBinding")
    if agree is None:
        return []
    if agree:
        return [f"Agrees with the binding: {d['boundNode']} is {_top_word(d['result'])}."]
    return wrap_text(
        f"Differs from the binding ({d['boundNode']}): the cluster changed since the pod was "
        "scheduled (pods added or removed), or the config differs from the daemon's.",
        width,
    )


def _note_lines(d: Mapping[str, Any], width: int) -> list[str]:
    return [ln for note in d.get("notes") or () for ln in wrap_text(note, width, "  ", first="Note: ")]


def gang_lines(g: Mapping[str, Any], width: int = WIDTH) -> list[str]:
    """The explanation's PodGroup paragraph: the group, its quorum, and the barrier."""
    if g["minCount"] is None:
        line = f"Gang: pod group {g['key']} ({g['api']}) does not exist"
    else:
        line = (
            f"Gang: pod group {g['key']} ({g['api']}), minCount {g['minCount']}: "
            f"{plural(g['members'], 'member')} exist, {g['placed']} placed"
        )
    if not g["gangScheduling"]:
        line += "; the profile does not enable GangScheduling, so the pod is scheduled alone"
    elif g["heldByBarrier"]:
        line += "; the PreEnqueue barrier holds the pod"
    else:
        line += (
            "; the barrier lets it in. The verdicts below are this pod's own: the scheduler places the "
            "gang's queued members together and commits only if minCount of them can be placed"
        )
    return wrap_text(line + ".", width)


def _top_word(res: Mapping[str, Any]) -> str:
    return "among the top-scored nodes" if len(res.get("ties") or []) > 1 else "the chosen node"


def _filter_matrix(d: Mapping[str, Any], width: int) -> list[str]:
    # A plugin that PreFilter skipped on every node (listed above) would be a column of "skip".
    plugins = [
        p
        for p in d["filterPlugins"]
        if any(f["plugin"] == p and f["verdict"] != "skip" for n in d["nodes"] for f in n.get("filters") or ())
    ]
    names = short_names(plugins)
    out = ["Filter verdicts per node (FAIL = the failure the scheduler reports, fail = also fails,"]
    out.append("ok = passes, skip = skipped after PreFilter, - = not run)")
    rows = []
    for n in d["nodes"]:
        verdicts = {f["plugin"]: f for f in n.get("filters") or ()}
        row: list[str] = [n["name"]]
        for p in plugins:
            f = verdicts.get(p)
            if f is None:
                row.append("-")
            elif f["verdict"] == "fail":
                row.append("FAIL" if p == n.get("plugin") else "fail")
            else:
                row.append({"pass": "ok", "skip": "skip", "error": "ERR"}.get(f["verdict"], f["verdict"]))
        rows.append(row)
    out.extend(table(["NODE", *[names[p] for p in plugins]], rows, width=width))
    out.extend(wrap_words([f"{names[p]} = {p}" for p in plugins if names[p] != p], width, "  "))
    return out


def _score_matrix(d: Mapping[str, Any], width: int) -> list[str]:
    plugins = [p["name"] for p in d["scorePlugins"]]
    weights = {p["name"]: p["weight"] for p in d["scorePlugins"]}
    names = short_names(plugins)
    ties = set(d["result"].get("ties") or ())
    out = ["Scores of feasible nodes (weighted = normalised 0-100 x weight), highest first"]
    rows = []
    for s in d["scores"]:
        by = {p["plugin"]: p["weighted"] for p in s["plugins"]}
        mark = "*" if s["node"] in ties else ""
        rows.append([s["node"], mark, s["total"], *[by.get(p, "-") for p in plugins]])
    right = range(2, 3 + len(plugins))
    out.extend(table(["NODE", "", "TOTAL", *[names[p] for p in plugins]], rows, right=right, width=width))
    legend = [f"{names[p]} = {p} x{weights[p]}" for p in plugins]
    if any("-" in r[3:] for r in rows):
        legend.insert(0, "- skipped (PreScore: nothing to score)")
    out.extend(wrap_words(["* top score", *legend], width, "  "))
    return out


# -- simulate ---------------------------------------------------------------------------------------


def _usage_cell(before: Mapping[str, Any], after: Mapping[str, Any], count: bool = False) -> str:
    if count:
        return f"{before['requested']}/{before['allocatable']} -> {after['requested']}/{after['allocatable']}"
    return f"{_pct(before)} -> {_pct(after)}"


def _pct(u: Mapping[str, Any]) -> str:
    p = u.get("percent")
    return "n/a" if p is None else f"{p:.0f}%"


def simulation_text(d: Mapping[str, Any], *, width: int = WIDTH) -> str:
    """The human view of a simulation: placements, the pods not placed and why, utilisation."""
    out = _simulation_summary(d, width)
    if d["placements"]:
        out.extend(_placements_table(d["placements"], width))
    out.extend(_pod_messages("Unschedulable", d["unschedulablePods"], width))
    out.extend(_pod_messages("Gated (held back by PreEnqueue: never attempted)", d.get("gatedPods"), width))
    if d.get("groups"):
        out.extend(_groups_table(d["groups"], width))
    out.extend(
        _pod_messages("Waiting at Permit (assumed, not bound, when the simulation ended)", d.get("waitingPods"), width)
    )
    if d.get("preempted"):
        out.append("")
        out.append("Preempted (evicted to make room for a higher-priority pod)")
        out.extend(table(["POD", "NODE", "FOR"], [[p["pod"], p["node"], p["by"]] for p in d["preempted"]], width=width))
    out.extend(_pod_messages("Errors", d["errorPods"], width))
    out.extend(_utilisation_table(d["utilisation"], width))
    out.extend(_note_lines(d, width))
    return "\n".join(out) + "\n"


def _simulation_summary(d: Mapping[str, Any], width: int) -> list[str]:
    s = d["summary"]
    return wrap_text(
        f"Simulated {plural(s['pods'], 'pod')} on {plural(s['nodes'], 'node')} ({d['cluster']}), "
        f"profile {d['profile']}, seed {d['seed']}: {s['placed']} placed, {s['unschedulable']} unschedulable"
        + (f", {s['errors']} errors" if s["errors"] else "")
        + (f", {s.get('preempted', 0)} preempted" if s.get("preempted") else "")
        + (f", {s['gated']} gated" if s.get("gated") else "")
        + (f", {s['waiting']} waiting" if s.get("waiting") else ""),
        width,
    )


def _placements_table(placements: Sequence[Mapping[str, Any]], width: int) -> list[str]:
    out = ["", "Placements (in the order the scheduler placed them)"]
    rows = []
    for p in placements:
        note = []
        if len(p["ties"]) > 1:
            note.append(f"tie of {len(p['ties'])}")
        if p["attempts"] > 1:
            note.append(f"attempt {p['attempts']}")
        rows.append([p["order"], p["pod"], p["node"], "" if p["score"] is None else p["score"], ", ".join(note)])
    out.extend(table(["#", "POD", "NODE", "SCORE", "NOTE"], rows, right=(0, 3), shrink=1, width=width))
    return out


def _pod_messages(title: str, pods: Sequence[Mapping[str, Any]] | None, width: int) -> list[str]:
    """A titled list of pods, each with its message below it (nothing when there are none)."""
    if not pods:
        return []
    out = ["", title]
    for u in pods:
        tries = u.get("attempts", 0)
        out.append(f"  {u['pod']}" + (f" (after {tries} attempts)" if tries > 1 else ""))
        out.extend(wrap_text(u["message"], width, "      "))
    return out


def _groups_table(groups: Sequence[Mapping[str, Any]], width: int) -> list[str]:
    out = ["", "Pod groups (all or nothing: a gang is placed whole or not at all)"]
    rows = [
        [
            g["key"],
            g["api"],
            "-" if g["minCount"] is None else g["minCount"],
            f"{g['placed']}/{g['members']}",
            g["result"],
        ]
        for g in groups
    ]
    out.extend(table(["GROUP", "API", "MIN", "PLACED", "RESULT"], rows, right=(2, 3), shrink=0, width=width))
    for g in (g for g in groups if g["message"]):
        out.append(f"  {g['key']}")
        out.extend(wrap_text(g["message"], width, "      "))
    return out


def _utilisation_table(usages: Sequence[Mapping[str, Any]], width: int) -> list[str]:
    """Each node's requests before -> after; lines too long for ``width`` are cut in the middle."""
    out = ["", "Node utilisation (requested / allocatable, before -> after)"]
    rows = []
    has_ext = any(u["after"].get("extended") for u in usages)
    for u in usages:
        b, a = u["before"], u["after"]
        row = [
            u["node"],
            _usage_cell(b["cpu"], a["cpu"]),
            _usage_cell(b["memory"], a["memory"]),
            _usage_cell(b["pods"], a["pods"], count=True),
        ]
        if has_ext:
            row.append(
                "; ".join(
                    f"{name} {_usage_cell(b['extended'].get(name, v), v, count=True)}"
                    for name, v in sorted(a.get("extended", {}).items())
                )
            )
        rows.append(row)
    headers = ["NODE", "CPU", "MEMORY", "PODS"] + (["EXTENDED"] if has_ext else [])
    lines = table(headers, rows, width=width * 10)
    out.extend(ln if len(ln) <= width else ellipsize(ln, width) for ln in lines)
    return out


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:16px;color:#1f2328}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}svg{max-width:100%;height:auto}p{overflow-wrap:anywhere}
table{border-collapse:collapse;font-size:13px;display:block;max-width:100%;overflow-x:auto}
td,th{padding:3px 10px;border-bottom:1px solid #d8dee4;text-align:left}
th{background:#f6f8fa}td.num{text-align:right}.muted{color:#656d76}.bad{color:#b42318}
.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 14px;vertical-align:middle}
"""

_BEFORE, _AFTER, _TRACK, _OVER = "#9ecae1", "#2171b5", "#eef1f4", "#b42318"
_ATTEMPTS = "<th>Attempts</th>"


def simulation_html(d: Mapping[str, Any]) -> str:
    """A standalone page: utilisation bar charts (inline SVG) and the placement tables."""
    e = html.escape
    s = d["summary"]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>custom-scheduler simulation</title>',
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{_CSS}</style></head><body>',
        "<h1>Simulation</h1>",
        f"<p>{e(d['cluster'])} · profile <b>{e(str(d['profile']))}</b> · seed {e(str(d['seed']))} · "
        f"{s['pods']} pods on {s['nodes']} nodes: <b>{s['placed']} placed</b>, "
        f'<span class="{"bad" if s["unschedulable"] else "muted"}">{s["unschedulable"]} unschedulable</span>'
        + (f', <span class="bad">{s["errors"]} errors</span>' if s["errors"] else "")
        + (f', <span class="muted">{s["gated"]} gated</span>' if s.get("gated") else "")
        + "</p>",
        "<h2>Node utilisation (requested / allocatable)</h2>",
        f'<p class="legend"><span style="background:{_BEFORE}"></span>before'
        f'<span style="background:{_AFTER}"></span>added by the simulated pods'
        f'<span style="background:{_OVER}"></span>over 100%</p>',
        _utilisation_svg(d["utilisation"]),
    ]
    if d["placements"]:
        parts.append(
            "<h2>Placements</h2><table><tr><th>#</th><th>Pod</th><th>Node</th><th>Score</th>"
            "<th>Ties</th><th>Attempts</th></tr>"
        )
        for p in d["placements"]:
            parts.append(
                f'<tr><td class="num">{p["order"]}</td><td>{e(p["pod"])}</td><td>{e(p["node"])}</td>'
                f'<td class="num">{"" if p["score"] is None else p["score"]}</td>'
                f"<td>{e(', '.join(p['ties'])) if len(p['ties']) > 1 else ''}</td>"
                f'<td class="num">{p["attempts"]}</td></tr>'
            )
        parts.append("</table>")
    if d.get("groups"):
        parts.append(
            "<h2>Pod groups</h2><table><tr><th>Group</th><th>API</th><th>minCount</th><th>Placed</th>"
            "<th>Result</th><th>Message</th></tr>"
        )
        for g in d["groups"]:
            parts.append(
                f"<tr><td>{e(g['key'])}</td><td>{e(g['api'])}</td>"
                f'<td class="num">{"" if g["minCount"] is None else g["minCount"]}</td>'
                f'<td class="num">{g["placed"]}/{g["members"]}</td><td>{e(g["result"])}</td>'
                f"<td>{e(g['message'])}</td></tr>"
            )
        parts.append("</table>")
    if d.get("preempted"):
        parts.append("<h2>Preempted</h2><table><tr><th>Pod</th><th>Node</th><th>For</th></tr>")
        parts.extend(
            f"<tr><td>{e(p['pod'])}</td><td>{e(p['node'])}</td><td>{e(p['by'])}</td></tr>" for p in d["preempted"]
        )
        parts.append("</table>")
    for title, key in (
        ("Unschedulable pods", "unschedulablePods"),
        ("Gated pods (never attempted)", "gatedPods"),
        ("Waiting at Permit", "waitingPods"),
        ("Errors", "errorPods"),
    ):
        if d.get(key):
            # An Attempts column where the document counts them (gated pods were never attempted).
            n = [f'<td class="num">{u["attempts"]}</td>' if "attempts" in u else "" for u in d[key]]
            parts.append(f"<h2>{title}</h2><table><tr><th>Pod</th><th>Reason</th>{_ATTEMPTS * any(n)}</tr>")
            rows = zip(d[key], n, strict=True)
            parts.extend(f"<tr><td>{e(u['pod'])}</td><td>{e(u['message'])}</td>{c}</tr>" for u, c in rows)
            parts.append("</table>")
    for note in d.get("notes") or ():
        parts.append(f'<p class="muted">{e(note)}</p>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _utilisation_svg(usages: Sequence[Mapping[str, Any]]) -> str:
    metrics = [("cpu", "CPU"), ("memory", "Memory"), ("pods", "Pods")]
    ext = sorted({name for u in usages for name in u["after"].get("extended", {})})
    label_w, bar_w, gap, row_h, top = 230, 200, 70, 26, 24
    cols = [(k, t, False) for k, t in metrics] + [(n, n, True) for n in ext]
    width = label_w + len(cols) * (bar_w + gap)
    height = top + row_h * len(usages) + 8
    e = html.escape
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="system-ui,sans-serif" font-size="12" role="img" '
        'aria-label="node utilisation before and after the simulation">'
    ]
    for j, (_, title, _ext) in enumerate(cols):
        x = label_w + j * (bar_w + gap)
        out.append(f'<text x="{x}" y="14" font-weight="bold">{e(title)}</text>')
    for i, u in enumerate(usages):
        y = top + i * row_h
        out.append(f'<text x="0" y="{y + 14}">{e(ellipsize(u["node"], 34))}</text>')
        for j, (key, _title, is_ext) in enumerate(cols):
            x = label_w + j * (bar_w + gap)
            if is_ext:
                b = u["before"].get("extended", {}).get(key)
                a = u["after"].get("extended", {}).get(key)
            else:
                b, a = u["before"][key], u["after"][key]
            out.append(f'<rect x="{x}" y="{y + 3}" width="{bar_w}" height="14" fill="{_TRACK}"/>')
            if a is None or a.get("percent") is None:
                out.append(f'<text x="{x + 4}" y="{y + 14}" fill="#656d76">n/a</text>')
                continue
            pa = float(a["percent"])
            pb = float(b["percent"]) if b and b.get("percent") is not None else 0.0
            wa = bar_w * min(pa, 100.0) / 100
            wb = bar_w * min(pb, 100.0) / 100
            color = _OVER if pa > 100 else _AFTER
            out.append(
                f'<rect x="{x}" y="{y + 3}" width="{wa:.1f}" height="14" fill="{color}">'
                f"<title>{e(u['node'])} {e(key)}: {pb:.0f}% before, {pa:.0f}% after</title></rect>"
            )
            out.append(f'<rect x="{x}" y="{y + 3}" width="{wb:.1f}" height="14" fill="{_BEFORE}"/>')
            out.append(f'<text x="{x + bar_w + 4}" y="{y + 14}">{pa:.0f}%</text>')
    out.append("</svg>")
    return "\n".join(out)
