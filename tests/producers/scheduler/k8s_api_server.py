"""A tiny Kubernetes API server on 127.0.0.1 that serves recorded list responses.

The real ``kubernetes.client`` talks to it over HTTP, so requests, paging and
the client's deserialisation of the JSON into ``V1Pod`` / ``V1Node`` run as
they do against a cluster. What it serves is the current *scene*: a pod list
and a node list from ``k8s_api/`` (``PodList`` / ``NodeList`` JSON as the API
writes it). It implements just enough of the list API: namespaced and
cluster-wide pods, nodes, ``labelSelector`` (``k=v`` terms), ``limit`` and
``continue``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["RECORDED", "FakeApiServer", "fake_api_server"]

RECORDED = Path(__file__).with_name("k8s_api")


class FakeApiServer:
    """What the handler serves; switch scenes between polls."""

    def __init__(self) -> None:
        self.pods: dict[str, Any] = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []}
        self.nodes: dict[str, Any] = {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": []}
        self.requests: list[str] = []
        self.url = ""

    def scene(self, pods: str | None = None, nodes: str | None = None) -> None:
        """Serve these recorded files from now on (names in ``k8s_api/``)."""
        if pods:
            self.pods = json.loads((RECORDED / pods).read_text())
        if nodes:
            self.nodes = json.loads((RECORDED / nodes).read_text())

    def respond(self, path: str, query: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        parts = path.strip("/").split("/")
        if parts == ["api", "v1", "nodes"]:
            return 200, self._page(self.nodes, query, lambda item: True)
        if parts == ["api", "v1", "pods"]:
            return 200, self._page(self.pods, query, lambda item: True)
        if len(parts) == 5 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "pods":
            return 200, self._page(self.pods, query, lambda item: item["metadata"].get("namespace") == parts[3])
        return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
                     "message": f"the server could not find the requested resource ({path})"}

    def _page(self, doc: dict[str, Any], query: dict[str, list[str]], keep: Any) -> dict[str, Any]:
        terms = [t.split("=", 1) for t in query.get("labelSelector", [""])[0].split(",") if "=" in t]
        items = [i for i in doc["items"] if keep(i)
                 and all(i["metadata"].get("labels", {}).get(k) == v for k, v in terms)]
        start = int(query.get("continue", ["0"])[0])
        limit = int(query.get("limit", [str(len(items) or 1)])[0])
        meta = dict(doc.get("metadata") or {})
        if start + limit < len(items):
            meta["continue"] = str(start + limit)
            meta["remainingItemCount"] = len(items) - start - limit
        return {**doc, "metadata": meta, "items": items[start : start + limit]}


@contextmanager
def fake_api_server() -> Iterator[FakeApiServer]:
    """A running server on a free loopback port; ``.url`` is its address."""
    api = FakeApiServer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            url = urlsplit(self.path)
            api.requests.append(self.path)
            status, body = api.respond(url.path, parse_qs(url.query))
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    api.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
