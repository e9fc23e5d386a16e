"""The embedded archive's endpoint: the owning process serves the archive to every other one.

chDB is ClickHouse inside one process, and one process at a time can open a data directory
(its ``status`` file is locked). So the process that opens it, the *owner* (normally
``faultline sink run``), also serves it: :class:`ArchiveEndpoint` is a small HTTP server on
loopback that speaks the part of ClickHouse's HTTP interface that clickhouse-connect uses. Other
processes (``faultline status``, ``report``, a replay archiving its rows) then read and write
through an ordinary clickhouse-connect HTTP client: the code path of a ClickHouse server URL.

They find the owner by its endpoint file in the data directory (:mod:`.endpoint_file`): its
process id, port and a random token, the file readable by the owner's user only. Every request must present that
token (HTTP basic auth, the password), because any local user can reach a loopback port; a
request without it is refused before any SQL runs. ``faultline sink run`` may instead serve at a
fixed port with a password from a file, for Grafana (:mod:`.endpoint_listen`).

Grafana's ClickHouse data source (grafana/clickhouse-datasource v4, ``protocol: http``) reads it
through clickhouse-go v2's HTTP transport, which sends (``conn_http.go``, ``conn_http_query.go``
of ClickHouse/clickhouse-go; ``pkg/plugin/driver.go`` of the plugin): ``POST /`` (the data
source's path, none by default) with ``database=<default database>&default_format=Native`` and
the data source's custom settings in the URL, the SQL as the body (Content-Length), HTTP basic
auth from the URL (``X-ClickHouse-User``/``-Key`` only over TLS), ``Accept-Encoding: gzip`` (the
plugin picks gzip for HTTP; an answer is decompressed only if its ``Content-Encoding`` says gzip,
and the driver does not set ``enable_http_compression``) and a ``User-Agent`` naming itself and
Grafana. On connect it asks ``SELECT timezone()`` and ``SELECT version()``; its ping (connect and
the data source's health check) is ``SELECT 1``, which must answer one column named ``1``; every
answer is read as Native (an empty body: no rows). The plugin expands its macros before sending
(``pkg/macros/macros.go``): ``$__timeFilter(c)`` is ``c >= toDateTime(<from s>) AND c <=
toDateTime(<to s>)``, ``$__fromTime``/``$__toTime`` ``toDateTime(<s>)``, the ``_ms`` forms
``fromUnixTimestamp64Milli(<ms>)``, ``$__timeInterval(c)`` ``toStartOfInterval(toDateTime(c),
INTERVAL <s> second)``, ``$__interval_s`` the interval's seconds (at least 1).

What is served, per request (``POST /``; ``GET /ping`` answers ``Ok.``):

* the query comes from the ``query`` parameter, the body, or both (ClickHouse's rule), or from
  ``multipart/form-data`` fields; ``param_<name>`` values bind ``{name:Type}`` placeholders;
* ``database`` selects the database (``USE``), every other parameter that is not one of the
  HTTP transport's own is a ClickHouse setting, applied with ``SET`` on the endpoint's own
  session and reset after, so no setting of one request (an insert's deduplication token)
  leaks into the next;
* ``INSERT ... FORMAT X`` followed by data is written to a private temporary file and
  inserted with ``INSERT ... FROM INFILE`` (chunked request bodies included);
* a statement ending in ``FORMAT X`` answers in X, else in ``default_format``, else
  TabSeparated, with ``X-ClickHouse-Format`` set when it produced a result set (as a server does);
* the answer is compressed as a server compresses it (:func:`.endpoint_body.encoded`: gzip or
  deflate, only with ``enable_http_compression=1``); ``compress=1`` (block compression) is refused;
* a ClickHouse error answers 500 with ``X-ClickHouse-Exception-Code`` and the message;
* ``GET /faultline-identity?nonce=N`` answers an HMAC of N under the token: a client checks it
  before it trusts the port, so a process that took the port of a dead owner is not served the
  client's token or rows.

Requests run one at a time on the endpoint's own chDB connection (its own session), beside the
owner's connection: reads do not wait for the owner's writes to finish.

Any local user can connect, token or not, so a connection costs little and lasts little: it is
served by one of at most :data:`MAX_CONNECTIONS` threads (one more is closed at once, unread), and
one that sends nothing for :data:`IDLE_TIMEOUT_S` (idle keep-alive, half-open, a request trickling
in) is closed.
"""

from __future__ import annotations

import base64
import hmac
import logging
import os
import re
import secrets
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from sinks.archive.endpoint_body import ClickHouseError as _ClickHouseError
from sinks.archive.endpoint_body import decoded, encoded, form_fields
from sinks.archive.endpoint_file import IDENTITY_PATH, EndpointFile, identity_proof
from sinks.archive.endpoint_listen import Listen, configured

__all__ = ["ArchiveEndpoint"]

log = logging.getLogger(__name__)

_MAX_BODY = 1 << 30  # a request body beyond this is refused (413)
# HTTP parameters that belong to the transport, not to ClickHouse's settings.
_TRANSPORT = frozenset({
    "query", "database", "default_format", "user", "password", "session_id", "session_timeout", "session_check",
    "query_id", "quota_key", "compress", "decompress", "buffer_size", "wait_end_of_query", "client_protocol_version",
    "role", "stacktrace", "close_session", "enable_http_compression", "send_progress_in_http_headers",
    "http_headers_progress_interval_ms", "cancel_http_readonly_queries_on_client_close", "http_zlib_compression_level",
    "http_native_compression_disable_checksumming_on_decompress", "add_http_cors_header",
})
_SETTING_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_INSERT = re.compile(rb"^\s*(INSERT\s+INTO\s+.+?)\s+FORMAT\s+(\w+)[ \t]*(?:\r?\n|$)", re.IGNORECASE | re.DOTALL)
_TRAILING_FORMAT = re.compile(r"\bFORMAT\s+(\w+)\s*;?\s*$", re.IGNORECASE)
_ERROR_CODE = re.compile(r"Code: (\d+)\.")


class _Session:
    """The endpoint's own chDB connection, with the database and settings it has applied."""

    def __init__(self, path: str) -> None:
        import chdb

        self._conn = chdb.connect(path)
        self._lock = threading.Lock()
        self._database = "default"
        self._settings: dict[str, str] = {}
        #: What ``SELECT timezone()`` answers (clickhouse-go reads it at connect), for X-ClickHouse-Timezone.
        self.timezone = self._run("SELECT timezone()", "TabSeparated").decode().strip() or "UTC"

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _run(self, sql: str, fmt: str, params: dict[str, str] | None = None) -> bytes:
        try:
            result = self._conn.query(sql, fmt, params=params or {})
        except Exception as exc:  # chDB raises its own error types; all carry ClickHouse's message
            message = str(exc)
            start = message.find("Code: ")
            message = message[start:] if start > 0 else message
            code = _ERROR_CODE.search(message)
            raise _ClickHouseError(message.strip(), int(code.group(1)) if code else 1002) from None
        data = result.bytes() if hasattr(result, "bytes") else bytes(result)
        return data or b""

    def _prepare(self, database: str | None, settings: dict[str, str]) -> None:
        database = database or "default"  # as a server does: no database named, the default one
        if database != self._database:
            self._run(f"USE {_identifier(database)}", "TabSeparated")
            self._database = database
        for name in [n for n in self._settings if n not in settings]:
            self._run(f"SET {name} = DEFAULT", "TabSeparated")
            del self._settings[name]
        for name, value in settings.items():
            if self._settings.get(name) != value:
                self._run(f"SET {name} = {_literal(value)}", "TabSeparated")
                self._settings[name] = value

    def execute(self, query: bytes, params: dict[str, str], database: str | None, settings: dict[str, str],
                default_format: str | None) -> tuple[bytes, str | None]:
        """Run one request's statement; return the body and its result format (None: no result set)."""
        with self._lock:
            self._prepare(database, settings)
            insert = _INSERT.match(query)
            if insert is not None:
                return self._insert(insert.group(1).decode(), insert.group(2).decode(), query[insert.end():], params)
            try:
                sql = query.decode()
            except UnicodeDecodeError:
                raise _ClickHouseError("the query is not UTF-8", code=27, status=400) from None
            trailing = _TRAILING_FORMAT.search(sql)
            if trailing is not None or default_format:
                fmt = trailing.group(1) if trailing is not None else str(default_format)
                return self._run(sql, fmt, params), fmt
            # A server answers TabSeparated and reports a result set even when it has no rows: with
            # names, a statement that produces one always has a first line, and one that does not, none.
            body = self._run(sql, "TabSeparatedWithNames", params)
            if not body:
                return b"", None
            newline = body.find(b"\n")
            return (body[newline + 1:] if newline >= 0 else b""), "TabSeparated"

    def _insert(self, head: str, fmt: str, data: bytes, params: dict[str, str]) -> tuple[bytes, str | None]:
        if not data:
            raise _ClickHouseError(f"{head} FORMAT {fmt} came without data", code=108, status=400)
        fd, tmp = tempfile.mkstemp(prefix="faultline-insert-", suffix=f".{fmt.lower()}")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            self._run(f"{head} FROM INFILE {_literal(tmp)} FORMAT {fmt}", "TabSeparated", params)
        finally:
            Path(tmp).unlink(missing_ok=True)
        return b"", None


def _identifier(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def _literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


#: At most this many connections are served at once (a thread each); more are closed on arrival.
MAX_CONNECTIONS = 32
#: A connection that sends nothing for this long is closed (the client's pool opens a new one).
IDLE_TIMEOUT_S = 30.0


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive: clickhouse-connect pools its connections
    disable_nagle_algorithm = True  # headers and body are separate writes: no 40 ms delayed-ACK stall

    def setup(self) -> None:
        # Every read of the socket is bounded: idle keep-alive and half-open connections end.
        self.timeout = self.server.idle_timeout_s  # type: ignore[misc]
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug("archive endpoint: " + format, *args)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        url = urlsplit(self.path)
        if url.path.rstrip("/") in ("", "/ping"):
            self._reply(200, b"Ok.\n")
        elif url.path == IDENTITY_PATH:  # the owner proves it holds the token (see prove_identity)
            nonce = dict(parse_qsl(url.query)).get("nonce", "")
            self._reply(200, identity_proof(self.server.token, nonce).encode())
        else:
            self._reply(404, b"not found: POST / for queries, GET /ping for a liveness check\n")

    def do_POST(self) -> None:  # noqa: N802
        try:
            self._authenticate()
            body = self._body()
            fields = dict(parse_qsl(urlsplit(self.path).query, keep_blank_values=True))
            content_type = self.headers.get("Content-Type", "")
            if content_type.startswith("multipart/form-data"):
                fields.update(form_fields(content_type, body))
                body = b""
            query = fields.pop("query", "").encode()
            if query and body:
                query += b"\n"
            query += body
            if not query.strip():
                raise _ClickHouseError("empty query", code=62, status=400)
            if fields.get("compress", "0").strip() not in ("", "0"):
                raise _ClickHouseError("compress=1 (ClickHouse's block compression of Native) is not served here: "
                                       "ask for gzip (Accept-Encoding with enable_http_compression=1) or none",
                                       code=1002, status=400)
            params = {k[len("param_"):]: v for k, v in fields.items() if k.startswith("param_")}
            settings = {k: v for k, v in fields.items() if k not in _TRANSPORT and not k.startswith("param_")}
            bad = [k for k in settings if not _SETTING_NAME.match(k)]
            if bad:
                raise _ClickHouseError(f"not a setting name: {bad[0]!r}", code=115, status=400)
            data, fmt = self.server.session.execute(query, params, fields.get("database"), settings,
                                                    fields.get("default_format"))
        except _ClickHouseError as exc:
            # The body may be unread (refused before it): end the connection rather than misread it.
            self.close_connection = True
            self._reply(exc.status, f"{exc}\n".encode(),
                        {"X-ClickHouse-Exception-Code": str(exc.code), "Connection": "close"})
            return
        headers = {"X-ClickHouse-Summary": "{}", "X-ClickHouse-Timezone": self.server.session.timezone}
        if fmt is not None:
            headers["X-ClickHouse-Format"] = fmt
        data, encoding = encoded(data, self.headers.get("Accept-Encoding", ""), fields.get("enable_http_compression"))
        if encoding is not None:
            headers["Content-Encoding"] = encoding
        self._reply(200, data, headers)

    def _authenticate(self) -> None:
        scheme, _, credentials = self.headers.get("Authorization", "").partition(" ")
        password = ""
        if scheme.lower() == "basic":
            try:
                password = base64.b64decode(credentials, validate=True).decode().partition(":")[2]
            except (ValueError, UnicodeDecodeError):
                password = ""
        password = password or self.headers.get("X-ClickHouse-Key", "")
        if not hmac.compare_digest(password.encode(), self.server.token.encode()):
            raise _ClickHouseError("faultline archive endpoint: wrong or missing token (the endpoint file "
                                   "of the data directory holds it)", code=516, status=401)

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            body = self._chunked()
        else:
            length = int(self.headers.get("Content-Length") or 0)
            if length > _MAX_BODY:
                raise _ClickHouseError(f"request body of {length} bytes is over {_MAX_BODY}", code=1002, status=413)
            body = self.rfile.read(length) if length else b""
        return decoded(body, self.headers.get("Content-Encoding", "").strip().lower())

    def _chunked(self) -> bytes:
        parts: list[bytes] = []
        size = 0
        while True:
            line = self.rfile.readline(1024).split(b";", 1)[0].strip()
            try:
                n = int(line, 16)
            except ValueError:
                raise _ClickHouseError("malformed chunked body", code=1002, status=400) from None
            if n == 0:
                while self.rfile.readline(1024).strip():  # trailers
                    pass
                return b"".join(parts)
            size += n
            if size > _MAX_BODY:
                raise _ClickHouseError(f"request body over {_MAX_BODY} bytes", code=1002, status=413)
            parts.append(self.rfile.read(n))
            self.rfile.readline(1024)  # the CRLF after each chunk

    def _reply(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=UTF-8" if status != 200 else "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False
    block_on_close = False

    def __init__(self, session: _Session, token: str, port: int = 0, max_connections: int = MAX_CONNECTIONS,
                 idle_timeout_s: float = IDLE_TIMEOUT_S) -> None:
        # A fixed port is bound again at once after its previous owner stopped (its closed connections
        # linger in TIME_WAIT); on Linux this never lets two servers listen on one port.
        self.allow_reuse_address = port != 0
        super().__init__(("127.0.0.1", port), _Handler)
        self.session = session
        self.token = token
        self.idle_timeout_s = idle_timeout_s
        self._slots = threading.BoundedSemaphore(max_connections)

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread for the connection while one of the bounded slots is free; else it is closed now."""
        if not self._slots.acquire(blocking=False):
            log.warning("archive endpoint: %d connections open already; closing one more", MAX_CONNECTIONS)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class ArchiveEndpoint:
    """Serve the chDB directory this process owns on loopback, and say where in its endpoint file."""

    def __init__(self, data_dir: str, idle_timeout_s: float = IDLE_TIMEOUT_S, listen: Listen | None = None) -> None:
        listen = listen or configured()  # the sink's fixed port and password, if it set them (.endpoint_listen)
        self.data_dir = data_dir
        self._session = _Session(data_dir)
        try:
            self._server = _Server(self._session, listen.password or secrets.token_urlsafe(32), port=listen.port,
                                   idle_timeout_s=idle_timeout_s)
        except OSError as exc:
            self._session.close()
            raise OSError(exc.errno, f"the archive endpoint cannot listen on 127.0.0.1:{listen.port}, "
                                     f"FAULTLINE_ARCHIVE_ENDPOINT_PORT: {exc.strerror}") from exc
        self.file = EndpointFile(path=data_dir, pid=os.getpid(), port=self._server.server_address[1],
                                 token=self._server.token)
        self._thread = threading.Thread(target=self._server.serve_forever, name="archive-endpoint", daemon=True)
        self._thread.start()
        self.file.write()
        log.debug("archive %s served on 127.0.0.1:%d", data_dir, self.file.port)

    @property
    def port(self) -> int:
        return self.file.port

    def close(self) -> None:
        """Stop serving: remove the endpoint file first, so nobody new comes, then the server."""
        self.file.remove()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
        self._session.close()
