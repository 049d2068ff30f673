"""List-then-watch of one resource, on raw JSON: client-go's Reflector, in ~150 lines.

1. Paginated LIST (``limit=500`` + ``continue``). A 410 on a continue token restarts the LIST.
2. The handler's ``replace(items)`` gets the full list; it emits deletes for vanished objects.
3. WATCH from the list's resourceVersion, with bookmarks, a server-side ``timeoutSeconds``
   (jittered) and a client-side idle read timeout, so a silent half-open connection is noticed.
4. A normal close (timeout), or nothing read for the idle timeout (a quiet resource: the API
   server sends bookmarks only for resources it has seen an event of), resumes at once from the
   last resourceVersion; bookmarks advance it.
5. 410 Gone (as an ERROR event or a status) → re-list. Other errors → exponential backoff with
   jitter (0.5 s doubling to 30 s), then resume from the last resourceVersion.

The reflector runs on its own thread; :meth:`Reflector.stop` closes the live response to unblock it.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import orjson
import structlog

from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient

log = structlog.get_logger("custom_scheduler.watch")

PAGE_SIZE = 500


class Handler(Protocol):
    def replace(self, items: list[dict[str, Any]], resource_version: str) -> None: ...

    def on_event(self, kind: str, obj: dict[str, Any]) -> None: ...


class Reflector:
    def __init__(
        self,
        client: KubeClient,
        path: str,
        handler: Handler,
        *,
        field_selector: str = "",
        label_selector: str = "",
        name: str = "",
        read_timeout: float = 90.0,
        watch_timeout: float = 300.0,
        on_relist: Callable[[str], None] | None = None,
        on_restart: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.path = path
        self.handler = handler
        self.field_selector = field_selector
        self.label_selector = label_selector
        self.name = name or path
        self.read_timeout = read_timeout
        self.watch_timeout = watch_timeout
        self.resource_version = ""
        self.synced = threading.Event()
        self._stop = threading.Event()
        self._resp: Any = None
        self._thread: threading.Thread | None = None
        self._on_relist = on_relist or (lambda reason: None)
        self._on_restart = on_restart or (lambda reason: None)
        self.relists = 0
        self._progressed = False  # the current watch delivered at least one event
        #: The first LIST's answer when someone fetched it already (:mod:`.prefetch`): called once,
        #: before the first LIST; None from it means "LIST as usual".
        self.initial: Callable[[], tuple[list[dict[str, Any]], str] | None] | None = None

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=f"reflector-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        resp = self._resp
        if resp is not None:
            try:
                resp.shutdown() if hasattr(resp, "shutdown") else resp.close()
            except Exception:
                pass  # closed already, or the reader closed it meanwhile: it sees _stop and ends anyway

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    # -- loop -------------------------------------------------------------------------------------
    def run(self) -> None:
        backoff = 0.5
        need_list = True
        while not self._stop.is_set():
            self._progressed = False
            try:
                if need_list:
                    self._list()
                    need_list = False
                    self.synced.set()
                self._watch()
                backoff = 0.5  # a watch that ran and closed normally resets the backoff
            except api_errors.Gone:
                log.info("watch_expired_relist", resource=self.name, resource_version=self.resource_version)
                self._on_relist("expired")
                need_list = True
            except api_errors.IdleTimeout:
                # A quiet resource (no events, so no bookmarks either): resume from the same
                # resourceVersion at once, as after a server-side timeout. Not a warning: on a
                # quiet cluster it happens to most watches every read timeout.
                log.debug("watch_idle_reopened", resource=self.name, idle_s=self.read_timeout)
                self._on_restart("idle")
                backoff = 0.5
            except (api_errors.KubeError, ValueError) as e:
                if self._stop.is_set():
                    return
                if self._progressed:
                    # The watch was delivering events, so the server is fine: this failure (a broken
                    # stream, a restart) starts a fresh backoff. Without this, a burst of faults left
                    # the backoff at 30 s for good, since a watch that fails never "closes normally".
                    backoff = 0.5
                reason = type(e).__name__
                log.warning("watch_error", resource=self.name, error=str(e)[:300], retry_in=round(backoff, 2))
                self._on_restart(reason)
                self._stop.wait(backoff * (0.5 + random.random()))
                backoff = min(backoff * 2, 30.0)

    def _list(self) -> None:
        """The first LIST asks for ``resourceVersion=0`` as client-go's reflector does: any recent
        state, answered whole from the API server's watch cache, with no read of etcd; the watch
        from its resourceVersion brings whatever is newer. A relist after 410 Gone is consistent
        (``""``), as client-go's is."""
        initial, self.initial = self.initial, None
        got = initial() if initial is not None else None
        if got is None:
            any_version = self.relists == 0
            got = list_all(self.client, self.path, self.field_selector, self.label_selector, "0" if any_version else "")
        items, self.resource_version = got
        self.relists += 1
        self.handler.replace(items, self.resource_version)

    def _watch(self) -> None:
        timeout = int(self.watch_timeout * (0.8 + 0.4 * random.random()))
        query = {
            "watch": "true",
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout,
            "fieldSelector": self.field_selector,
            "labelSelector": self.label_selector,
        }

        def opened(resp: Any) -> None:
            self._resp = resp

        try:
            for line in self.client.stream(self.path, query, read_timeout=self.read_timeout, on_open=opened):
                if self._stop.is_set():
                    return
                ev = orjson.loads(line)
                if not isinstance(ev, dict):
                    # Valid JSON, not an event: skip it. Raising would restart the watch from
                    # before this line and meet it again; an AttributeError would end the thread.
                    log.warning(
                        "watch_event_malformed", resource=self.name, line=bytes(line[:200]).decode(errors="replace")
                    )
                    continue
                kind = ev.get("type")
                obj = ev.get("object") or {}
                if kind == "ERROR":
                    raise _status_error(obj if isinstance(obj, dict) else {})
                meta = obj.get("metadata") if isinstance(obj, dict) else None
                rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
                if kind == "BOOKMARK":
                    if rv:
                        self.resource_version = rv
                    self._progressed = True
                    continue
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self.handler.on_event(kind, obj)
                    if rv:
                        self.resource_version = rv
                    self._progressed = True
        finally:
            self._resp = None


def list_all(
    client: KubeClient, path: str, field_selector: str = "", label_selector: str = "", resource_version: str = ""
) -> tuple[list[dict[str, Any]], str]:
    """Every object of a paginated LIST (``limit=500`` + ``continue``) and the list's
    resourceVersion; a 410 on a continue token restarts the LIST. ``resource_version`` "0" takes
    any recent state (the watch cache answers it whole, ignoring the limit)."""
    items: list[dict[str, Any]] = []
    cont = ""
    while True:
        query: dict[str, Any] = {
            "limit": PAGE_SIZE,
            "continue": cont,
            "fieldSelector": field_selector,
            "labelSelector": label_selector,
            "resourceVersion": "" if cont else resource_version,  # a continue token carries its own
        }
        try:
            doc = client.get(path, query, timeout=(5.0, 60.0))
        except api_errors.Gone:
            if cont:  # the continue token expired: restart the whole LIST
                items, cont = [], ""
                continue
            raise
        items.extend(doc.get("items") or ())
        meta = doc.get("metadata") or {}
        cont = meta.get("continue") or ""
        if not cont:
            return items, str(meta.get("resourceVersion", ""))


def _status_error(obj: Mapping[str, Any]) -> api_errors.ApiError:
    code = int(obj.get("code") or 500)
    body = orjson.dumps(obj)
    return api_errors.ApiError.from_response(code, body)
