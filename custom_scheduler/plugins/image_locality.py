"""ImageLocality: prefer nodes that already hold the pod's images, so it starts sooner.

For each of the pod's images (init containers included since v1.30, image volumes since v1.33;
``Pod.images`` is already normalised to ``name:tag``, while the node's names are matched as reported,
as upstream does) that the node has, add the image size scaled by the fraction of nodes that
have it. The scaling damps "node heating": an image present everywhere gives every node the same small
boost instead of pulling all replicas onto the first node that pulled it.

The sum is clamped to ``[23 MiB, 1000 MiB × number of containers]`` and mapped linearly onto 0–100,
so tiny images do not matter and one huge image cannot dominate. No normalisation step.
``NodeInfo.image_states`` (image → size and node count) is maintained by the cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from custom_scheduler.api.model import Pod
from custom_scheduler.framework import registry
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.types import MAX_NODE_SCORE, CycleState, ImageState, NodeInfo
from custom_scheduler.plugins import signers

NAME = "ImageLocality"

MB = 1024 * 1024
MIN_THRESHOLD = 23 * MB
MAX_CONTAINER_THRESHOLD = 1000 * MB


def scaled_image_score(state: ImageState, total_num_nodes: int) -> int:
    """The image size scaled by how widely the image has spread (float math, as upstream)."""
    spread = state.num_nodes / total_num_nodes
    return int(state.size * spread)


def sum_image_scores(node_info: NodeInfo, images: tuple[str, ...], total_num_nodes: int) -> int:
    states = node_info.image_states
    if not states or total_num_nodes <= 0:
        return 0
    total = 0
    for image in images:
        st = states.get(image)
        if st is not None:
            total += scaled_image_score(st, total_num_nodes)
    return total


def calculate_priority(sum_scores: int, num_containers: int) -> int:
    """Map the clamped image-score sum onto ``0..MAX_NODE_SCORE``."""
    max_threshold = MAX_CONTAINER_THRESHOLD * num_containers
    if sum_scores < MIN_THRESHOLD:
        sum_scores = MIN_THRESHOLD
    elif sum_scores > max_threshold:
        sum_scores = max_threshold
    # Both operands are non-negative except when the pod has no images (numerator 0): floor == trunc.
    return MAX_NODE_SCORE * (sum_scores - MIN_THRESHOLD) // (max_threshold - MIN_THRESHOLD)


class ImageLocality:
    """Score: favour nodes that already have the pod's images."""

    name: ClassVar[str] = NAME

    def __init__(self, args: Any, handle: Handle) -> None:
        del args
        self._handle = handle

    def sign_pod(self, pod: Pod) -> signers.Fragments:
        """What this plugin reads of the pod (opportunistic batching)."""
        return signers.images(pod)

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int:
        if not pod.images:
            return 0
        total_nodes = len(self._handle.snapshot_nodes())
        return calculate_priority(sum_image_scores(node_info, pod.images, total_nodes), len(pod.images))

    def score_batch(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> list[int]:
        """:meth:`score` for every node at once; a node with none of the pod's images scores the
        same as one without images (the clamp's floor), computed once."""
        if not pod.images:
            return [0] * len(nodes)
        total_nodes = len(self._handle.snapshot_nodes())
        n_images = len(pod.images)
        floor = calculate_priority(0, n_images)
        return [
            calculate_priority(sum_image_scores(ni, pod.images, total_nodes), n_images) if ni.image_states else floor
            for ni in nodes
        ]


SPEC = registry.PluginSpec(NAME, factory=ImageLocality, parse_args=registry.no_args)
