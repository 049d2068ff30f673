"""Which pods a DRA event may help: DynamicResources' EventsToRegister, with its hints.

Upstream registers ResourceClaim add/update/delete (hint: only pods that use the claim),
DeviceClass add/update, ResourceSlice add/update (which covers DeviceTaintRule changes: upstream
sees them as updates of the slices they patch), and the pod's own generated-claim status
update (here part of the pod's spec signature, see ``model.PodResourceClaim``). A claim event
matters to the pods in its namespace that name it or that own it (the resourceclaim controller's
claim for a template, before the pod's status names it). A claim delete frees its devices, so it
may help any pod DynamicResources rejected: it moves every one of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from custom_scheduler.api.model import Pod
from custom_scheduler.framework import dra_store as fdra

#: DynamicResources' name, spelled out: core imports no plugin module (a test keeps it equal).
PLUGINS = frozenset({"DynamicResources"})


@dataclass(frozen=True, slots=True)
class Requeue:
    event: str
    plugins: frozenset[str]
    pre_check: Callable[[Pod], bool] | None = None


def _uses_claim(namespace: str, name: str, owner_uid: str) -> Callable[[Pod], bool]:
    def check(pod: Pod) -> bool:
        if pod.namespace != namespace or not pod.resource_claims:
            return False
        return pod.uid == owner_uid or any(rc.claim == name for rc in pod.resource_claims)

    return check


def requeue_for(kind: str, old: Any, new: Any) -> Requeue | None:
    """The queue move for a change of ``kind`` (None: nothing it could help)."""
    if kind == fdra.CLAIM:
        obj = new if new is not None else old
        action = "Add" if old is None else ("Delete" if new is None else "Update")
        if new is None or (old is not None and old.allocation is not None and new.allocation is None):
            # Deleted or deallocated: its devices are free for anyone.
            return Requeue(f"ResourceClaim{action}", PLUGINS)
        return Requeue(f"ResourceClaim{action}", PLUGINS, _uses_claim(obj.namespace, obj.name, obj.owner_uid))
    if kind == fdra.TAINT_RULE:
        # kube-scheduler sees a DeviceTaintRule only through the slices its resourceslice tracker
        # patches: any change of a rule (a delete lifts a taint) is a ResourceSlice update there.
        return Requeue("ResourceSliceUpdate", PLUGINS)
    if new is None:
        return None  # deleted slices and classes make no pod schedulable
    action = "Add" if old is None else "Update"
    return Requeue(f"{kind}{action}", PLUGINS)
