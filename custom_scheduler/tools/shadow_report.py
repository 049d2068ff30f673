"""``shadow-report``: how often a shadow (``run --dry-run``) chose the node the pod really got.

Read from the shadow's decision record ring (the same store as ``why``, not the shadow's HTTP
port): the comparisons survive the shadow's restarts, need no port-forward to one replica, and
cover as long a span as the ring holds. Per profile: agree / disagree / shadow-unschedulable /
missed counts and the agreement rate; then the pods the shadow would have placed otherwise, each
with why it preferred its node (the plugin scores that differed on the two nodes, or the real node
being infeasible for it).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from custom_scheduler.core import decision_record as dr
from custom_scheduler.core.decision_store import RingConfig, read_ring
from custom_scheduler.tools.plumbing import EXIT_OK, ToolError, run_command
from custom_scheduler.tools.report import table
from custom_scheduler.tools.why import render, ring_of, when

Entry = dict[str, Any]


def shadow_report(
    entries: Sequence[Entry], cfg: RingConfig, *, profile: str | None = None, limit: int = 50
) -> dict[str, Any]:
    """The report as data: per profile counts and rate, and the last ``limit`` disagreements."""
    by_profile = dr.agreement(entries)
    if profile is not None:
        by_profile = {k: v for k, v in by_profile.items() if k == profile}
    profiles = []
    for name, pa in by_profile.items():
        rate = pa.agreement
        profiles.append(
            {
                "profile": name,
                "compared": pa.compared,
                **{r: pa.counts[r] for r in dr.SHADOW_RESULTS},
                "agreement": round(rate, 4) if rate is not None else None,
                "otherwise": pa.disagreements[-limit:] if limit > 0 else pa.disagreements,
            }
        )
    compared = sum(1 for e in entries if e.get("e") == "shadow")
    return {
        "record": f"{cfg.namespace}/{cfg.name}",
        "comparisons": compared,
        "recordedSince": when(entries[0].get("t")) if entries else None,
        "profiles": profiles,
    }


def shadow_text(rep: Mapping[str, Any]) -> str:
    if not rep["profiles"]:
        return (
            f"No shadow comparisons in {rep['record']}: no shadow (run --dry-run) records there, none of "
            "its pods was bound yet, or the entries left the ring.\n"
        )
    out = [f"Shadow record {rep['record']}: {rep['comparisons']} comparisons since {rep['recordedSince']}"]
    rows = []
    for p in rep["profiles"]:
        rate = "-" if p["agreement"] is None else f"{100 * p['agreement']:.1f}%"
        rows.append([p["profile"], p["compared"], *(p[r] for r in dr.SHADOW_RESULTS), rate])
    heads = ("PROFILE", "COMPARED", "AGREE", "DISAGREE", "SHADOW-UNSCHEDULABLE", "MISSED", "AGREEMENT")
    out += table(heads, rows, right=range(1, 7))
    other = [(p["profile"], e) for p in rep["profiles"] for e in p["otherwise"]]
    if other:
        out.append("Pods the shadow would have placed otherwise:")
        rows = [
            [when(e.get("t")), prof, str(e.get("k")), str(e.get("n") or "-"), str(e.get("real")), str(e.get("why"))]
            for prof, e in other
        ]
        out += table(("TIME", "PROFILE", "POD", "SHADOW", "REAL", "WHY"), rows, shrink=5, width=200)
    return "\n".join(out) + "\n"


def cmd_shadow_report(args: argparse.Namespace) -> int:
    def work() -> int:
        from custom_scheduler.tools.live_cluster import connect

        if args.limit < 0:
            raise ToolError("--limit must be 0 (all) or more")
        cfg = ring_of(args.record, shadow=True)
        rep = shadow_report(read_ring(connect(args.kubeconfig), cfg), cfg, profile=args.profile, limit=args.limit)
        print(render(rep, args.output, shadow_text(rep)), end="")
        return EXIT_OK

    got = run_command("shadow-report", work)
    return got.code if isinstance(got, ToolError) else got
