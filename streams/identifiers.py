"""The grammar of hardware and job identifiers, checked from the parser to the command line.

A node name travels from a capture line (or an agent's config) through the
correlator into ``scontrol update NodeName=<node>``, ``ExcNodeList=<nodes>``
and the Kubernetes API. Slurm reads those arguments as *hostlists*:
``gpu-[001-999]`` is a thousand nodes, ``a,b`` two, ``ALL`` every node; a
leading ``-`` would be read as an option. So a name that only looks like one
node could fence a whole fleet while the circuit breaker counts one. The fix
is a grammar strict enough that every valid identifier is exactly one thing
on every command line, enforced where identifiers enter (the capture parser,
the event schema) and again where they leave (the executors, before any
command line is built).

* **node** — 1..253 characters (a DNS name's limit, so Kubernetes node names
  fit) of letters, digits, ``.``, ``_`` and ``-``, starting with a letter or a
  digit; not ``ALL`` (any case).
* **GPU** — 1..128 characters of letters, digits, ``.``, ``_``, ``-``, ``:``
  and ``/``, starting with a letter or a digit (NVML UUIDs ``GPU-…``, MIG
  ``MIG-…`` and ``MIG-GPU-…/1/0``, and the correlator's ``<node>:<index>``).
* **job** — 1..256 characters of letters, digits, ``.``, ``_``, ``-``, ``:``,
  ``@``, ``+`` and ``/`` (a Kubernetes ``namespace/name``), starting with a
  letter or a digit; not ``ALL``.

None of them admits whitespace, control characters, brackets, commas, quotes,
``=``, ``;`` or ``$``. The check functions raise ``ValueError`` with a reason a
person can act on; the ``Annotated`` types apply them inside pydantic models.

Every event names a node (most a GPU too), and a fleet has few of them, each named
again and again: a name once found valid is remembered (:class:`_Accepted`, at
most a few tens of thousands per kind), so decoding a routine sample costs a set
lookup instead of the grammar. Only valid names are remembered; a bad one is
judged afresh every time.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

__all__ = [
    "GPU_ID",
    "GpuId",
    "JOB_ID",
    "JobId",
    "MAX_GPU_ID",
    "MAX_JOB_ID",
    "MAX_NODE_ID",
    "NODE_ID",
    "NodeId",
    "check_gpu",
    "check_job",
    "check_node",
    "why_not_gpu",
    "why_not_job",
    "why_not_node",
]

MAX_NODE_ID = 253
MAX_GPU_ID = 128
MAX_JOB_ID = 256
NODE_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_NODE_ID - 1}}}")
GPU_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._:/-]{{0,{MAX_GPU_ID - 1}}}")
JOB_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._:@+/-]{{0,{MAX_JOB_ID - 1}}}")
_RESERVED = frozenset({"all"})  # Slurm's every-node keyword


def _why_not(what: str, value: object, grammar: re.Pattern[str], limit: int, allowed: str) -> str | None:
    if not isinstance(value, str):
        return f"a {what} id must be a string, not {type(value).__name__}"
    if grammar.fullmatch(value) and (len(value) != 3 or value.lower() not in _RESERVED):  # the usual case, fast
        return None
    shown = repr(value if len(value) <= 80 else value[:77] + "...")
    if len(value) > limit:
        return f"{what} id {shown} is longer than {limit} characters"
    if value.lower() in _RESERVED:
        return f"{what} id {shown} is a reserved word (Slurm reads it as every node)"
    return (f"{what} id {shown} is not 1-{limit} characters of {allowed} starting with a letter or digit "
            "(no brackets, commas, whitespace or control characters: a command line must read it as one "
            f"{what})")


def why_not_node(value: object) -> str | None:
    """None when ``value`` is a valid node name, else why not."""
    return _why_not("node", value, NODE_ID, MAX_NODE_ID, "letters, digits, '.', '_', '-'")


def why_not_gpu(value: object) -> str | None:
    """None when ``value`` is a valid GPU id, else why not."""
    return _why_not("GPU", value, GPU_ID, MAX_GPU_ID, "letters, digits, '.', '_', '-', ':', '/'")


def why_not_job(value: object) -> str | None:
    """None when ``value`` is a valid job id or name, else why not."""
    return _why_not("job", value, JOB_ID, MAX_JOB_ID, "letters, digits, '.', '_', '-', ':', '@', '+', '/'")


class _Accepted:
    """Values a check accepted before, bounded: forgotten all at once when full (then learnt again)."""

    def __init__(self, limit: int = 50_000) -> None:
        self._seen: set[str] = set()
        self._limit = limit

    def __contains__(self, value: object) -> bool:
        return value in self._seen

    def add(self, value: str) -> None:
        if len(self._seen) >= self._limit:
            self._seen.clear()
        self._seen.add(value)


_NODES, _GPUS, _JOBS = _Accepted(), _Accepted(), _Accepted()


def check_node(value: str) -> str:
    """``value`` if it is a valid node name, else ValueError saying why."""
    if value in _NODES:
        return value
    if (why := why_not_node(value)) is not None:
        raise ValueError(why)
    _NODES.add(value)
    return value


def check_gpu(value: str) -> str:
    """``value`` if it is a valid GPU id, else ValueError saying why."""
    if value in _GPUS:
        return value
    if (why := why_not_gpu(value)) is not None:
        raise ValueError(why)
    _GPUS.add(value)
    return value


def check_job(value: str) -> str:
    """``value`` if it is a valid job id or name, else ValueError saying why."""
    if value in _JOBS:
        return value
    if (why := why_not_job(value)) is not None:
        raise ValueError(why)
    _JOBS.add(value)
    return value


NodeId = Annotated[str, AfterValidator(check_node)]
GpuId = Annotated[str, AfterValidator(check_gpu)]
JobId = Annotated[str, AfterValidator(check_job)]
