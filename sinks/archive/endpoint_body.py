"""What travels in the endpoint's request and answer bodies: their compression, forms, and errors.

Requests: a body sent with ``Content-Encoding`` (gzip, deflate, lz4, zstd: clickhouse-connect
compresses inserts) is read as a server reads it; ``multipart/form-data`` fields are the
request's parameters.

Answers, as a ClickHouse server gives them: compressed only when the request both sets
``enable_http_compression=1`` and names an encoding in ``Accept-Encoding`` that is served here
(gzip or deflate; the answer says which in ``Content-Encoding``), else plain. clickhouse-go
(the Grafana plugin's driver) asks ``Accept-Encoding: gzip`` on every query but decompresses
only an answer whose ``Content-Encoding`` says gzip, so a plain answer is always understood.
ClickHouse's own block compression of Native (``compress=1``: clickhouse-go's HTTP transport with
LZ4 or ZSTD) is not served: such a request is refused, never answered in a form it would misread.
"""

from __future__ import annotations

import gzip
import importlib
import zlib
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

__all__ = ["ClickHouseError", "decoded", "encoded", "form_fields"]


class ClickHouseError(Exception):
    """An error answered as a server does: its ClickHouse code, its HTTP status, the message."""

    def __init__(self, message: str, code: int = 1002, status: int = 500) -> None:
        super().__init__(message)
        self.code, self.status = code, status


def decoded(body: bytes, encoding: str) -> bytes:
    """A request body as sent with ``Content-Encoding`` (clickhouse-connect compresses inserts)."""
    try:
        if encoding in ("", "identity"):
            return body
        if encoding == "gzip":
            return gzip.decompress(body)
        if encoding == "deflate":
            return zlib.decompress(body)
        if encoding == "lz4":
            import lz4.frame  # clickhouse-connect's own dependency

            return bytes(lz4.frame.decompress(body))
        if encoding == "zstd":
            zstd = _zstd()
            if zstd is not None:
                return bytes(zstd.decompress(body))
    except (OSError, ValueError, RuntimeError, zlib.error) as exc:
        raise ClickHouseError(f"the {encoding} request body does not decompress: {exc}", code=1002,
                              status=400) from None
    raise ClickHouseError(f"request bodies in {encoding!r} are not served: send identity, gzip, deflate, lz4 or zstd",
                          code=1002, status=415)


#: Answer encodings served, in the order preferred when a client accepts several.
ANSWER_ENCODINGS = ("gzip", "deflate")


def encoded(body: bytes, accept_encoding: str, enabled: str | None) -> tuple[bytes, str | None]:
    """An answer body and its ``Content-Encoding`` (None: plain), as a server compresses it.

    Only with ``enable_http_compression`` set to 1 (a server's default is 0), and only in an
    encoding the client accepts (``Accept-Encoding``; a ``q=0`` refuses one).
    """
    if enabled is None or enabled.strip().lower() not in ("1", "true"):
        return body, None
    accepted = set()
    for item in accept_encoding.lower().split(","):
        name, _, params = item.strip().partition(";")
        if params.replace(" ", "") not in ("q=0", "q=0.0", "q=0.00", "q=0.000"):
            accepted.add(name.strip())
    for name in ANSWER_ENCODINGS:
        if name in accepted:
            return (gzip.compress(body, compresslevel=3) if name == "gzip" else zlib.compress(body, 3)), name
    return body, None


def _zstd() -> Any:
    """The zstd module clickhouse-connect compresses with where it has one (Python 3.14's, or the backport)."""
    for name in ("compression.zstd", "backports.zstd"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def form_fields(content_type: str, body: bytes) -> dict[str, str]:
    """The text fields of a ``multipart/form-data`` body (clickhouse-connect sends long binds so)."""
    message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    fields: dict[str, str] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            fields[name] = payload.decode()
    return fields
