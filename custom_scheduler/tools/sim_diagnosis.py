"""Each simulated pod's node x plugin detail: what the ``ui`` page shows when a pod is clicked.

The daemon's algorithm keeps less than a person drilling into a pod wants: on success its fast
path (``Framework.filter_many`` without ``need_statuses``) does not say why the other nodes were
rejected, and a pod with one feasible node is not scored at all. :class:`DiagnosingAlgorithm` is
that algorithm, deciding exactly as before, plus a record of every attempt: the statuses it
returned or raised (the first failing Filter plugin per node, as the daemon reports it), each
scored node's per-plugin scores and, for the nodes a success left unreported, their Filter verdict
computed afterwards with the same cycle state (Filter plugins only read it). The nodes that pass
then were outside the search (a sample on big clusters), and are reported as not evaluated.
A pod placed on its nominated node without searching (after a preemption) gets no verdicts for
the other nodes: the daemon looked at none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from custom_scheduler.api.model import Pod
from custom_scheduler.core.algorithm import Algorithm, BatchRequest, ScheduleResult
from custom_scheduler.framework.runtime import Framework
from custom_scheduler.framework.types import CycleState, FitError, Snapshot, Status
from custom_scheduler.tools.explain import code_name
from custom_scheduler.tools.simulation_result import NodeDiagnosis, PodDiagnosis

#: ``record(pod, node names, what the algorithm returned or raised, verdicts found afterwards)``
Recorder = Callable[[Pod, Sequence[str], ScheduleResult | FitError, Mapping[str, Status]], None]


def diagnose(
    pod: str, nodes: Sequence[str], found: ScheduleResult | FitError, extra: Mapping[str, Status]
) -> PodDiagnosis:
    """Every node's verdict in one attempt: rejected (with the plugin and its reasons), feasible
    (with each Score plugin's weighted score when the attempt scored), or not evaluated."""
    failed = isinstance(found, FitError)
    scored = {} if isinstance(found, FitError) else {sc.name: sc for sc in found.scores}
    chosen = "" if isinstance(found, FitError) else found.node
    statuses = {**extra, **found.statuses}
    out: list[NodeDiagnosis] = []
    for name in nodes:
        st = statuses.get(name)
        if st is not None and not st.is_success:
            out.append(NodeDiagnosis(name, "rejected", st.plugin, code_name(st.code), list(st.reasons)))
        elif (sc := scored.get(name)) is not None:
            out.append(NodeDiagnosis(name, "feasible", total=sc.total, scores=dict(sc.weighted)))
        else:
            out.append(NodeDiagnosis(name, "feasible" if name == chosen else "not evaluated"))
    if failed:
        note = str(found)
    elif not scored:
        note = f"{chosen}: the only feasible node searched (or the pod's nominated node), so nothing was scored"
    else:
        note = ""
    return PodDiagnosis(pod, out, note)


class DiagnosingAlgorithm(Algorithm):
    """The daemon's algorithm that hands every attempt to ``record`` (see the module docstring).
    It always keeps per-plugin scores: the group cycle otherwise asks only for totals, and the
    pick (one draw among the tied nodes) is the same either way."""

    def __init__(self, base: Algorithm, record: Recorder) -> None:
        super().__init__(base.rng, base.percentage)
        self.next_start = base.next_start
        self._record = record

    def schedule(
        self,
        fwk: Framework,
        state: CycleState,
        pod: Pod,
        snap: Snapshot,
        nominated: Mapping[str, Sequence[Pod]] | None = None,
        *,
        find_all: bool = False,
        detail: bool | None = None,
        batch: BatchRequest | None = None,
    ) -> ScheduleResult:
        del batch  # every pod searched in full: the page shows each node's verdict
        names = [ni.name for ni in snap.node_list]
        try:
            res = super().schedule(fwk, state, pod, snap, nominated, find_all=find_all, detail=True)
        except FitError as fit:
            self._record(pod, names, fit, {})
            raise
        self._record(pod, names, res, self._unreported(fwk, state, pod, snap, nominated or {}, res))
        return res

    @staticmethod
    def _unreported(
        fwk: Framework,
        state: CycleState,
        pod: Pod,
        snap: Snapshot,
        nominated: Mapping[str, Sequence[Pod]],
        res: ScheduleResult,
    ) -> dict[str, Status]:
        """The Filter verdicts of the nodes a success did not report (neither rejected, scored nor
        chosen), with the nominated pods counted as the search counted them."""
        if pod.nominated_node_name and res.node == pod.nominated_node_name and res.evaluated == 1:
            return {}  # taken without a search
        known = set(res.statuses) | {sc.name for sc in res.scores} | {res.node}
        out: dict[str, Status] = {}
        for ni in snap.node_list:
            if ni.name in known:
                continue
            noms = nominated.get(ni.name)
            out[ni.name] = (
                fwk.run_filter_with_nominated(state, pod, ni, noms) if noms else fwk.run_filter(state, pod, ni)
            )
        return out
