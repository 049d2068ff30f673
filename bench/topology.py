"""The topology-gangs workload's cluster shape and its placement checks (issue #28).

A GPU cluster of three nested levels, zone ⊃ block ⊃ rack (then hosts): ``HOSTS_PER_RACK`` nodes
a rack, ``BLOCKS_PER_ZONE`` blocks a zone, ``ZONES`` zones, and as many racks a block as
``n_nodes`` needs (5000 nodes: 4 zones × 5 blocks × 25 racks × 10 hosts). Each gang's PodGroup
requires one block (every member in one) and prefers one rack; the checks here judge where the
members landed, from the final pods and the node labels alone, so both schedulers are judged the
same way:

- **span**: per gang and level, the number of distinct domains its bound members occupy
  (:func:`gang_spans`); a gang "in one rack" spans one rack;
- **tightness**: over the gangs wholly bound, the share inside one domain of each level and the
  mean/max domains spanned (:func:`tightness`);
- **violations**: a gang whose bound members span more than one domain of its required level
  (counted for partly bound gangs too: an all-or-nothing scheduler would never leave those);
- **fragmentation after the run**: stranded GPUs per common request size, computed by
  :func:`custom_scheduler.framework.fragmentation.fragmentation` (what the daemon's metrics and
  ``custom-scheduler defrag`` report), per block (:func:`fragmentation_after`).

Pure functions over JSON objects, unit-tested in tests/unit/bench/test_topology.py.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from custom_scheduler.api.model import node_from_json, pod_from_json
from custom_scheduler.framework.fragmentation import FragmentationConfig, fragmentation
from custom_scheduler.framework.types import NodeInfo

JSON = dict[str, Any]

NAME = "topology-gangs"
ZONE = "topology.kubernetes.io/zone"
BLOCK = "bench.custom-scheduler.io/block"
RACK = "bench.custom-scheduler.io/rack"
HOST = "kubernetes.io/hostname"
#: The hierarchy, widest first (GangScheduling's ``topologyLevels``).
LEVELS: tuple[str, ...] = (ZONE, BLOCK, RACK)
#: The level every gang requires (upstream's ``schedulingConstraints.topology[0].key``) and the one
#: it prefers (our ``custom-scheduler.io/topology-preferred`` annotation; upstream has no field).
REQUIRED = BLOCK
PREFERRED = RACK
#: Levels a span is reported for, widest first (hosts too: how many nodes a gang uses).
SPAN_LEVELS: tuple[str, ...] = (*LEVELS, HOST)

ZONES = 4
BLOCKS_PER_ZONE = 5
HOSTS_PER_RACK = 10
GPUS_PER_NODE = 8
GPU = "nvidia.com/gpu"
#: Gang sizes (members) and how often each is drawn: most gangs small, a few of 64 and 128.
GANG_SIZES: tuple[tuple[int, int], ...] = ((8, 8), (16, 5), (32, 3), (64, 2), (128, 1))
#: GPUs a member may ask for; a gang draws one size so that, but for the 128s, it fits a rack.
MEMBER_GPUS: tuple[int, ...] = (1, 2, 4, 8)
#: The request sizes fragmentation is reported for.
FRAG_SIZES: tuple[int, ...] = (1, 2, 4, 8)


def racks_per_block(n_nodes: int) -> int:
    """Racks a block so that ``ZONES × BLOCKS_PER_ZONE`` blocks of racks of ``HOSTS_PER_RACK``
    hold ``n_nodes`` (at least one)."""
    return max(1, math.ceil(n_nodes / (ZONES * BLOCKS_PER_ZONE * HOSTS_PER_RACK)))


def node_levels(i: int, n_nodes: int) -> dict[str, str]:
    """Zone, block and rack labels of node ``i``: hosts fill a rack, racks a block, blocks a zone."""
    rack = i // HOSTS_PER_RACK
    block = rack // racks_per_block(n_nodes)
    zone = block // BLOCKS_PER_ZONE
    return {ZONE: f"z{zone}", BLOCK: f"z{zone}-b{block}", RACK: f"z{zone}-b{block}-r{rack}"}


def gang_shapes(n_pods: int, n_nodes: int, seed: int) -> list[tuple[int, int]]:
    """(members, GPUs per member) of each gang, about ``n_pods`` members in all (never more).

    A size larger than a block's GPUs is never drawn (a smoke-size cluster has small blocks); GPUs
    per member are drawn among those that keep a gang within one rack's GPUs (the 128s, and any
    size too large for that, take 1)."""
    rng = random.Random(seed)
    block_gpus = racks_per_block(n_nodes) * HOSTS_PER_RACK * GPUS_PER_NODE
    rack_gpus = HOSTS_PER_RACK * GPUS_PER_NODE
    sizes = [(s, w) for s, w in GANG_SIZES if s <= block_gpus] or [(min(s for s, _ in GANG_SIZES), 1)]
    out: list[tuple[int, int]] = []
    left = n_pods
    while True:
        fitting = [(s, w) for s, w in sizes if s <= left]
        if not fitting:
            return out
        size = rng.choices([s for s, _ in fitting], weights=[w for _, w in fitting])[0]
        gpus = [g for g in MEMBER_GPUS if size * g <= rack_gpus] or [1]
        out.append((size, rng.choice(gpus)))
        left -= size


# -- checks -----------------------------------------------------------------------------------------


def gang_spans(
    members: Mapping[str, Sequence[str]],
    node_of: Mapping[str, str],
    labels_of: Mapping[str, Mapping[str, str]],
    levels: Sequence[str] = SPAN_LEVELS,
) -> dict[str, dict[str, int]]:
    """Per gang, per level: distinct domains its *bound* members occupy (0 when none is bound).
    A member bound to a node without the level's label counts as a domain of its own ("" value),
    so it is never hidden inside a labelled one."""
    out: dict[str, dict[str, int]] = {}
    for gang, names in members.items():
        nodes = [node_of[n] for n in names if node_of.get(n)]
        out[gang] = {lvl: len({(labels_of.get(node) or {}).get(lvl, "") for node in nodes}) for lvl in levels}
    return out


def tightness(
    spans: Mapping[str, Mapping[str, int]],
    whole: Iterable[str],
    *,
    levels: Sequence[str] = SPAN_LEVELS,
    required: str = REQUIRED,
) -> dict[str, Any]:
    """Tightness over the wholly bound gangs (``whole``) and the required-level violations over all.

    Per level: ``one_<short>_share`` (gangs inside one domain / gangs wholly bound; NaN when none
    is), ``mean_<short>s`` and ``max_<short>s`` (domains spanned). ``split_required``: gangs, whole
    or not, whose bound members span more than one domain of ``required``."""
    done = [g for g in whole if g in spans]
    out: dict[str, Any] = {"gangs_whole": len(done)}
    for lvl in levels:
        short = short_name(lvl)
        counts = [spans[g][lvl] for g in done]
        out[f"one_{short}_share"] = sum(1 for c in counts if c == 1) / len(counts) if counts else math.nan
        out[f"mean_{short}s"] = sum(counts) / len(counts) if counts else math.nan
        out[f"max_{short}s"] = max(counts, default=0)
    out["split_required"] = sum(1 for s in spans.values() if s.get(required, 0) > 1)
    return out


def short_name(level: str) -> str:
    """``bench.custom-scheduler.io/rack`` -> ``rack``; ``kubernetes.io/hostname`` -> ``host``."""
    name = level.rsplit("/", 1)[-1]
    return "host" if name == "hostname" else name


def fragmentation_after(
    nodes: Sequence[JSON], pods: Iterable[JSON], *, domain_label: str = BLOCK, sizes: Sequence[int] = FRAG_SIZES
) -> dict[str, Any]:
    """Free and stranded GPUs left by the bound ``pods`` on ``nodes`` (framework/fragmentation.py's
    definitions); ``blocks_hosting_<S>`` counts the domains whose largest free node still takes an
    ``S``-GPU pod, ``free_in_whole_nodes`` the GPUs on nodes left wholly free."""
    infos: dict[str, NodeInfo] = {n["metadata"]["name"]: NodeInfo(node_from_json(n)) for n in nodes}
    for p in pods:
        ni = infos.get(p["spec"].get("nodeName") or "")
        if ni is not None:
            ni.add_pod(pod_from_json(p))
    cfg = FragmentationConfig(resources=(GPU,), sizes=tuple(sizes), domain_label=domain_label)
    (frag,) = fragmentation(infos.values(), cfg)
    whole_free = sum(
        GPUS_PER_NODE for ni in infos.values() if ni.node is not None and not ni.requested.scalar.get(GPU, 0)
    )
    out: dict[str, Any] = {
        "capacity": frag.capacity,
        "free": frag.free,
        "largest_free_block": frag.largest_free_block,
        "free_in_whole_nodes": whole_free,
        "stranded": {str(s): frag.stranded[s] for s in sizes},
        "hostable": {str(s): frag.hostable[s] for s in sizes},
    }
    for s in sizes:
        out[f"blocks_hosting_{s}"] = sum(1 for d in frag.domains.values() if d.largest_free_block >= s)
    return out


def report(members: Mapping[str, Sequence[str]], nodes: Sequence[JSON], pods: Sequence[JSON]) -> dict[str, Any]:
    """The workload's topology section from the final pods: tightness (over the gangs whose every
    member is bound), violations and fragmentation after the run."""
    labels_of = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in nodes}
    node_of = {p["metadata"]["name"]: p["spec"].get("nodeName") or "" for p in pods}
    spans = gang_spans(members, node_of, labels_of)
    whole = [g for g, names in members.items() if names and all(node_of.get(n) for n in names)]
    out = tightness(spans, whole)
    out["fragmentation"] = fragmentation_after(nodes, pods)
    return out
