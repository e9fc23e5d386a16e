"""A list-then-watch cache of one Kubernetes resource, for the job source on large clusters.

Listing every pod of a cluster every 15 s costs the API server the whole list
each time and reports a change up to 15 s late. A :class:`WatchCache` lists
once (page by page), then holds a watch open from that list's
``resourceVersion`` on a thread of its own and applies each event to its
copy, so the job source can look every second at a copy that is never older
than the API server's last event. It is what client-go's reflector does, in
the small:

- the watch asks for bookmarks and restarts from the last ``resourceVersion``
  seen whenever the server ends it (``timeout_s`` at most);
- ``410 Gone`` (the version was compacted away) or any other failure drops
  the watch and lists again, after a back-off (1 s doubling to 30 s), so a
  change missed while away is still seen: the new list replaces the copy;
- :meth:`snapshot` raises while there is no good list yet (the caller's poll
  fails and the agent backs it off), so a stale or empty copy is never taken
  for the cluster's state.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["WatchCache"]

log = logging.getLogger("faultline.agent.kubernetes")

_BACKOFF_S = (1.0, 30.0)
_MAX_PAGES = 200


class WatchCache:
    """Objects of one list call, kept current by a watch (see the module docstring)."""

    def __init__(self, list_call: Callable[..., Any], what: str, *, page_size: int = 500, timeout_s: float = 20.0,
                 watch_s: int = 60, **kwargs: Any) -> None:
        self.list_call = list_call
        self.what = what
        self.page_size = page_size
        self.timeout_s = timeout_s
        self.watch_s = watch_s
        self.kwargs = kwargs
        self._objects: dict[str, Any] = {}
        self._version: str | None = None
        self._synced = False
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.relists = 0

    # --- what the job source calls -------------------------------------------------------

    def snapshot(self) -> list[Any]:
        """Every object as of the last event applied; the first call lists (and starts the watch)."""
        if self._thread is None:
            self._relist()  # the first list is the caller's: its failure is the poll's
            self._thread = threading.Thread(target=self._run, name=f"watch-{self.what}", daemon=True)
            self._thread.start()
        with self._lock:
            if not self._synced:
                raise RuntimeError(f"{self.what}: the watch failed and the list is not redone yet: {self._error}")
            return list(self._objects.values())

    def close(self) -> None:
        """Stop the watch (the thread ends when the server next answers, at most ``watch_s``)."""
        self._stop.set()

    # --- the thread -----------------------------------------------------------------------

    def _relist(self) -> None:
        objects: dict[str, Any] = {}
        token: str | None = None
        version: str | None = None
        for _ in range(_MAX_PAGES):
            page = self.list_call(limit=self.page_size, _continue=token, _request_timeout=self.timeout_s,
                                  **self.kwargs)
            for obj in page.items or []:
                objects[_key(obj)] = obj
            version = page.metadata.resource_version if page.metadata else None
            token = page.metadata._continue if page.metadata else None
            if not token:
                break
        else:
            raise RuntimeError(f"{self.what}: more than {_MAX_PAGES} pages of {self.page_size}: refusing to go on")
        with self._lock:
            self._objects, self._version, self._synced, self._error = objects, version, True, None
        self.relists += 1

    def _run(self) -> None:
        from kubernetes import watch

        backoff = _BACKOFF_S[0]
        while not self._stop.is_set():
            try:
                if not self._synced:
                    self._relist()
                stream = watch.Watch().stream(self.list_call, resource_version=self._version,
                                              allow_watch_bookmarks=True, timeout_seconds=self.watch_s,
                                              _request_timeout=self.watch_s + self.timeout_s, **self.kwargs)
                for event in stream:
                    if self._stop.is_set():
                        return
                    self._apply(event)
                backoff = _BACKOFF_S[0]
            except Exception as exc:  # 410 Gone, a broken connection, an API restart: list again
                with self._lock:
                    self._synced, self._error = False, exc
                log.info("kubernetes: watch of %s ended (%s); listing again in %.0f s", self.what, exc, backoff)
                if self._stop.wait(backoff):
                    return
                backoff = min(backoff * 2, _BACKOFF_S[1])

    def _apply(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object")
        if kind == "ERROR":
            raise RuntimeError(f"watch error: {event.get('raw_object', obj)}")
        version = _version(obj)
        with self._lock:
            if kind in ("ADDED", "MODIFIED"):
                self._objects[_key(obj)] = obj
            elif kind == "DELETED":
                self._objects.pop(_key(obj), None)
            if version:
                self._version = version  # BOOKMARK events carry only this


def _key(obj: Any) -> str:
    meta = obj.metadata
    return str(meta.uid or f"{meta.namespace}/{meta.name}")


def _version(obj: Any) -> str | None:
    meta = getattr(obj, "metadata", None)
    return getattr(meta, "resource_version", None) if meta is not None else None
