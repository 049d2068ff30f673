"""Preemption's extender step (upstream's ``Evaluator.callExtenders``): after the dry run, the
extenders that support preemption and are interested in the pod may drop candidate nodes or
change their victims, before one candidate is picked.

The extenders speak in nodes → (victim pods, PDB violations)
(:meth:`~custom_scheduler.framework.extender.Extenders.process_preemption`); this module converts
the dry run's :class:`~custom_scheduler.plugins.preemption.selection.Candidate` list to that and
back. The candidates keep the dry run's order (upstream rebuilds them from a map, in no order; the
choice among them does not depend on it except for a full tie).
"""

from __future__ import annotations

from collections.abc import Sequence

from custom_scheduler.api.model import Pod
from custom_scheduler.framework.extender import extenders_of
from custom_scheduler.framework.interface import Handle
from custom_scheduler.plugins.preemption.selection import Candidate, Victims

__all__ = ["call_extenders"]


def call_extenders(handle: Handle, pod: Pod, candidates: Sequence[Candidate]) -> list[Candidate]:
    """The candidates the extenders leave (all of them when none is configured or interested).

    Raises:
        ExtenderError: a non-ignorable extender failed, or answered with a node or pod the
            scheduler does not have.
    """
    exts = extenders_of(handle)
    if not any(e.cfg.preempt_verb and e.is_interested(pod) for e in exts):
        return list(candidates)
    victims = {c.node: (c.victims.pods, c.victims.num_pdb_violations) for c in candidates}
    got = exts.process_preemption(pod, victims, handle.get_node)
    order = [c.node for c in candidates if c.node in got] + [n for n in got if n not in victims]
    return [Candidate(node, Victims(tuple(got[node][0]), got[node][1])) for node in order]
