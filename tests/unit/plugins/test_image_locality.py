"""ImageLocality: kube-scheduler's image-spread table, plus v1.30's counting of init containers."""

from __future__ import annotations

from typing import Any

import pytest

from custom_scheduler.framework.types import CycleState
from custom_scheduler.plugins import image_locality
from tests.builders import NodeBuilder, PodBuilder, make_node
from tests.unit.plugins.support import bare, fake_handle, node_info, with_images

MB = 1024 * 1024


def pod_images(*images: str, init: tuple[str, ...] = ()) -> PodBuilder:
    b = bare()
    b.spec["containers"] = [{"name": f"c{i}", "image": img} for i, img in enumerate(images)]
    if init:
        b.spec["initContainers"] = [{"name": f"i{i}", "image": img} for i, img in enumerate(init)]
    return b


def node_images(name: str, *images: tuple[tuple[str, ...], int]) -> NodeBuilder:
    """Images as (names, size in MiB); each name of one image shares its size."""
    b = make_node(name)
    for names, size in images:
        for n in names:
            b.image(n, size * MB)
    return b


N_40_300_2000 = (
    (("gcr.io/40:latest", "gcr.io/40:v1"), 40),
    (("gcr.io/300:latest", "gcr.io/300:v1"), 300),
    (("gcr.io/2000:latest",), 2000),
)
N_250_10 = ((("gcr.io/250:latest",), 250), (("gcr.io/10:latest", "gcr.io/10:v1"), 10))
N_600_40_900 = ((("gcr.io/600:latest",), 600), (("gcr.io/40:latest",), 40), (("gcr.io/900:latest",), 900))
N_300_600_900 = ((("gcr.io/300:latest",), 300), (("gcr.io/600:latest",), 600), (("gcr.io/900:latest",), 900))
N_4000_30 = ((("gcr.io/4000:latest",), 4000), (("gcr.io/30:latest",), 30))
N_20_30_40 = ((("gcr.io/20:latest",), 20), (("gcr.io/30:latest",), 30), (("gcr.io/40:latest",), 40))


@pytest.mark.parametrize(
    ("pod", "nodes", "want"),
    [
        # 40M/2 < 23M → 0; 100·(250M/2 − 23M)/(2000M − 23M) = 5.
        pytest.param(
            pod_images("gcr.io/40", "gcr.io/250"),
            [N_40_300_2000, N_250_10],
            [0, 5],
            id="two-images-spread-on-two-nodes-prefer-larger",
        ),
        # 100·((40M + 300M)/2 − 23M)/(2000M − 23M) = 7.
        pytest.param(
            pod_images("gcr.io/40", "gcr.io/300"),
            [N_40_300_2000, N_250_10],
            [7, 0],
            id="two-images-on-one-node",
        ),
        pytest.param(
            pod_images("gcr.io/10", "gcr.io/4000"),
            [N_4000_30, N_250_10],
            [100, 0],
            id="exceeding-max-threshold-is-clamped",
        ),
        # 100·(4000M/3 − 23M)/(2000M − 23M) = 66.
        pytest.param(
            pod_images("gcr.io/10", "gcr.io/4000"),
            [N_4000_30, N_250_10, ()],
            [66, 0, 0],
            id="clamped-with-a-node-without-images",
        ),
        # 100·(600M·2/3 + 900M·2/3 − 23M)/(3000M − 23M) = 32; with 300M·1/3 added: 36.
        pytest.param(
            pod_images("gcr.io/300", "gcr.io/600", "gcr.io/900"),
            [N_600_40_900, N_300_600_900, ()],
            [32, 36, 0],
            id="multiple-large-images",
        ),
        # 100·(30M + 40M/2 − 23M)/(2000M − 23M) = 1.
        pytest.param(
            pod_images("gcr.io/30", "gcr.io/40"),
            [N_20_30_40, N_4000_30],
            [1, 0],
            id="multiple-small-images",
        ),
        # v1.28+: the init container's image counts and raises the container count to 3:
        # 100·(300M/2 + 40M/2 − 23M)/(3000M − 23M) = 4 on the first node.
        pytest.param(
            pod_images("gcr.io/40", "gcr.io/250", init=("gcr.io/300",)),
            [N_40_300_2000, N_250_10],
            [4, 3],
            id="init-container-images-counted",
        ),
        pytest.param(pod_images("gcr.io/40:v1"), [N_40_300_2000, ()], [0, 0], id="small-image-below-min-threshold"),
    ],
)
def test_score(pod: PodBuilder, nodes: list[Any], want: list[int]) -> None:
    infos = with_images(node_info(node_images(f"node{i}", *imgs).build()) for i, imgs in enumerate(nodes))
    pl = image_locality.ImageLocality(None, fake_handle(infos))
    p = pod.build()
    assert [pl.score(CycleState(), p, ni) for ni in infos] == want


def test_pod_images_are_normalised_to_latest() -> None:
    p = pod_images("root", "gcr.io:5000/root", "root:tag", "root@sha256:abc").build()
    assert p.images == ("root:latest", "gcr.io:5000/root:latest", "root:tag", "root@sha256:abc")


@pytest.mark.parametrize(
    ("sum_scores", "containers", "want"),
    [
        pytest.param(0, 1, 0, id="below-min"),
        pytest.param(23 * MB, 1, 0, id="at-min"),
        pytest.param(1000 * MB, 1, 100, id="at-max"),
        pytest.param(5000 * MB, 2, 100, id="above-max"),
        pytest.param(0, 0, 0, id="no-containers"),
    ],
)
def test_calculate_priority(sum_scores: int, containers: int, want: int) -> None:
    assert image_locality.calculate_priority(sum_scores, containers) == want


def test_node_image_names_are_matched_as_reported() -> None:
    """Upstream normalises the pod's image names only: a node reporting ``gcr.io/300`` (no tag) does
    not hold the pod's ``gcr.io/300`` (read as ``gcr.io/300:latest``); one reporting the tag does."""
    untagged = node_images("untagged", (("gcr.io/300",), 300)).build()
    tagged = node_images("tagged", (("gcr.io/300:latest",), 300)).build()
    assert untagged.images == {"gcr.io/300": 300 * MB}
    infos = with_images(node_info(n) for n in (untagged, tagged))
    pl = image_locality.ImageLocality(None, fake_handle(infos))
    p = pod_images("gcr.io/300").build()
    assert [pl.score(CycleState(), p, ni) for ni in infos] == [0, 12]  # 150 MiB spread: (150-23)*100//977


def test_image_volumes_count_as_images() -> None:
    """v1.33+: an image volume's reference is one more image (and one more for the threshold)."""
    b = pod_images("gcr.io/40:v1")
    b.spec["volumes"] = [{"name": "model", "image": {"reference": "gcr.io/model"}}, {"name": "e", "emptyDir": {}}]
    assert b.build().images == ("gcr.io/40:v1", "gcr.io/model:latest")
