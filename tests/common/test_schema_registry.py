"""Registering the topics' schemas in a Confluent-compatible registry, through confluent-kafka's client.

The registry here is a small stand-in speaking the part of the Confluent REST API that registration
uses (``POST /subjects/{subject}/versions``: same schema, same id; basic auth), on 127.0.0.1.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from common.schema_registry import register_schemas, subject
from faultline.cli import main
from streams.topics import TOPICS


class _Registry(ThreadingHTTPServer):
    def __init__(self, auth: str | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.auth = auth
        self.ids: dict[str, int] = {}
        self.subjects: dict[str, list[int]] = {}
        self.requests: list[tuple[str, str]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: _Registry

    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802
        path = urlsplit(self.path).path
        self.server.requests.append(("POST", path))
        if self.server.auth and self.headers.get("Authorization") != "Basic " + base64.b64encode(
                self.server.auth.encode()).decode():
            self._reply(401, {"error_code": 40101, "message": "Unauthorized"})
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        parts = path.strip("/").split("/")
        if len(parts) != 3 or parts[0] != "subjects" or parts[2] != "versions" or body.get("schemaType") != "JSON":
            self._reply(422, {"error_code": 42201, "message": "Invalid schema"})
            return
        json.loads(body["schema"])  # must be JSON
        sid = self.server.ids.setdefault(body["schema"], len(self.server.ids) + 1)
        versions = self.server.subjects.setdefault(unquote(parts[1]), [])
        if sid not in versions:
            versions.append(sid)
        self._reply(200, {"id": sid})


@pytest.fixture
def registry() -> Iterator[_Registry]:
    server = _Registry(auth="faultline:s3cret")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_every_topic_schema_is_registered_under_topic_value_once(registry: _Registry) -> None:
    done = register_schemas(registry.url, "ns1", "faultline", "s3cret")
    assert {r.subject for r in done} == {subject("ns1", s) for s in TOPICS} == set(registry.subjects)
    assert "ns1.events-value" in registry.subjects
    again = register_schemas(registry.url, "ns1", "faultline", "s3cret")
    assert [r.schema_id for r in again] == [r.schema_id for r in done]  # idempotent: the same ids
    assert all(len(v) == 1 for v in registry.subjects.values())
    assert all(r.uri.startswith("urn:faultline:schema:") for r in done)


def test_a_refusal_names_the_subject(registry: _Registry) -> None:
    with pytest.raises(RuntimeError, match="refused ns1.*-value"):
        register_schemas(registry.url, "ns1", "faultline", "wrong")


def test_cli_registers_when_a_registry_is_configured(registry: _Registry, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schemas", "register"]) == 2  # none configured: a usage error that says which setting
    assert "FAULTLINE_SCHEMA_REGISTRY" in capsys.readouterr().err
    monkeypatch.setenv("FAULTLINE_SCHEMA_REGISTRY", registry.url)
    monkeypatch.setenv("FAULTLINE_SCHEMA_REGISTRY_USERNAME", "faultline")
    monkeypatch.setenv("FAULTLINE_SCHEMA_REGISTRY_PASSWORD", "s3cret")
    monkeypatch.setenv("FAULTLINE_NAMESPACE", "ns2")
    assert main(["schemas", "register", "--json"]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert {r["subject"] for r in doc["registered"]} == {subject("ns2", s) for s in TOPICS}
    assert "s3cret" not in out.out + out.err
