"""Grafana on the embedded archive: the owner's endpoint answers the ClickHouse plugin's HTTP requests.

Grafana itself is not run here. Each request is built by hand, byte for byte as the plugin's
driver sends it (clickhouse-go v2's HTTP transport, see :mod:`sinks.archive.endpoint`): ``POST
/?database=<default database>&default_format=Native`` (Go's ``url.Values`` sorts its keys), the
SQL as the body, basic auth, ``Accept-Encoding: gzip``, the driver's ``User-Agent``. The answers
are decoded as Native (clickhouse-connect's reader). The data source is the one provisioned in
``deploy/grafana/embedded-archive``, so its port, user and database are the ones tested.

The owner is a real process (:mod:`tests.sinks.archive_owner`, ``--still``: its rows stay put)
that serves at the fixed port and with the password from a file, as ``faultline sink run`` does
with ``FAULTLINE_ARCHIVE_ENDPOINT_PORT`` and ``FAULTLINE_ARCHIVE_ENDPOINT_PASSWORD_FILE``.
"""

from __future__ import annotations

import base64
import gzip
import http.client
import os
import socket
import subprocess
import sys
import zoneinfo
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import yaml
from clickhouse_connect.driver.transform import NativeTransform

from common.settings import REPO_ROOT
from sinks.archive.endpoint_file import EndpointFile
from sinks.archive.endpoint_listen import (
    MIN_PASSWORD_CHARS,
    PasswordFileError,
    listen_for,
    password_from_file,
)
from sinks.archive.store import Archive
from tests.deploy.test_grafana_panels import NAMESPACE, QUERIES, render

from .owner_process import Owner, owner
from .records import sample_records

try:  # the reader clickhouse-connect itself uses: its C buffer where built, else the Python one
    from clickhouse_connect.driverc.buffer import ResponseBuffer
except ImportError:  # pragma: no cover
    from clickhouse_connect.driver.buffer import ResponseBuffer  # type: ignore[assignment]

PROVISIONED = yaml.safe_load((REPO_ROOT / "deploy" / "grafana" / "embedded-archive" / "clickhouse-embedded.yaml")
                             .read_text())["datasources"][0]
DATA = PROVISIONED["jsonData"]
USER_AGENT = "clickhouse-go/2.40.3 (database/sql; lv:go/1.24.4; os:linux) grafana/12.2.0 clickhouse-datasource/4.11.1"
SECOND_JOB = "j2"  # the second namespace's one job (the sample's events, job renamed)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes  # as received (compressed, if the endpoint compressed it)

    @property
    def plain(self) -> bytes:
        """The body as clickhouse-go reads it: gunzipped only when Content-Encoding says gzip."""
        return gzip.decompress(self.body) if self.headers.get("content-encoding") == "gzip" else self.body

    def native(self) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
        """The columns and rows of a Native answer (an empty body: no columns, no rows)."""
        assert self.status == 200, self.body[:500]
        if not self.plain:
            return (), []

        class Source:
            last_message = None

            def __init__(self, data: bytes) -> None:
                self.gen = iter([data])

            def close(self) -> None:
                pass

        result = NativeTransform.parse_response(ResponseBuffer(Source(self.plain)))
        return tuple(result.column_names), [tuple(row) for row in result.result_rows]


class Plugin:
    """One keep-alive HTTP connection of the plugin's driver to the provisioned data source."""

    def __init__(self, port: int, password: str | None, user: str = DATA["username"]) -> None:
        self.port, self.password, self.user = port, password, user
        self.conn = http.client.HTTPConnection(DATA["host"], port, timeout=60)

    def close(self) -> None:
        self.conn.close()

    def send(self, sql: str, settings: dict[str, str] | None = None, headers: dict[str, str] | None = None
             ) -> Answer:
        """``sql`` as clickhouse-go's httpConnect.query sends it, with the data source's custom ``settings``."""
        params = {"database": DATA["defaultDatabase"], "default_format": "Native", **(settings or {})}
        body = sql.encode()
        self.conn.putrequest("POST", "/?" + urlencode(sorted(params.items())), skip_accept_encoding=True)
        sent = {"User-Agent": USER_AGENT, "Content-Length": str(len(body)), "Accept-Encoding": "gzip"}
        if self.password is not None:  # from the URL's user info, as Go's client sends it
            sent["Authorization"] = "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        for name, value in {**sent, **(headers or {})}.items():
            self.conn.putheader(name, value)
        self.conn.endheaders(body)
        response = self.conn.getresponse()
        data = response.read()
        answer = Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, data)
        if response.will_close:
            self.conn.close()  # http.client reconnects on the next request
        return answer

    def connect(self) -> str:
        """clickhouse-go's dial and ping (the plugin's Connect, and its health check): the server's time zone."""
        tz = self.send("SELECT timezone()")
        (columns, [(zone,)]) = tz.native()
        assert columns == ("timezone()",) and tz.headers["x-clickhouse-format"] == "Native"
        zoneinfo.ZoneInfo(zone)  # Go's time.LoadLocation must know it
        columns, [(version,)] = self.send("SELECT version()").native()
        assert columns == ("version()",) and [int(p) for p in version.split(".")[:3]] >= [23, 0, 0], version
        assert self.send("SELECT 1").native() == (("1",), [(1,)])  # ping: one column named "1"
        return str(zone)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _password_file(tmp_path: Path, text: str, mode: int = 0o640) -> Path:
    path = tmp_path / "endpoint-password"
    path.write_text(text)
    path.chmod(mode)
    return path


@dataclass
class Served:
    url: str
    port: int
    password: str
    env: dict[str, str]  # the two settings the owner serves with
    owner: Owner


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """An owner serving at a fixed port with the password from a file, as the sink is configured for Grafana."""
    port, password = _free_port(), "grafana-" + "p" * 24
    env = {"FAULTLINE_ARCHIVE_ENDPOINT_PORT": str(port),
           "FAULTLINE_ARCHIVE_ENDPOINT_PASSWORD_FILE": str(_password_file(tmp_path, password + "\n"))}
    url = f"chdb://{tmp_path / 'archive'}"
    with owner(url, still=True, env=env) as o:
        yield Served(url, port, password, env, o)


def _plain(value: Any) -> Any:
    """A value as both readers agree on it: datetimes in UTC without a zone, containers element-wise."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _plain(v)) for k, v in value.items()))
    return value


def _rows(rows: list[tuple[Any, ...]]) -> list[str]:
    return sorted(repr(_plain(row)) for row in rows)  # ties may come in any order


def test_the_provisioned_data_source_speaks_http_to_the_loopback_endpoint() -> None:
    assert PROVISIONED["type"] == "grafana-clickhouse-datasource"
    assert (DATA["protocol"], DATA["secure"], DATA["host"]) == ("http", False, "127.0.0.1")
    assert isinstance(DATA["port"], int) and DATA["port"] > 0
    assert PROVISIONED["secureJsonData"]["password"].startswith("$__file{/run/secrets/")  # never in jsonData
    assert "password" not in DATA


def test_the_plugin_connects_and_its_health_check_passes(served: Served) -> None:
    plugin = Plugin(served.port, served.password)
    try:
        zone = plugin.connect()  # three requests on one keep-alive connection
        assert plugin.send("SELECT 1").headers["x-clickhouse-timezone"] == zone
        # The data source's custom settings and row limit travel as URL parameters, per request.
        limited = plugin.send("SELECT number FROM system.numbers LIMIT 10", {"limit": "3", "max_execution_time": "60"})
        assert limited.native() == (("number",), [(0,), (1,), (2,)])
        assert len(plugin.send("SELECT number FROM system.numbers LIMIT 10").native()[1]) == 10  # not kept
        error = plugin.send("SELECT * FROM no_such_table")  # what the plugin shows as a downstream error
        assert error.status >= 400 and b"DB::Exception" in error.body and "x-clickhouse-exception-code" in error.headers
    finally:
        plugin.close()
    found = EndpointFile.read(served.url.removeprefix("chdb://"))
    assert found is not None and (found.port, found.token) == (served.port, served.password)


def test_answers_are_compressed_only_as_a_server_compresses_them(served: Served) -> None:
    """clickhouse-go asks gzip on every query but the plugin does not set enable_http_compression:
    plain then; with the setting (a custom setting of the data source), gzip, said in Content-Encoding."""
    plugin = Plugin(served.port, served.password)
    sql = "SELECT number, toString(number) AS s FROM system.numbers LIMIT 1000"
    try:
        plain = plugin.send(sql)
        squeezed = plugin.send(sql, {"enable_http_compression": "1"})
        refused = plugin.send(sql, {"compress": "1"})  # ClickHouse's block compression (LZ4 over HTTP)
    finally:
        plugin.close()
    assert "content-encoding" not in plain.headers
    assert squeezed.headers["content-encoding"] == "gzip" and len(squeezed.body) < len(plain.body)
    assert squeezed.plain == plain.body and squeezed.native() == plain.native()
    assert refused.status == 400 and b"compress=1" in refused.body


def _renamed(records: list[Any]) -> list[Any]:
    """The records with job ``j1`` named :data:`SECOND_JOB` wherever it appears."""
    return [type(r).model_validate_json(r.model_dump_json().replace('"j1"', f'"{SECOND_JOB}"')) for r in records]


@pytest.fixture
def namespaces(served: Served) -> dict[str, str]:
    """The live namespace (the owner's sample) and a second one holding the sample under another job, without
    its dead letters: namespace -> its database."""
    s = sample_records()
    with Archive.open(served.url) as live:
        second = f"{live.namespace}.grafana-second"
        with Archive.open(served.url, second, live=live.namespace) as other:
            other.write_events(_renamed(s.events))
            other.write_incidents(_renamed(s.incidents))
            other.write_commands(_renamed(s.commands))
            other.write_results(_renamed(s.results))
            return {live.namespace: live.database, second: other.database}


def test_every_dashboard_query_answers_the_plugin_for_each_namespace(served: Served,
                                                                    namespaces: dict[str, str]) -> None:
    """Each panel and variable query, its macros expanded as the plugin expands them, answers in Native
    with the columns its panel expects and the rows the same query gives clickhouse-connect."""
    start, end = datetime(2025, 4, 22, 2, 0, tzinfo=UTC), datetime(2025, 4, 22, 5, 0, tzinfo=UTC)  # the sample's span
    interval = (end - start) / 200
    plugin = Plugin(served.port, served.password)
    shown: dict[tuple[str, str], list[str]] = {}
    try:
        with Archive.open(served.url) as direct:  # the data source's own database, as Grafana's
            for namespace, database in namespaces.items():
                job = SECOND_JOB if database != direct.database else "j1"
                for q in QUERIES:
                    sql = render(q.sql, start, end, interval, {"job": job, NAMESPACE: database})
                    assert "$" not in sql, f"{q.id}: unexpanded {sql}"
                    columns, rows = plugin.send(sql).native()
                    expected = direct.query(sql)
                    if rows or expected:
                        assert list(columns) == q.expected["columns"], f"{namespace} {q.id}"
                    assert _rows(rows) == _rows([tuple(r.values()) for r in expected]), f"{namespace} {q.id}"
                    shown[(namespace, q.id)] = _rows(rows)
    finally:
        plugin.close()
    live, second = namespaces
    namespaced = [q.id for q in QUERIES if "${" + NAMESPACE in q.sql]  # qualified, or a report copy's db
    assert any(shown[(live, i)] for i in namespaced) and any(shown[(second, i)] for i in namespaced)
    assert any(shown[(live, i)] != shown[(second, i)] for i in namespaced)  # the variable picks the rows
    assert not any("'j1'" in row for i in namespaced for row in shown[(second, i)])
    assert not any(f"'{SECOND_JOB}'" in row for i in namespaced for row in shown[(live, i)])
    timeline = [q.id for q in QUERIES if q.dashboard == "faultline-incident-timeline" and q.expected["rows"]]
    assert timeline and all(shown[(second, i)] for i in timeline)  # its job's story, from its own database


@pytest.mark.parametrize("how", ["missing", "wrong basic", "wrong key", "empty"])
def test_a_request_without_the_password_runs_no_sql(served: Served, how: str) -> None:
    password = {"missing": None, "wrong basic": "p" * 32, "wrong key": None, "empty": ""}[how]
    headers = {"X-ClickHouse-User": "faultline", "X-ClickHouse-Key": "k" * 32} if how == "wrong key" else None
    plugin = Plugin(served.port, password)
    try:
        refused = plugin.send("CREATE TABLE default.intruder (x Int8) ENGINE = Memory", headers=headers)
        assert refused.status == 401 and b"token" in refused.body
        right = Plugin(served.port, served.password)
        assert right.send("SELECT count() FROM system.tables WHERE name = 'intruder'").native() == (
            ("count()",), [(0,)])
        right.close()
    finally:
        plugin.close()


def test_the_port_and_password_outlive_the_owner(served: Served) -> None:
    """A data source configured once: the next owner serves at the same address with the same password."""
    served.owner.stop()
    with owner(served.url, still=True, env=served.env) as again:
        plugin = Plugin(served.port, served.password)
        try:
            plugin.connect()
            [(n,)] = plugin.send("SELECT count() FROM events").native()[1]
            assert n == len(sample_records().events)  # the same archive, written by the first owner
        finally:
            plugin.close()
        again.stop()


def test_without_the_settings_the_port_and_token_are_random(tmp_path: Path) -> None:
    url = f"chdb://{tmp_path / 'archive'}"
    with owner(url, still=True):
        found = EndpointFile.read(url.removeprefix("chdb://"))
        assert found is not None and len(found.token) >= 40
        assert Plugin(found.port, found.token).send("SELECT 1").native() == (("1",), [(1,)])


@pytest.mark.parametrize(("text", "mode", "why"), [
    ("p" * 32, 0o644, "read or written by any user"),
    ("p" * 32, 0o602, "read or written by any user"),
    ("", 0o600, "empty"),
    ("\n", 0o600, "empty"),
    ("p" * (MIN_PASSWORD_CHARS - 1), 0o600, f"{MIN_PASSWORD_CHARS} or more"),
    ("p" * 20 + "\n" + "q" * 20, 0o600, "one line"),
])
def test_a_password_file_that_would_weaken_the_endpoint_is_refused(tmp_path: Path, text: str, mode: int,
                                                                   why: str) -> None:
    path = _password_file(tmp_path, text, mode)
    with pytest.raises(PasswordFileError, match=why):
        password_from_file(path)


def test_the_password_file_rules(tmp_path: Path) -> None:
    good = _password_file(tmp_path, "p" * 32 + "\n", 0o640)  # Grafana's user may share the file's group
    assert listen_for(18123, good).password == "p" * 32 and "p" * 32 not in repr(listen_for(18123, good))
    assert listen_for(0, None).password is None
    with pytest.raises(PasswordFileError, match="cannot read"):
        password_from_file(tmp_path / "absent")
    link = tmp_path / "link"
    link.symlink_to(good)
    with pytest.raises(PasswordFileError, match="cannot read"):  # a link may be swapped for another file
        password_from_file(link)
    with pytest.raises(PasswordFileError, match="not a regular file"):
        password_from_file(Path("/dev/null"))


def test_the_owner_and_the_sink_refuse_to_serve_with_a_readable_password_file(tmp_path: Path) -> None:
    """Fail closed where it is configured: no owner serves, and ``faultline sink run`` stops before the broker."""
    path = _password_file(tmp_path, "p" * 32, 0o644)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "FAULTLINE_ARCHIVE_ENDPOINT_PASSWORD_FILE": str(path),
           "FAULTLINE_DATA_DIR": str(tmp_path / "data"), "FAULTLINE_KAFKA": "127.0.0.1:1"}
    url = f"chdb://{tmp_path / 'archive'}"
    done = subprocess.run([sys.executable, "-m", "tests.sinks.archive_owner", url], env=env, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and "refused" in done.stdout and "any user" in done.stdout, done.stdout
    assert not (tmp_path / "archive").exists()
    sink = subprocess.run([sys.executable, "-m", "faultline.cli", "sink", "run"], env=env, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert sink.returncode == 1 and "FAULTLINE_ARCHIVE_ENDPOINT_PASSWORD_FILE" in sink.stderr, sink.stderr
    assert not (tmp_path / "data" / "archive").exists()


def test_a_taken_port_is_named(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "FAULTLINE_ARCHIVE_ENDPOINT_PORT": str(port)}
        done = subprocess.run([sys.executable, "-m", "tests.sinks.archive_owner", f"chdb://{tmp_path / 'a'}"],
                              env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
    assert done.returncode != 0 and "FAULTLINE_ARCHIVE_ENDPOINT_PORT" in done.stdout + done.stderr

