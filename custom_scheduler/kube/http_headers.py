"""HTTP response headers parsed without the email package, for every ``http.client`` user.

Why: every API request (a Binding, an Event, a status PATCH) ends in ``http.client.parse_headers``,
which hands the header block to ``email.parser``: about 60 µs for the API server's seven headers,
and in the EventHandling benchmarks, where thousands of pods each cost an Event and a status
PATCH, 9 % of the daemon's CPU. The header lines the API server (and any HTTP/1.1 server) sends
are ``Name: value`` each; for those this module builds the same ``HTTPMessage`` directly (4 µs).
Anything else (a folded continuation line, a line without a colon, a header block cut off by the
end of the stream) goes to the standard library's parser with the same bytes, so the answer is
always the standard library's: a property test compares the two on random header blocks.

:func:`install` replaces ``http.client.parse_headers`` (looked up there by ``HTTPResponse.begin``
and ``http.server``) once per process; the kube client installs it when imported.
"""

from __future__ import annotations

import email.message
import email.parser
import http.client
import re
from typing import BinaryIO

#: The characters email's feed parser accepts in a header name: printable ASCII but space and ':'.
_NAME = re.compile(r"[\x21-\x39\x3b-\x7e]+\Z")
_END = (b"\r\n", b"\n")
_STDLIB = http.client.parse_headers


def parse_headers(fp: BinaryIO, _class: type[email.message.Message] = http.client.HTTPMessage) -> email.message.Message:
    """``http.client.parse_headers``: the same limits and errors (it reads with the standard
    library's ``_read_headers``), the same message."""
    lines: list[bytes] = http.client._read_headers(fp)  # type: ignore[attr-defined]  # limits, errors
    if lines[-1] not in _END:
        return _parse(lines, _class)  # the stream ended inside the block
    pairs = []
    for line in lines[:-1]:
        name, colon, value = line.decode("iso-8859-1").partition(":")
        value = value[:-2] if value.endswith("\r\n") else value[:-1]  # its line end (one: readline)
        if not colon or not _NAME.match(name) or "\r" in value:  # a bare CR ends a line there
            return _parse(lines, _class)
        pairs.append((name, value.lstrip(" \t")))
    msg = _class()
    for name, value in pairs:
        msg.set_raw(name, value)
    msg.set_payload("")
    return msg


def _parse(lines: list[bytes], _class: type[email.message.Message]) -> email.message.Message:
    """The standard library's second half, on the lines already read."""
    return email.parser.Parser(_class=_class).parsestr(b"".join(lines).decode("iso-8859-1"))


def install(module: object = http.client) -> bool:
    """Make :func:`parse_headers` the process's (idempotent); True if it did.

    It reads through the standard library's private ``_read_headers`` (Python 3.11-3.13). On a
    Python without it, nothing is replaced and the standard parser stays: slower, never broken."""
    if not callable(getattr(module, "_read_headers", None)):
        return False
    module.parse_headers = parse_headers  # type: ignore[attr-defined]
    return True
