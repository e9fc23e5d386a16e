"""The webhook backend: tickets and notifications as an HTTP POST of the command.

``open_ticket``, ``notify`` and ``checkpoint_now`` (by default) are POSTed as the command's JSON
to one configured URL (a ticketing system's or a chat bridge's adapter; for ``checkpoint_now`` the
site's job-control hook, which touches the job's control file that
:class:`producers.jobs.reporter.CheckpointRequests` watches), with
the header ``Idempotency-Key: <command id>``: a receiver that honours it turns
a repeated delivery (our retry after a lost answer) into one ticket.

* 2xx — done.
* 5xx, 408, 429, a refused connection or a timeout — transient: retried a
  bounded number of attempts (tenacity), then failed. Between attempts it waits
  what the receiver's ``Retry-After`` asks (seconds or an HTTP date), or else
  exponential back-off (``backoff_s``, doubling, at most ``max_backoff_s``)
  plus a random jitter of up to ``jitter_s``, so that executors retrying
  against one receiver do not all come back at the same instant. A
  ``Retry-After`` longer than ``max_retry_after_s`` fails the command at once,
  saying so: an executor does not sit on one ticket for an hour.
* any other status (4xx, and 3xx: redirects are not followed for a POST) —
  failed at once: sending the same body again cannot help.

The URL may hold a secret (a token in its query): results and logs name only
its scheme, host and path.
"""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

from tenacity import RetryCallState, Retrying, retry_if_result, stop_after_attempt

from sinks.executors.core import ExecutionError
from streams.decisions import Command

__all__ = ["WebhookBackend", "DEFAULT_TYPES", "retry_after_s"]

DEFAULT_TYPES: frozenset[str] = frozenset({"open_ticket", "notify", "checkpoint_now"})
_TRANSIENT_STATUSES = frozenset({408, 429})
_MAX_BODY_IN_DETAIL = 300


def retry_after_s(value: str | None, now: datetime | None = None) -> float | None:
    """``Retry-After`` in seconds from now: ``120`` or ``Wed, 21 Oct 2026 07:28:00 GMT``; None if absent or bad."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


@dataclass(frozen=True)
class _Attempt:
    """What one POST came back with."""

    status: int | None
    text: str
    error: str
    retry_after: float | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def transient(self) -> bool:
        return self.status is None or self.status >= 500 or self.status in _TRANSIENT_STATUSES

    def describe(self) -> str:
        return f"HTTP {self.status}: {self.text[:_MAX_BODY_IN_DETAIL]}" if self.status is not None else self.error


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
        jitter_s: float = 0.25,
        max_retry_after_s: float = 60.0,
        headers: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
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
        self.jitter_s = jitter_s
        self.max_retry_after_s = max_retry_after_s
        self.headers = dict(headers or {})
        self._sleep = sleep
        self._rng = rng or random.Random()

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
        retrying = Retrying(
            stop=stop_after_attempt(self.attempts),
            retry=retry_if_result(self._retry),
            wait=self._wait,
            sleep=self._sleep,
            retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
            reraise=True,
        )
        last = retrying(self._post, body, cmd.id)
        attempts = retrying.statistics.get("attempt_number", 1)
        if last.ok:
            return f"HTTP {last.status} from {self.where} (attempt {attempts})"
        if not last.transient:
            raise ExecutionError(f"HTTP {last.status} from {self.where}: {last.text[:_MAX_BODY_IN_DETAIL]}")
        if last.retry_after is not None and last.retry_after > self.max_retry_after_s:
            raise ExecutionError(f"{self.where} asked to retry after {last.retry_after:.0f} s (Retry-After), longer "
                                 f"than the {self.max_retry_after_s:.0f} s this executor waits; last: {last.describe()}")
        raise ExecutionError(f"{self.where} failed {attempts} attempts; last: {last.describe()}")

    def _retry(self, attempt: _Attempt) -> bool:
        """Retry a transient failure, unless the receiver asks for a wait longer than we give it."""
        if attempt.ok or not attempt.transient:
            return False
        return attempt.retry_after is None or attempt.retry_after <= self.max_retry_after_s

    def _wait(self, state: RetryCallState) -> float:
        """The receiver's Retry-After if it gave one; else exponential back-off with jitter."""
        last = state.outcome.result() if state.outcome is not None and not state.outcome.failed else None
        if isinstance(last, _Attempt) and last.retry_after is not None:
            return last.retry_after
        backoff = min(self.backoff_s * 2 ** (state.attempt_number - 1), self.max_backoff_s)
        return backoff + (self._rng.uniform(0, self.jitter_s) if self.jitter_s > 0 else 0.0)

    def _post(self, body: bytes, key: str) -> _Attempt:
        """One POST: the status, response text and Retry-After, or what went wrong on the way."""
        request = urllib.request.Request(
            self.url, data=body, method="POST",
            headers={**self.headers, "Content-Type": "application/json", "Idempotency-Key": key})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return _Attempt(response.status, response.read().decode("utf-8", "replace"), "")
        except urllib.error.HTTPError as exc:
            with exc:
                return _Attempt(exc.code, exc.read().decode("utf-8", "replace"), "",
                                retry_after_s(exc.headers.get("Retry-After") if exc.headers else None))
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            return _Attempt(None, "", f"{type(exc).__name__}: {reason}")
