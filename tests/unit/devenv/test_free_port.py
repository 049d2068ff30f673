"""free_port hands out listening ports that outgoing connections cannot take in the meantime."""

from __future__ import annotations

import socket

import pytest

from custom_scheduler.devenv import controlplane
from custom_scheduler.devenv.controlplane import free_port


def test_ports_are_below_the_ephemeral_range_distinct_and_bindable() -> None:
    low, _ = controlplane._ephemeral_range()
    ports = [free_port() for _ in range(20)]
    assert len(set(ports)) == 20
    for port in ports:
        assert port < low
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", port))


def test_a_port_someone_listens_on_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy = taken.getsockname()[1]
    try:
        monkeypatch.setattr(controlplane, "_LISTEN_PORTS", (busy, busy + 1))  # the only candidate is busy
        monkeypatch.setattr(controlplane, "_ephemeral_range", lambda: (1, 2))
        monkeypatch.setattr(controlplane, "_handed_out", set())
        assert free_port() != busy  # the kernel's pick, as a last resort
    finally:
        taken.close()
