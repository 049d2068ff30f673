"""DynamicResources' PostFilter: deallocate a claim that keeps the pod from every node.

Upstream (``dynamicresources.go`` PostFilter / ``deallocateOrDeletePodClaims``): when no node fits,
a claim of the pod that is allocated but reserved for nobody (or only for this pod), and that
Filter found unavailable on some node, is deallocated (its ``status.allocation``,
``status.reservedFor`` and ``status.devices`` cleared with an update of the status), so the next
attempt may allocate it where the pod fits. The answer is Unschedulable with ``deallocation of
ResourceClaim completed``, which the framework joins before preemption's reasons:
``... 1 resourceclaim not available on the node. deallocation of ResourceClaim completed,
preemption: 0/2 nodes are available: ...``. The claim's update requeues the pod.

Which claim: upstream ranges over a Go map of the unavailable claims' indices, a random order;
here the cycle's random source shuffles them. One claim per attempt, as upstream.

Upstream's second branch: when no claim was deallocated and the pod's claim for DRA-backed
extended resources exists in the API (left from an earlier attempt: Filter rejects it on every
node), it is deleted (``deletion of ResourceClaim completed``), so the next attempt creates a new
one (:mod:`~custom_scheduler.plugins.dra_extended_claim`).

Upstream writes its state at the very start of PreFilter; when an earlier PreFilter plugin rejected
the pod, DynamicResources' PreFilter never ran and its PostFilter fails reading that state with
``not found``, an Error that ends PostFilter before preemption (kube-scheduler 1.37.2 answers a pod
whose PVC is missing with ``0/1 nodes are available: persistentvolumeclaim "x" not found. not
found``). That is reproduced: the message is upstream's.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Collection, Sequence
from typing import Any

from custom_scheduler.api import dra
from custom_scheduler.api.model import Pod
from custom_scheduler.framework.clusterapi import ClusterClient
from custom_scheduler.framework.dra_store import DRAStore
from custom_scheduler.framework.interface import PostFilterResult
from custom_scheduler.framework.types import Status
from custom_scheduler.plugins import dra_extended_claim

DEALLOCATED = "deallocation of ResourceClaim completed"
#: ``fwk.ErrNotFound``: what reading a missing cycle-state key answers upstream.
STATE_NOT_FOUND = "not found"


def unschedulable(*reasons: str) -> PostFilterResult:
    st = Status.unschedulable(*reasons)
    return PostFilterResult(st, message=st.message)


def error(message: str) -> PostFilterResult:
    return PostFilterResult(Status.as_error(message), message=message)


def _deallocated(claim: dra.ResourceClaim) -> dict[str, Any]:
    raw = copy.deepcopy(claim.raw)
    status = raw.setdefault("status", {})
    for key in ("reservedFor", "allocation", "devices"):
        status.pop(key, None)
    return raw


def deallocate_one(
    claims: Sequence[dra.ResourceClaim],
    unavailable: Collection[int],
    pod: Pod,
    client: ClusterClient | None,
    store: DRAStore,
    rng: random.Random,
    extended: int = -1,
) -> PostFilterResult:
    """``deallocateOrDeletePodClaims``: deallocate one of the ``unavailable`` claims (indices in
    ``claims``) reserved for nobody or only for ``pod``, else delete the extended-resource claim
    ``claims[extended]`` when it exists in the API; Unschedulable either way, with
    :data:`DEALLOCATED` or :data:`dra_extended_claim.DELETED` when something was done."""
    order = sorted(unavailable)
    rng.shuffle(order)
    ext = claims[extended] if extended >= 0 else None
    real_ext = ext is not None and not dra_extended_claim.is_special(ext)
    for index in order:
        claim = claims[index]
        if index == extended:
            if real_ext:
                break
            continue
        rf = claim.reserved_for
        if rf and not (len(rf) == 1 and rf[0].uid == pod.uid):
            continue
        if client is None:
            return unschedulable()  # offline (explain, simulate): nothing may be written
        path = f"{dra.API}/namespaces/{claim.namespace}/resourceclaims/{claim.name}/status"
        try:
            updated = client.put(path, _deallocated(claim))
        except Exception as e:
            return error(str(e))
        store.assume_claim(dra.resource_claim_from_json(updated))
        return unschedulable(DEALLOCATED)
    if ext is not None and real_ext:
        if client is None:
            return unschedulable()
        try:
            dra_extended_claim.delete(client, ext, store)
        except Exception as e:
            return error(str(e))
        return unschedulable(dra_extended_claim.DELETED)
    return unschedulable()
