"""DynamicResources' writes to a ResourceClaim (``bindClaim`` and the Unreserve patch), each
update carrying the claim's resourceVersion and retried on a 409 Conflict with a fresh read, as
client-go's ``RetryOnConflict`` does upstream. Kept apart from the plugin's cycle logic: these are
the only API calls PreBind makes for a claim it allocates."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from custom_scheduler.api import dra
from custom_scheduler.framework.clusterapi import ClusterClient
from custom_scheduler.framework.clusterapi import api_errors as kerr
from custom_scheduler.framework.dra_store import DRAStore
from custom_scheduler.plugins import dra_binding

#: Attempts at one claim's update when the API answers 409 Conflict (client-go's DefaultRetry).
CONFLICT_RETRIES = 5


def claim_path(claim: dra.ResourceClaim, status: bool = False) -> str:
    p = f"{dra.API}/namespaces/{claim.namespace}/resourceclaims/{claim.name}"
    return p + "/status" if status else p


def bind_claim(
    client: ClusterClient, claim: dra.ResourceClaim, alloc: dra.Allocation | None, consumer: dra.Consumer
) -> dra.ResourceClaim:
    """``bindClaim``: finalizer (with an allocation), then allocation + reservedFor, retried on
    conflicts with a fresh read; returns the claim as the API server stored it."""
    refresh = False
    for attempt in range(CONFLICT_RETRIES):
        if refresh:
            try:
                claim = dra.resource_claim_from_json(client.get(claim_path(claim)))
            except Exception as e:
                raise RuntimeError(f"get updated claim {claim.key} after conflict: {e}") from e
        refresh = True
        if claim.deleting:
            raise RuntimeError(f"claim {claim.key} got deleted in the meantime")
        try:
            if alloc is not None:
                if claim.allocation is not None:
                    raise RuntimeError(f"claim {claim.key} got allocated elsewhere in the meantime")
                if dra.FINALIZER not in claim.finalizers:
                    claim = add_finalizer(client, claim)
            if claim.reserved_for_pod(consumer.uid) and (alloc is None or claim.allocation is not None):
                return claim
            return add_reservation(client, claim, alloc, consumer)
        except kerr.Conflict:
            if attempt == CONFLICT_RETRIES - 1:
                raise
    raise RuntimeError(f"claim {claim.key}: too many conflicts")


def update_status(
    client: ClusterClient,
    store: DRAStore,
    claim: dra.ResourceClaim,
    change: Callable[[dra.ResourceClaim], dict[str, Any] | None],
) -> None:
    for _ in range(CONFLICT_RETRIES):
        raw = change(claim)
        if raw is None:
            return
        try:
            store.assume_claim(dra.resource_claim_from_json(client.put(claim_path(claim, status=True), raw)))
            return
        except kerr.Conflict:
            claim = dra.resource_claim_from_json(client.get(claim_path(claim)))


def add_finalizer(client: ClusterClient, claim: dra.ResourceClaim) -> dra.ResourceClaim:
    """The claim with the allocation finalizer, as the API server stored it; a 409 Conflict passes
    through (the caller re-reads and retries), any other failure says what failed."""
    raw = copy.deepcopy(claim.raw)
    meta = raw.setdefault("metadata", {})
    meta["finalizers"] = [*(meta.get("finalizers") or ()), dra.FINALIZER]
    try:
        return dra.resource_claim_from_json(client.put(claim_path(claim), raw))
    except kerr.Conflict:
        raise
    except Exception as e:
        raise RuntimeError(f"add finalizer to claim {claim.key}: {e}") from e


def add_reservation(
    client: ClusterClient, claim: dra.ResourceClaim, alloc: dra.Allocation | None, consumer: dra.Consumer
) -> dra.ResourceClaim:
    """The claim's status with ``alloc`` (when given) and ``consumer`` in ``reservedFor``, as the API
    server stored it; a 409 Conflict passes through, as in :func:`_add_finalizer`."""
    raw = copy.deepcopy(claim.raw)
    status = raw.setdefault("status", {})
    if alloc is not None:
        status["allocation"] = alloc.to_json()
    allocation = status.get("allocation")
    if not allocation:
        raise RuntimeError(f"claim {claim.key} got deallocated elsewhere in the meantime")
    # DRADeviceBindingConditions (on): every allocation the scheduler reserves is stamped, binding
    # conditions time out from it.
    allocation.setdefault("allocationTimestamp", dra_binding.now_rfc3339())
    status["reservedFor"] = [*(status.get("reservedFor") or ()), consumer.to_json()]
    try:
        return dra.resource_claim_from_json(client.put(claim_path(claim, status=True), raw))
    except kerr.Conflict:
        raise
    except Exception as e:
        what = "allocation and reservation" if alloc is not None else "reservation"
        raise RuntimeError(f"add {what} to claim {claim.key}: {e}") from e


def without_pod(claim: dra.ResourceClaim, uid: str) -> dict[str, Any] | None:
    if not claim.reserved_for_pod(uid):
        return None
    raw = copy.deepcopy(claim.raw)
    status = raw.setdefault("status", {})
    status["reservedFor"] = [c for c in status.get("reservedFor") or () if c.get("uid") != uid]
    return raw


#: One compiled-expression cache for the process: expressions are the same across profiles and reloads.
