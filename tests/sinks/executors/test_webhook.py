"""The webhook backend against a real HTTP server on 127.0.0.1: success, retries, idempotency, failures."""

from __future__ import annotations

import socket
from datetime import UTC, datetime

import pytest

from sinks.executors.core import ExecutionError
from sinks.executors.webhook import WebhookBackend, retry_after_s

from .commands import command
from .http_recorder import RecordingServer, Reply, Request

TICKET = command("cmd-ticket-1", "open_ticket", params={"kind": "rma", "category": "gpu_off_bus"})


def scripted(*replies: Reply) -> RecordingServer:
    """A server answering with ``replies`` in turn, then repeating the last one."""
    queue = list(replies)
    return RecordingServer(lambda _req: queue.pop(0) if len(queue) > 1 else queue[0])


def backend(url: str, delays: list[float] | None = None, **options: float) -> WebhookBackend:
    """The backend posting to ``url``'s hook path (a token in the query); back-offs go to ``delays``.

    Without jitter unless asked, so that the back-off schedule itself can be checked exactly."""
    sleeps = delays if delays is not None else []
    options.setdefault("jitter_s", 0.0)
    return WebhookBackend(url + "/hooks/tickets?token=s3cret", sleep=sleeps.append, **options)  # type: ignore[arg-type]


def test_posts_the_command_with_its_id_as_idempotency_key() -> None:
    with scripted(Reply(201, {"ticket": "RMA-7"})) as server:
        detail = backend(server.url).execute(TICKET)
    assert detail == f"HTTP 201 from {server.url}/hooks/tickets (attempt 1)"  # no token in the detail
    [req] = server.requests
    assert (req.method, req.path, req.query) == ("POST", "/hooks/tickets", {"token": ["s3cret"]})
    assert req.headers["idempotency-key"] == "cmd-ticket-1"
    assert req.headers["content-type"] == "application/json"
    body = req.json()
    assert (body["id"], body["type"], body["params"]["kind"]) == ("cmd-ticket-1", "open_ticket", "rma")


def test_a_server_error_is_retried_with_the_same_key_until_it_succeeds() -> None:
    delays: list[float] = []
    with scripted(Reply(500, {"error": "db down"}), Reply(200)) as server:
        assert backend(server.url, delays, backoff_s=0.25).execute(TICKET).endswith("(attempt 2)")
    assert [r.headers["idempotency-key"] for r in server.requests] == ["cmd-ticket-1", "cmd-ticket-1"]
    assert server.requests[0].body == server.requests[1].body
    assert delays == [0.25]


def test_a_client_error_fails_at_once() -> None:
    with scripted(Reply(422, {"error": "unknown field kind"})) as server:
        with pytest.raises(ExecutionError, match="HTTP 422 .*unknown field kind"):
            backend(server.url).execute(TICKET)
    assert len(server.requests) == 1


def test_rate_limiting_is_transient() -> None:
    with scripted(Reply(429), Reply(429), Reply(204)) as server:
        assert backend(server.url).execute(TICKET).startswith("HTTP 204")
    assert len(server.requests) == 3


def test_gives_up_after_a_bounded_number_of_attempts_backing_off() -> None:
    delays: list[float] = []
    with scripted(Reply(503, {"error": "maintenance"})) as server:
        hook = backend(server.url, delays, attempts=4, backoff_s=0.5, max_backoff_s=1.5)
        with pytest.raises(ExecutionError, match="failed 4 attempts; last: HTTP 503"):
            hook.execute(TICKET)
    assert len(server.requests) == 4
    assert delays == [0.5, 1.0, 1.5]


def test_a_slow_server_times_out_and_is_retried() -> None:
    def answer(req: Request) -> Reply:
        return Reply(200, delay_s=1.0) if len(server.requests) == 1 else Reply(200)

    with RecordingServer(answer) as server:
        assert backend(server.url, timeout_s=0.2).execute(TICKET).endswith("(attempt 2)")


def test_an_unreachable_receiver_fails_after_retries() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ExecutionError, match="failed 2 attempts; last: URLError"):
        backend(f"http://127.0.0.1:{port}", attempts=2).execute(TICKET)


def test_supports_tickets_and_notifications_only() -> None:
    hook = WebhookBackend("https://tickets.example/hook")
    assert hook.supports("open_ticket") and hook.supports("notify") and not hook.supports("drain_node")
    assert "Idempotency-Key: cmd-ticket-1" in hook.plan(TICKET)


def test_rejects_a_url_that_is_not_http() -> None:
    with pytest.raises(ValueError):
        WebhookBackend("file:///etc/passwd")


def test_retry_after_in_seconds_is_honoured_instead_of_the_back_off() -> None:
    delays: list[float] = []
    with scripted(Reply(503, headers={"Retry-After": "7"}), Reply(429, headers={"Retry-After": "3"}),
                  Reply(200)) as server:
        assert backend(server.url, delays, backoff_s=0.5).execute(TICKET).endswith("(attempt 3)")
    assert delays == [7.0, 3.0]


def test_retry_after_as_an_http_date() -> None:
    now = datetime(2026, 10, 21, 7, 27, 50, tzinfo=UTC)
    assert retry_after_s("Wed, 21 Oct 2026 07:28:00 GMT", now=now) == 10.0
    assert retry_after_s("Wed, 21 Oct 2026 07:00:00 GMT", now=now) == 0.0  # already past: now
    assert retry_after_s("soon") is None and retry_after_s(None) is None and retry_after_s("120") == 120.0


def test_a_retry_after_longer_than_we_wait_fails_at_once_and_says_so() -> None:
    delays: list[float] = []
    with scripted(Reply(503, headers={"Retry-After": "3600"})) as server:
        with pytest.raises(ExecutionError, match="asked to retry after 3600 s"):
            backend(server.url, delays, max_retry_after_s=60).execute(TICKET)
    assert len(server.requests) == 1 and delays == []


def test_back_off_has_jitter_within_its_bound() -> None:
    import random

    delays: list[float] = []
    with scripted(Reply(500)) as server:
        hook = WebhookBackend(server.url + "/h", sleep=delays.append, attempts=5, backoff_s=0.5, max_backoff_s=2.0,
                              jitter_s=0.3, rng=random.Random(7))
        with pytest.raises(ExecutionError, match="failed 5 attempts"):
            hook.execute(TICKET)
    base = [0.5, 1.0, 2.0, 2.0]
    assert len(delays) == 4 and all(b <= d <= b + 0.3 for b, d in zip(base, delays, strict=True))
    assert len({round(d - b, 6) for b, d in zip(base, delays, strict=True)}) > 1  # not one fixed offset


def test_checkpoint_now_is_posted_by_default() -> None:
    """Issue 29: the site's job-control hook receives checkpoint_now as it receives tickets."""
    ask = command("cmd-ckpt-1", "checkpoint_now", node=None, job="llm", params={})
    with scripted(Reply(202, {})) as server:
        backend(server.url).execute(ask)
    [req] = server.requests
    assert req.headers["idempotency-key"] == "cmd-ckpt-1" and b'"checkpoint_now"' in req.body
