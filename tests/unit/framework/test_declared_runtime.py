"""activeDeadlineSeconds as a declared runtime (issue #28 item 3): parsing, and ``declared_end``
taking the earlier of it and the ``expected-runtime`` annotation."""

from __future__ import annotations

from typing import Any

import pytest

from custom_scheduler.api.model import MAX_ACTIVE_DEADLINE
from custom_scheduler.framework import reservations as rv
from tests.builders import make_pod

START = "2026-01-01T00:00:00Z"
T0 = 1767225600.0  # START as a Unix time


@pytest.mark.parametrize(
    ("value", "want"),
    [
        pytest.param(30, 30, id="seconds"),
        pytest.param(1, 1, id="smallest-valid"),
        pytest.param(MAX_ACTIVE_DEADLINE, MAX_ACTIVE_DEADLINE, id="largest-valid"),
        pytest.param(MAX_ACTIVE_DEADLINE + 1, None, id="beyond-int32-undeclared"),
        pytest.param(10**30, None, id="huge-undeclared"),
        pytest.param(0, None, id="zero-undeclared"),
        pytest.param(-5, None, id="negative-undeclared"),
        pytest.param(30.5, None, id="fraction-undeclared"),
        pytest.param(30.0, None, id="float-undeclared"),
        pytest.param("30", None, id="string-undeclared"),
        pytest.param(True, None, id="bool-undeclared"),
        pytest.param(None, None, id="null-undeclared"),
        pytest.param({"seconds": 3}, None, id="object-undeclared"),
    ],
)
def test_active_deadline_parsing_never_fails_the_pod(value: Any, want: int | None) -> None:
    pod = make_pod("p").active_deadline(value).build()
    assert pod.active_deadline_seconds == want


def test_absent_active_deadline_is_undeclared() -> None:
    assert make_pod("p").build().active_deadline_seconds is None


@pytest.mark.parametrize(
    ("annotation", "deadline", "start", "now", "want"),
    [
        pytest.param(None, 30, START, 0.0, T0 + 30, id="deadline-from-start-time"),
        pytest.param(None, 30, None, 100.0, 130.0, id="deadline-not-started-counts-from-now"),
        pytest.param("1m", 30, None, 100.0, 130.0, id="deadline-earlier-than-annotation"),
        pytest.param("10s", 30, None, 100.0, 110.0, id="annotation-earlier-than-deadline"),
        pytest.param("10s", 30, START, 0.0, T0 + 10, id="both-from-start-time"),
        pytest.param("soon", 30, None, 100.0, 130.0, id="bad-annotation-deadline-still-counts"),
        pytest.param("10s", -5, None, 100.0, 110.0, id="bad-deadline-annotation-still-counts"),
        pytest.param(None, -5, None, 100.0, None, id="bad-deadline-alone-declares-nothing"),
        pytest.param(None, 10**30, None, 100.0, None, id="huge-deadline-declares-nothing"),
        pytest.param(None, None, None, 100.0, None, id="neither"),
    ],
)
def test_declared_end_takes_the_earlier_declaration(
    annotation: str | None, deadline: Any, start: str | None, now: float, want: float | None
) -> None:
    b = make_pod("p").req(cpu="1")
    if deadline is not None:
        b = b.active_deadline(deadline)
    if start is not None:
        b = b.start_time(start)
    pod = b.build()
    if annotation is not None:
        pod.annotations[rv.RUNTIME_ANNOTATION] = annotation
    assert rv.declared_end(pod, rv.RUNTIME_ANNOTATION, now) == want
