"""The webhook backend: tickets and notifications as an HTTP POST of the command.

``open_ticket`` and ``notify`` (by default) are POSTed as the command's JSON
to one configured URL (a ticketing system's or a chat bridge's adapter), with
the header ``Idempotency-Key: <command id>``: a receiver that honours it turns
a repeated delivery (our retry after a lost answer) into one ticket.

* 2xx — done.
* 5xx, 408, 429, a refused connection or a timeout — transient: retried with
  exponential back-off, a bounded number of attempts, then failed.
* any other status (4xx, and 3xx: redirects are not followed for a POST) —
  failed at once: sending the same body again cannot help.

The URL may hold a secret (a token in its query): results and logs name only
its scheme, host and path.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from urllib.parse import urlsplit

from sinks.executors.core import ExecutionError
from streams.decisions import Command

__all__ = ["WebhookBackend", "DEFAULT_TYPES"]

DEFAULT_TYPES: frozenset[str] = frozenset({"open_ticket", "notify"})
_TRANSIENT_STATUSES = frozenset({408, 429})
_MAX_BODY_IN_DETAIL = 300


class WebhookBackend:
    """POSTs commands as JSON to ``url``, idempotently, with bounded retries."""

    name = "webhook"

    def __init__(
        self,
        url: str,
        *,
        types: Iterable[str] = DEFAULT_TYPES,
        timeout_s: float = 5.0,
        attempts: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        headers: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"webhook URL must be http(s)://host/..., not {parts.scheme or '?'}://...")
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        self.url = url
        self.where = f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}{parts.path}"
        self.types = frozenset(types)
        self.timeout_s = timeout_s
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.headers = dict(headers or {})
        self._sleep = sleep

    def supports(self, cmd_type: str) -> bool:
        return cmd_type in self.types

    def fleet_size(self) -> int | None:
        return None

    def knows_node(self, node: str) -> bool:
        return True  # a ticket or a notification acts on no hardware: any node may be named in one

    def plan(self, cmd: Command) -> str:
        return f"POST {self.where} with the {cmd.type} command as JSON (Idempotency-Key: {cmd.id})"

    def execute(self, cmd: Command) -> str:
        body = json.dumps(cmd.model_dump(mode="json")).encode()
        delay = self.backoff_s
        last = ""
        for attempt in range(1, self.attempts + 1):
            status, text, error = self._post(body, cmd.id)
            if status is not None and 200 <= status < 300:
                return f"HTTP {status} from {self.where} (attempt {attempt})"
            if status is not None and not (status >= 500 or status in _TRANSIENT_STATUSES):
                raise ExecutionError(f"HTTP {status} from {self.where}: {text[:_MAX_BODY_IN_DETAIL]}")
            last = f"HTTP {status}: {text[:_MAX_BODY_IN_DETAIL]}" if status is not None else error
            if attempt < self.attempts:
                self._sleep(delay)
                delay = min(delay * 2, self.max_backoff_s)
        raise ExecutionError(f"{self.where} failed {self.attempts} attempts; last: {last}")

    def _post(self, body: bytes, key: str) -> tuple[int | None, str, str]:
        """One POST: (status, response text, "") or (None, "", what went wrong on the way)."""
        request = urllib.request.Request(
            self.url, data=body, method="POST",
            headers={**self.headers, "Content-Type": "application/json", "Idempotency-Key": key})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return response.status, response.read().decode("utf-8", "replace"), ""
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, exc.read().decode("utf-8", "replace"), ""
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            return None, "", f"{type(exc).__name__}: {reason}"
