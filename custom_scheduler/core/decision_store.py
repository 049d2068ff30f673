"""The decision record's store: a ring of a few ConfigMaps that the scheduling leader appends to.

Why ConfigMaps, batched (issue #29): the record must survive the pod it is about being deleted,
the daemon restarting and a failover to another replica, and it must not cost an API write per
pod. Annotations on the Binding we POST would cost nothing extra but go with the pod, and only for
bound pods; Events carry failures but expire after the API server's ``--event-ttl`` (1 h) and say
nothing about scores. A ring of ConfigMaps, appended to at most once per flush interval with every
entry since, keeps all kinds of decisions for a bounded span, and any replica (or ``why``) reads
it with one LIST.

Layout: ConfigMaps ``<name>-0`` … ``<name>-<segments-1>`` in one namespace, labelled
``custom-scheduler.io/decision-ring=<name>``. Each is a segment; a flush adds one ``binaryData``
key (``b<seq>-<writer>``: a gzip of the entries as JSON lines) to the current segment with a merge
patch (the segment's earlier batches are not re-sent). When the current segment would pass
``segment_bytes`` (compressed) or ``segment_entries``, the next segment is replaced whole (the
ring overwrites its oldest) and its ``generation`` annotation raised. A new leader (or a restarted
daemon) :meth:`DecisionRing.load`\\ s the ring and continues in the segment of the highest
generation, after the highest sequence number.

Bound: ``segments x segment_entries`` entries and ``segments x segment_bytes`` compressed bytes
(defaults 8 x 5000 = 40 000 entries, 8 x 512 KiB = 4 MiB; a ConfigMap holds at most 1 MiB).
"""

from __future__ import annotations

import base64
import gzip
import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from custom_scheduler.kube import api_errors as kerrors

Entry = dict[str, Any]

RING_LABEL = "custom-scheduler.io/decision-ring"
GENERATION = "custom-scheduler.io/generation"
#: The ConfigMap size limit is 1 MiB (data and binaryData together); keep a margin for metadata.
MAX_SEGMENT_BYTES = 900 * 1024
_KEY = re.compile(r"^b(\d{1,12})-([a-z0-9]{1,16})$")


@dataclass(frozen=True, slots=True)
class RingConfig:
    """Where the ring lives and how big it may grow."""

    namespace: str = "kube-system"
    name: str = "custom-scheduler-decisions"
    segments: int = 8
    segment_bytes: int = 512 * 1024
    segment_entries: int = 5000
    interval: float = 5.0
    """Seconds between writes: at most one API write per interval, whatever the pod rate."""
    scores: bool = True
    """Keep the chosen node's top plugin scores and the runner-up: the algorithm's fast path
    keeps those two nodes' per-plugin columns of the score sum (``Algorithm.keep_top``), nearly
    free; a shadow keeps every node's detail, as its comparisons need them."""

    def validate(self) -> list[str]:
        """What is wrong with these values, as messages (empty: fine)."""
        errs = []
        if not 2 <= self.segments <= 64:
            errs.append(f"segments must be 2..64, got {self.segments}")
        if not 4096 <= self.segment_bytes <= MAX_SEGMENT_BYTES:
            errs.append(f"segment bytes must be 4096..{MAX_SEGMENT_BYTES}, got {self.segment_bytes}")
        if self.segment_entries < 10:
            errs.append(f"segment entries must be at least 10, got {self.segment_entries}")
        if self.interval <= 0:
            errs.append(f"interval must be positive, got {self.interval}")
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?", self.name):
            errs.append(f"name {self.name!r} is not a valid ConfigMap name prefix")
        return errs

    def segment_name(self, index: int) -> str:
        return f"{self.name}-{index}"


def encode(entries: Sequence[Entry]) -> bytes:
    """Entries as gzip'd JSON lines (mtime 0: the same entries give the same bytes). orjson and
    a fast gzip level: this runs in the daemon's process, beside the scheduling thread."""
    text = b"\n".join(orjson.dumps(e, option=orjson.OPT_SORT_KEYS) for e in entries)
    return gzip.compress(text, compresslevel=3, mtime=0)


def decode(blob: bytes) -> list[Entry]:
    """The entries of one batch; a corrupt batch or line is skipped, never fatal (a reader of
    the record must answer even if someone edited a ConfigMap by hand)."""
    try:
        text = gzip.decompress(blob).decode()
    except (OSError, EOFError, UnicodeDecodeError):
        return []
    out = []
    for line in text.splitlines():
        try:
            e = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(e, dict):
            out.append(e)
    return out


def chunks(entries: Sequence[Entry], max_entries: int, max_bytes: int) -> list[tuple[bytes, int]]:
    """``entries`` as encoded batches of at most ``max_entries`` entries and ``max_bytes`` bytes
    each (halving a batch until it fits); an entry too big on its own is dropped."""
    out: list[tuple[bytes, int]] = []
    todo = [list(entries[i : i + max_entries]) for i in range(0, len(entries), max_entries)]
    while todo:
        part = todo.pop(0)
        blob = encode(part)
        if len(blob) <= max_bytes:
            out.append((blob, len(part)))
        elif len(part) > 1:
            half = len(part) // 2
            todo[:0] = [part[:half], part[half:]]
    return out


@dataclass(slots=True)
class _Segment:
    index: int
    generation: int
    batches: list[tuple[int, str, bytes]]  # (seq, writer, blob)


def _segments(client: Any, cfg: RingConfig) -> list[_Segment]:
    """The ring's ConfigMaps as segments (a foreign or malformed key is ignored)."""
    path = f"/api/v1/namespaces/{cfg.namespace}/configmaps"
    items = client.get(path, {"labelSelector": f"{RING_LABEL}={cfg.name}"}).get("items") or []
    out = []
    for cm in items:
        meta = cm.get("metadata") or {}
        suffix = str(meta.get("name", "")).removeprefix(f"{cfg.name}-")
        if not suffix.isdigit():
            continue
        try:
            gen = int((meta.get("annotations") or {}).get(GENERATION, "0"))
        except ValueError:
            gen = 0
        batches = []
        for key, value in (cm.get("binaryData") or {}).items():
            m = _KEY.match(key)
            if m is None:
                continue
            try:
                blob = base64.b64decode(value, validate=True)
            except ValueError:
                continue
            batches.append((int(m.group(1)), m.group(2), blob))
        out.append(_Segment(int(suffix), gen, sorted(batches)))
    return out


def read_ring(client: Any, cfg: RingConfig) -> list[Entry]:
    """Every entry in the ring, oldest first (by segment generation, then batch sequence)."""
    out: list[Entry] = []
    for seg in sorted(_segments(client, cfg), key=lambda s: s.generation):
        for _, _, blob in seg.batches:
            out.extend(decode(blob))
    return out


class DecisionRing:
    """The writer's side of the ring: :meth:`load` once when leading, then :meth:`append`.

    Not thread-safe: one flusher thread owns it."""

    def __init__(self, client: Any, cfg: RingConfig) -> None:
        self.client = client
        self.cfg = cfg
        # Two writers (an old leader's last flush, the new leader's first) never share a key.
        self.writer = secrets.token_hex(3)
        self.index = -1
        self.generation = 0
        self.seq = 0
        self.bytes = 0
        self.entries = 0
        self.loaded = False
        self.writes = 0

    def load(self) -> None:
        """Continue where the ring's last writer stopped: the segment of the highest generation."""
        segs = _segments(self.client, self.cfg)
        self.loaded = True
        if not segs:
            return
        cur = max(segs, key=lambda s: (s.generation, s.index))
        self.index, self.generation = cur.index % self.cfg.segments, cur.generation
        self.seq = max((b[0] for s in segs for b in s.batches), default=0) + 1
        self.bytes = sum(len(b[2]) for b in cur.batches)
        self.entries = sum(len(decode(b[2])) for b in cur.batches)

    def append(self, entries: Sequence[Entry]) -> int:
        """Write ``entries`` (one API write per batch, usually one); returns the entries written.

        Raises :class:`~custom_scheduler.kube.api_errors.KubeError` when the API refuses: the
        caller keeps the entries and retries at its next flush."""
        if not self.loaded:
            self.load()
        written = 0
        for blob, n in chunks(entries, self.cfg.segment_entries, self.cfg.segment_bytes):
            full = self.bytes + len(blob) > self.cfg.segment_bytes or self.entries + n > self.cfg.segment_entries
            if self.index < 0 or full:
                self._rotate(blob)
            else:
                self._add(blob)
            self.bytes += len(blob)
            self.entries += n
            self.seq += 1
            written += n
        return written

    def _key(self) -> str:
        return f"b{self.seq:010d}-{self.writer}"

    def _path(self, index: int) -> str:
        return f"/api/v1/namespaces/{self.cfg.namespace}/configmaps/{self.cfg.segment_name(index)}"

    def _add(self, blob: bytes) -> None:
        """One more batch in the current segment: a merge patch that sends only the new key."""
        body = {"binaryData": {self._key(): base64.b64encode(blob).decode()}}
        try:
            self.client.patch(self._path(self.index), body)
        except kerrors.NotFound:  # deleted under us: start it again
            self._replace(self.index, self.generation, blob)
        self.writes += 1

    def _rotate(self, blob: bytes) -> None:
        """Overwrite the next (oldest) segment with this batch alone."""
        index, generation = (self.index + 1) % self.cfg.segments, self.generation + 1
        self._replace(index, generation, blob)
        self.index, self.generation, self.bytes, self.entries = index, generation, 0, 0
        self.writes += 1

    def _replace(self, index: int, generation: int, blob: bytes) -> None:
        name = self.cfg.segment_name(index)
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": self.cfg.namespace,
                "labels": {RING_LABEL: self.cfg.name},
                "annotations": {GENERATION: str(generation)},
            },
            "binaryData": {self._key(): base64.b64encode(blob).decode()},
        }
        try:
            self.client.put(self._path(index), body)  # ConfigMaps allow an unconditional update
        except kerrors.NotFound:
            self.client.post(f"/api/v1/namespaces/{self.cfg.namespace}/configmaps", body)


def sizes(entries: Iterable[Entry]) -> int:
    """Encoded size of ``entries`` (for tests and the benchmark's report)."""
    return len(encode(list(entries)))


#: Where the daemon records by default, and a shadow (``--dry-run``): kept apart, so a shadow
#: never writes into the leader's ring and ``shadow-report`` reads only comparisons.
DEFAULT_RING = "kube-system/custom-scheduler-decisions"
DEFAULT_SHADOW_RING = "kube-system/custom-scheduler-shadow-decisions"
#: The environment variables ``run`` reads for ``--decision-record`` (``off`` for benchmarks) and
#: ``--decision-record-scores``.
RECORD_ENV = "CUSTOM_SCHEDULER_DECISION_RECORD"
SCORES_ENV = "CUSTOM_SCHEDULER_DECISION_RECORD_SCORES"


def parse_ring_ref(
    text: str | None, *, shadow: bool = False, interval: float = 5.0, scores: bool = True
) -> RingConfig | None:
    """``NAMESPACE/NAME`` (or ``off``) as a ring; None when off. Raises ValueError with a message
    naming what is wrong."""
    ref = (text or "").strip() or (DEFAULT_SHADOW_RING if shadow else DEFAULT_RING)
    if ref.lower() in ("off", "none", "false", "0"):
        return None
    ns, sep, name = ref.partition("/")
    if not sep or not ns or not name:
        raise ValueError(f"decision record {ref!r}: expected NAMESPACE/NAME or off")
    cfg = RingConfig(namespace=ns, name=name, interval=interval, scores=scores)
    errs = cfg.validate()
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", ns):
        errs.insert(0, f"namespace {ns!r} is not a valid namespace name")
    if errs:
        raise ValueError(f"decision record {ref!r}: {'; '.join(errs)}")
    return cfg
