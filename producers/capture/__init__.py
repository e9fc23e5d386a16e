"""One capture line (contract, section 1) -> zero or more canonical events.

:func:`parse_capture_line` reads one JSON Lines record and returns the
:class:`~streams.events.Event` s it carries, or raises :class:`BadInput` with
the reason (the caller dead-letters the line and goes on). Unknown fields are
ignored; types are checked strictly (an integer field takes a JSON integer,
not ``3.0``, ``"3"`` or ``true``).

A line is at most :data:`MAX_LINE_BYTES` (512 KiB) long, checked before it is
decoded. Every :class:`BadInput` has a ``kind`` (:data:`BAD_KINDS`: too long,
invalid UTF-8, not JSON, a missing field, a wrong type, an unknown source, a bad
timestamp, an invalid value) for the metric. One line is judged alone here;
what needs the lines around it (duplicates, a timestamp far from its
neighbours') is :mod:`producers.capture.screen`'s.

Envelope: ``ts`` (RFC 3339 with an offset, ``Z`` accepted, years 2000..2100,
stored in UTC) and ``source`` are required; ``node``, ``job`` (strings),
``rank``, ``local_rank`` (integers) are copied when present.

Identifiers follow one grammar (:mod:`streams.identifiers`): a node, GPU or job
id that a command line could read as more than one thing (``gpu-[001-999]``,
``a,b``, ``ALL``, whitespace, an option) is an ``invalid_value``. Numbers must
fit where they go: ranks the archive's ``Int32`` column (0..2**31-1), and any
integer of the line ±(2**53-1), what every stage and the canonical JSON of
signed records read exactly (:mod:`streams.ranges`).

Per source (required fields in brackets):

==============  ==================================  =====================================
source          required                            events
==============  ==================================  =====================================
inventory       node, gpus                          Inventory
kernel          node, line                          Xid / GpuLost / KernelFault, or none
nvml            node, gpu (an id), metrics          GpuSample
framework       job, line                           NcclTimeout / ... / AppError / LaunchConfig, or none
torchelastic    job, exitcode                       WorkerExit [+ the error's class]
scheduler       event (+ job or node)               JobStarted / JobEnded / NodeState
bmc             node, one of power/sel/reachable    BmcPower, BmcSel, BmcUnreachable
node_agent      node, alive                         AgentHeartbeat (none when alive=false)
trainer         job, event (+ per event)            TrainStep / Checkpoint* / TrainerHeartbeat
==============  ==================================  =====================================

``node_agent`` with ``alive: false`` and ``bmc`` with ``reachable: true``
(and nothing else) yield no event: the first is not a heartbeat, the second
is a poll that says nothing.

Event ids are deterministic: the first 24 hex digits of the SHA-256 of the
raw line (without its line ending), so a re-sent line gets the same id; the
second and later events of one line get ``-1``, ``-2``... appended.

The package: :mod:`~producers.capture.fields` (bad input and strict field access),
:mod:`~producers.capture.sources` (each source's line to event bodies),
:mod:`~producers.capture.line` (the line and its envelope), and what reads and screens whole
captures: :mod:`~producers.capture.reader` (bounded lines from a stream),
:mod:`~producers.capture.clock` (timestamps far from their neighbours) and
:mod:`~producers.capture.screen` (the one screen replay, the agent and the offline path share).
"""

from producers.capture.fields import BAD_KINDS, MAX_LINE_BYTES, BadInput, BadKind, too_long
from producers.capture.line import parse_capture_line
from producers.capture.sources import SOURCES

__all__ = ["BAD_KINDS", "MAX_LINE_BYTES", "SOURCES", "BadInput", "BadKind", "parse_capture_line", "too_long"]
