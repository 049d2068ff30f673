"""``ControlPlane(node_lifecycle=...)``: which controllers and flags kube-controller-manager gets.

Why a unit test: the session's control plane turns node-lifecycle on and every other user (demo,
benchmarks, playground) leaves it off; a slip either way shows only as Nodes tainted unreachable
minutes into a run, so the command line is pinned here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from custom_scheduler.devenv.controlplane import (
    ADMIN_TOKEN_USER,
    CONTROLLERS,
    NODE_LIFECYCLE_CONTROLLERS,
    ControlPlane,
)

NODE_FLAGS = ("--node-monitor-grace-period=", "--node-startup-grace-period=", "--node-monitor-period=")


def _args(tmp_path: Path, **kw: object) -> list[str]:
    cp = ControlPlane(tmp_path / "bin", workdir=tmp_path, **kw)  # type: ignore[arg-type]
    cp.tokens[ADMIN_TOKEN_USER] = "token"
    cp.version = "1.37.2"
    return cp._controller_manager_args()


def _controllers(args: list[str]) -> list[str]:
    (flag,) = [a for a in args if a.startswith("--controllers=")]
    return flag.removeprefix("--controllers=").split(",")


@pytest.mark.parametrize(
    ("kw", "want_controllers", "want_node_flags"),
    [
        ({}, list(CONTROLLERS), False),
        ({"node_lifecycle": True}, [*CONTROLLERS, *NODE_LIFECYCLE_CONTROLLERS], True),
        # Named by the caller already: not twice.
        (
            {"node_lifecycle": True, "controllers": ("job-controller", "node-lifecycle-controller")},
            ["job-controller", "node-lifecycle-controller", "taint-eviction-controller"],
            True,
        ),
        # Only node-lifecycle: kube-controller-manager still starts, for it alone.
        ({"node_lifecycle": True, "controllers": ()}, list(NODE_LIFECYCLE_CONTROLLERS), True),
    ],
)
def test_node_lifecycle_adds_its_controllers_and_flags_only_when_asked(
    tmp_path: Path, kw: dict[str, object], want_controllers: list[str], want_node_flags: bool
) -> None:
    args = _args(tmp_path, **kw)
    assert _controllers(args) == want_controllers
    assert all(any(a.startswith(f) for a in args) for f in NODE_FLAGS) == want_node_flags
    assert any(any(a.startswith(f) for a in args) for f in NODE_FLAGS) == want_node_flags
