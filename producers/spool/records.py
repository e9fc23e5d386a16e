"""How a spool record is stored: ``<crc32 of the payload, 8 hex digits> <payload>``, one line.

The payload is the caller's line (ending in its newline). Lines without the checksum (written by
an earlier version) are read as they are. The publisher's payload is one JSON object: the Kafka
record's topic, key, value, the source of its events and, for a batch, how many it holds.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

__all__ = ["CRC_LEN", "frame", "parse_line", "record_line", "unframe"]

CRC_LEN = 8


def frame(line: bytes) -> bytes:
    """A payload line as stored: its CRC-32, a space, the line."""
    return b"%08x " % zlib.crc32(line) + line


def unframe(raw: bytes, legacy_ok: bool = True) -> bytes | None:
    """The payload of a stored line, or None when it is torn or fails its checksum (or is unframed where
    ``legacy_ok`` is False: after a checksummed line, an unframed one can only be garbage)."""
    if not raw.endswith(b"\n"):
        return None
    if raw[CRC_LEN:CRC_LEN + 1] == b" ":
        payload = raw[CRC_LEN + 1:]
        try:
            crc = int(raw[:CRC_LEN], 16)
        except ValueError:
            return None
        return payload if zlib.crc32(payload) == crc else None
    if legacy_ok and raw.startswith(b"{"):
        return raw  # written before records carried a checksum
    return None


def record_line(topic: str, key: bytes, value: bytes, source: str, events: int = 1) -> bytes:
    """The publisher's payload line for one Kafka record."""
    record: dict[str, Any] = {"topic": topic, "key": key.decode(), "source": source, "value": value.decode()}
    if events != 1:
        record["events"] = events  # a batch record (lines without it, older ones too, hold one)
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


def parse_line(line: bytes) -> tuple[str, bytes, int]:
    """The source, value and number of events of a publisher's payload line (``unknown`` where unreadable)."""
    try:
        record = json.loads(line)
        return str(record["source"]), str(record["value"]).encode(), int(record.get("events", 1))
    except (ValueError, KeyError, TypeError, AttributeError):
        return "unknown", b"", 1
