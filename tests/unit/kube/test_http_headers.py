"""The header parser the kube client installs gives exactly what ``http.client``'s own gives: the
same headers in order, the same payload, the same errors, on the API server's headers and on
random header blocks (folded lines, lines without a colon, odd names, a block cut off)."""

from __future__ import annotations

import http.client
import io
import types

import hypothesis.strategies as st
import pytest
from hypothesis import example, given, settings

from custom_scheduler.kube import http_headers

API_SERVER = (
    b"Audit-Id: 0b6c3c3e-8a0a-4a27-9d6b-3e5e2f1f7a11\r\nCache-Control: no-cache, private\r\n"
    b'Content-Type: application/json\r\nWarning: 299 - "a"\r\nWarning: 299 - "b"\r\n'
    b'Date: Mon, 07 Dec 2026 02:00:00 GMT\r\nContent-Length: 1234\r\n\r\n{"kind": "Status"}'
)


def _both(raw: bytes) -> list[object]:
    out: list[object] = []
    for parse in (http_headers._STDLIB, http_headers.parse_headers):
        fp = io.BytesIO(raw)
        try:
            msg = parse(fp)
        except http.client.HTTPException as e:
            out.append((type(e), str(e)))
            continue
        out.append((type(msg), msg.items(), msg.get_payload(), [type(d).__name__ for d in msg.defects], fp.read()))
    return out


def test_the_api_servers_headers() -> None:
    std, fast = _both(API_SERVER)
    assert std == fast
    msg = http_headers.parse_headers(io.BytesIO(API_SERVER))
    assert msg.get_all("Warning") == ['299 - "a"', '299 - "b"']
    assert msg["content-length"] == "1234"


LINE = st.one_of(
    st.tuples(
        st.text("abcXYZ-_!~:", min_size=0, max_size=6),
        st.sampled_from([":", ": ", ":\t", " :", ""]),
        st.text("ab c\t:\r\x0b\x0c\x1c\x85\xa0", max_size=6),
    ).map(lambda t: (t[0] + t[1] + t[2]).encode("iso-8859-1")),
    st.sampled_from([b" folded", b"\tfolded", b"From someone", b"\xe9t\xe9: caf\xe9", b"X: a\rb"]),
)


@example([b"X: a\r", b"Y: b"], b"\r\n", b"\r\n")  # a CR before the line end
@settings(max_examples=400, deadline=None)
@given(st.lists(LINE, max_size=6), st.sampled_from([b"\r\n", b"\n"]), st.sampled_from([b"\r\n", b"\n", b""]))
def test_random_header_blocks(lines: list[bytes], eol: bytes, end: bytes) -> None:
    raw = b"".join(line + eol for line in lines) + end + b"body"
    std, fast = _both(raw)
    assert std == fast


def test_limits_raise_as_the_standard_librarys() -> None:
    too_long = b"X: " + b"a" * 70000 + b"\r\n\r\n"
    too_many = b"".join(b"H%d: v\r\n" % i for i in range(120)) + b"\r\n"
    for raw in (too_long, too_many):
        std, fast = _both(raw)
        assert std == fast
        assert isinstance(std, tuple)
        assert issubclass(std[0], http.client.HTTPException)


def test_installed_for_http_client() -> None:
    import custom_scheduler.kube.client  # noqa: F401  # installs it

    assert http.client.parse_headers is http_headers.parse_headers


def test_not_installed_where_the_standard_library_has_no_read_headers() -> None:
    without = types.SimpleNamespace(parse_headers=http_headers._STDLIB)  # a future http.client
    assert http_headers.install(without) is False
    assert without.parse_headers is http_headers._STDLIB
    assert http_headers.install() is True


@pytest.mark.parametrize("message_class", [http.client.HTTPMessage])
def test_the_message_class_is_kept(message_class: type) -> None:
    assert type(http_headers.parse_headers(io.BytesIO(b"A: b\r\n\r\n"), message_class)) is message_class
