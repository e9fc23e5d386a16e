"""The live embedded archive: one process owns a chDB directory and serves it; the others go through it.

Each test starts a real owner process (:mod:`tests.sinks.archive_owner`, writing all the while)
and opens the same directory here, as ``faultline status`` would while ``faultline sink run``
holds it.
"""

from __future__ import annotations

import base64
import os
import stat
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import urllib3
from clickhouse_connect.driver.exceptions import DatabaseError

from faultline.operator_views import incident_data, status_data
from sinks.archive.connection import ArchiveBusy
from sinks.archive.endpoint_file import ENDPOINT_FILE, EndpointFile
from sinks.archive.store import Archive
from sinks.report import build_report

from .owner_process import owner
from .records import sample_records


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"chdb://{tmp_path / 'archive'}"


def _events(archive: Archive) -> int:
    return int(archive.query("SELECT count() AS n FROM events")[0]["n"])


def test_status_incident_and_report_read_through_the_owner_while_it_writes(url: str) -> None:
    with owner(url) as o, Archive.open(url) as archive:
        assert (o.role, archive.role) == ("owner", "reader")
        status = status_data(archive)
        assert status["dead_letters"] == len(sample_records().deadletters) and {s["source"] for s in status["sources"]} >= {"kernel", "trainer"}
        story = incident_data(archive, "inc-1")
        assert story is not None and story["incident"]["state"] == "resolved"
        assert {e["entry_type"] for e in story["timeline"]} == {"signal", "incident", "command", "result"}
        report = build_report(archive)
        assert report.sections["hardware_share"][0]["hardware_incidents"] == 1
        first = _events(archive)
        deadline = time.monotonic() + 30
        while _events(archive) == first:  # the owner goes on writing while we read
            assert time.monotonic() < deadline, "the owner's writes never showed"
            time.sleep(0.05)
        o.stop()


def test_writes_through_the_owner_keep_their_deduplication_token(url: str) -> None:
    s = sample_records()
    with owner(url), Archive.open(url, "live.replay-1", live="live") as archive:
        assert archive.role == "reader"
        assert archive.write_events(s.events) == len(s.events)
        archive.write_events(s.events)  # the same batch again: dropped by its token, not merged later
        assert _events(archive) == len(s.events)
        # No setting outlives its request: a plain insert after a tokened one is not taken for a repeat.
        client = archive.client
        client.insert("deadletters", [("a", "s", "r", "x", s.deadletters[0].at)],
                      column_names=["id", "stage", "reason", "raw", "at"],
                      settings={"insert_deduplication_token": "tok"})
        client.insert("deadletters", [("b", "s", "r", "y", s.deadletters[0].at)],
                      column_names=["id", "stage", "reason", "raw", "at"])
        assert archive.count("deadletters") == 2


def test_requests_without_the_token_run_nothing(url: str) -> None:
    with owner(url):
        found = EndpointFile.read(url.removeprefix("chdb://"))
        assert found is not None
        http = urllib3.PoolManager()
        base = f"http://127.0.0.1:{found.port}/"
        assert http.request("GET", base + "ping").data == b"Ok.\n"
        create = b"CREATE TABLE default.intruder (x Int8) ENGINE = Memory"
        wrong = {"Authorization": "Basic " + base64.b64encode(b"faultline:guess").decode()}
        for headers in ({}, wrong):
            refused = http.request("POST", base, body=create, headers=headers)
            assert refused.status == 401 and b"token" in refused.data
        with Archive.open(url) as archive:
            assert not archive.query("SELECT name FROM system.tables WHERE name = 'intruder'")


def test_the_endpoint_file_is_private_and_names_its_directory(url: str, tmp_path: Path) -> None:
    data_dir = url.removeprefix("chdb://")
    with owner(url) as o:
        path = Path(data_dir) / ENDPOINT_FILE
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        found = EndpointFile.read(data_dir)
        assert found is not None and (found.path, found.pid) == (data_dir, o.proc.pid)
        # A copy of the directory carries the file along; it must not lead to the original.
        copy = tmp_path / "copy"
        copy.mkdir()
        (copy / ENDPOINT_FILE).write_bytes(path.read_bytes())
        with Archive.open(f"chdb://{copy}") as archive:
            assert archive.role == "owner" and _events(archive) == 0
        o.stop()
    assert not path.exists()  # the owner removes its file when it stops


def test_a_reader_takes_over_when_the_owner_stops(url: str) -> None:
    with owner(url) as o, Archive.open(url) as archive:
        assert archive.role == "reader"
        before = _events(archive)
        o.stop()
        assert _events(archive) >= before  # the next call finds nobody serving and opens the directory
        assert archive.role == "owner"


def test_a_killed_owner_leaves_nothing_that_misleads(url: str) -> None:
    with owner(url) as o:
        o.kill()
        assert EndpointFile.read(url.removeprefix("chdb://")) is not None  # stale: its process is gone
        with Archive.open(url, wait_s=10) as archive:
            assert archive.role == "owner" and archive.latest_incidents()[0]["id"] == "inc-1"


def test_a_holder_that_serves_nothing_is_named_after_the_wait(url: str) -> None:
    with Archive.open(url):
        pass  # migrated, then let go
    with owner(url, bare=True) as o, pytest.raises(ArchiveBusy, match="does not serve it"):
        assert o.role == "bare"
        Archive.open(url, wait_s=1)


def test_query_errors_stay_errors(url: str) -> None:
    with owner(url), Archive.open(url) as archive:
        with pytest.raises(DatabaseError, match="UNKNOWN_TABLE|Unknown table"):
            archive.query("SELECT * FROM no_such_table")
        assert archive.role == "reader"  # an error of the query is no reason to look for another owner
        long = "x" * 20_000  # long binds travel as a multipart form
        assert archive.query("SELECT length({s:String}) AS n", {"s": long}) == [{"n": 20_000}]
        assert archive.query("SELECT {s:String} AS s", {"s": "tab\there 'quoted' \\ back"}) == \
               [{"s": "tab\there 'quoted' \\ back"}]


def test_a_stranger_on_a_dead_owner_s_port_gets_neither_token_nor_rows(url: str) -> None:
    """An endpoint file whose process lives on (a reused pid) but whose port some other server took."""
    seen: list[str] = []

    class Stranger(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _any(self) -> None:
            seen.append(f"{self.command} {self.path} auth={self.headers.get('Authorization')}")
            self.send_response(200)
            self.send_header("Content-Length", "4")
            self.end_headers()
            self.wfile.write(b"Ok.\n")

        do_GET = do_POST = _any

    server = HTTPServer(("127.0.0.1", 0), Stranger)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    alive = subprocess.Popen(["sleep", "60"])
    data_dir = url.removeprefix("chdb://")
    try:
        os.makedirs(data_dir, exist_ok=True)
        EndpointFile(path=data_dir, pid=alive.pid, port=server.server_address[1], token="the-token").write()
        with Archive.open(url, wait_s=10) as archive:
            assert archive.role == "owner"  # not a reader of the stranger
            archive.write_events(sample_records().events)
    finally:
        alive.kill()
        server.shutdown()
    assert seen and all(s.startswith("GET /faultline-identity") and "auth=None" in s for s in seen), seen


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "lz4", "identity"])
def test_compressed_request_bodies_are_read_as_a_server_reads_them(url: str, encoding: str) -> None:
    import gzip
    import zlib

    import lz4.frame

    squash = {"gzip": gzip.compress, "deflate": zlib.compress, "lz4": lz4.frame.compress, "identity": bytes}
    with owner(url):
        found = EndpointFile.read(url.removeprefix("chdb://"))
        assert found is not None
        auth = {"Authorization": "Basic " + base64.b64encode(f"faultline:{found.token}".encode()).decode(),
                "Content-Encoding": encoding}
        answer = urllib3.PoolManager().request("POST", f"http://127.0.0.1:{found.port}/",
                                               body=squash[encoding](b"SELECT 6 * 7"), headers=auth)
        assert (answer.status, answer.data, answer.headers.get("X-ClickHouse-Format")) == (200, b"42\n", "TabSeparated")


def test_one_process_at_a_time_changes_the_schema(url: str) -> None:
    """Issue 28's on-call shift: a `faultline approvals` run as `faultline sink run` started migrated the new
    archive through the sink's endpoint while the sink migrated it itself; the reader's ``CREATE OR REPLACE
    VIEW incident_facts`` took the view from under the sink's next statement and the sink exited 69.
    Whoever opens an archive now creates and migrates it under the directory's schema lock."""
    from sinks.archive.connection import schema_lock

    with owner(url), Archive.open(url) as reader:
        assert reader.role == "reader"
        with schema_lock(reader._conn):
            with pytest.raises(ArchiveBusy, match="changing the schema"):
                Archive.open(url, "live.replay-2", live="live", wait_s=0.5).close()
            opened: list[Archive] = []
            late = threading.Thread(target=lambda: opened.append(Archive.open(url, "live.replay-3", live="live")))
            late.start()
            late.join(1.0)
            assert late.is_alive() and not opened, "it created and migrated while another process held the lock"
        late.join(60)
        [archive] = opened
        with archive:
            assert archive.count("events") == 0  # created and migrated once the lock was let go
