"""Cells: the unit of correlation, and how an event says which cell it belongs to.

The correlator reasons across the nodes of a *cell* -- a set of nodes that no
job, rack or power domain crosses (a job's ranks, a rack's switch, a PSU's
GPUs, the quarantine ledger and the restart rate limit all live inside one).
So every event of a cell must reach one engine, in order. Producers key every
event by its cell (``FAULTLINE_CELL``): the Kafka partitioner sends one key to
one partition, whatever the partition count, so a cell never straddles two
partitions, and the events of one node keep their order inside it.

A partition may hold several cells; the correlator keeps one engine per cell
and picks it by the record's key. Every producer of one namespace must use
the same partitioner for the same key to land in the same partition:
faultline's are all librdkafka's default (``consistent_random``, CRC32 of the
key).

Keys carry a prefix (``cell:``) so the correlator can tell them from the keys
events had before cells existed (the node or job name): a record without the
prefix, or without a key, belongs to the worker's own cell, which keeps a
namespace that was one cell judging as one after an upgrade.
"""

from __future__ import annotations

import re

__all__ = ["DEFAULT_CELL", "CELL_NAME", "cell_key", "cell_of_key", "check_cell"]

DEFAULT_CELL = "default"
CELL_NAME = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
_PREFIX = b"cell:"


def check_cell(name: str) -> str:
    """``name`` if it can name a cell (letters, digits, ``.``, ``_``, ``-``; up to 128), else ValueError."""
    if not CELL_NAME.fullmatch(name):
        raise ValueError(f"cell name {name!r} must be 1-128 characters of letters, digits, '.', '_' or '-'")
    return name


def cell_key(cell: str) -> bytes:
    """The Kafka key of every event of ``cell``."""
    return _PREFIX + check_cell(cell).encode()


def cell_of_key(key: bytes | None, default: str) -> str:
    """The cell a record's key names; ``default`` for a key from before cells (or none)."""
    if key is not None and key.startswith(_PREFIX) and len(key) > len(_PREFIX):
        return key[len(_PREFIX):].decode("utf-8", "replace")
    return default
