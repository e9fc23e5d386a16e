"""Each cause of the Llama 3 interruption record as the signals it gives, judged by the real engine.

For the goodput model (:mod:`faultline.bench.goodput`) the times that matter -- when a failure is
known, when the broken hardware is fenced, when the job is restarted and whether a person must
approve that -- are not assumed: :func:`measure` writes a capture of a running job (steps,
checkpoints, telemetry, heartbeats) in which the cause happens, in the words the real sources use,
and runs it through the capture screen, the parsers and the :class:`~correlators.engine.Correlator`
exactly as ``faultline replay`` does (in-process, event time). Each cause happens twice to the same
job, three hours apart: the second time tells whether the engine restarts again on its own (software
causes are retried once automatically, then wait for a person: ``unknown_cause_auto_restarts``, counted
over ``restarts.unknown_cause_window_s``, 6 h by default).

What the signals are is a model too, and is stated here per cause (:data:`SIGNALS`). The collective
timeout a hang waits for is the NCCL default (600 s, ``Timeout(ms)=600000``).

The job and its cell are two stated assumptions, both parameters of :func:`measure`: whether its
launcher is torchelastic and says so (``torchrun --nnodes=4:4 --nproc_per_node=8``, the line the
engine reads as the launcher that can restart workers in process), and whether the inventory holds a
spare node beside the job's four (the healthy GPUs a restart without the broken ones can run on).
The engine chooses each restart's way back (``params.mode``, :mod:`correlators.restart_mode`) from
them; :class:`Timing` records it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

from correlators.engine import Correlator
from correlators.policy import load_policy
from producers.capture.screen import Accepted, CaptureScreen
from streams.decisions import Command, Incident
from streams.events import EndOfCapture, Event

# The capture kit other benches build on (precursors.py): observations in the real sources' words, judged offline.
__all__ = ["SIGNALS", "Timing", "gpu_lost", "gpu_uuid", "judge", "measure", "measure_all", "observed_at",
           "running_job", "telemetry", "xid_line"]

T0 = datetime(2026, 4, 22, 0, 0, tzinfo=UTC)
NODES, GPUS = 4, 8
JOB = "pretrain"
COLLECTIVE_TIMEOUT_S = 600.0
FENCES = ("quarantine_gpu", "cordon_node", "drain_node")

Obs = dict[str, Any]


def _node(n: int) -> str:
    return f"node-{n:02d}"


def _pci(i: int) -> str:
    return f"{0x18 + 0x10 * i:02X}"


def gpu_uuid(n: int, i: int) -> str:
    return f"GPU-{n:04d}{i:04d}-0000-4000-8000-{n * 100 + i:012d}"


def observed_at(t: datetime, obs: Obs) -> tuple[datetime, Obs]:
    return t, {"ts": t.isoformat(timespec="milliseconds"), **obs}


def xid_line(t: datetime, n: int, gpu: int, code: int, text: str) -> tuple[datetime, Obs]:
    return observed_at(t, {"source": "kernel", "node": _node(n),
                   "line": f"NVRM: Xid (PCI:0000:{_pci(gpu).lower()}:00): {code}, pid=4242, name=python, {text}"})


def _exit(t: datetime, n: int, gpu: int, code: int, message: str | None = None) -> tuple[datetime, Obs]:
    err = {"message": {"message": message, "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "0"}}} \
        if message else None
    return observed_at(t, {"source": "torchelastic", "job": JOB, "node": _node(n), "rank": n * GPUS + gpu, "exitcode": code,
                   "error_file": err})


def _framework(t: datetime, n: int, gpu: int, line: str) -> tuple[datetime, Obs]:
    return observed_at(t, {"source": "framework", "job": JOB, "node": _node(n), "rank": n * GPUS + gpu, "local_rank": gpu,
                   "line": line})


def _crash(t: datetime, n: int, gpu: int, message: str) -> Iterator[tuple[datetime, Obs]]:
    """One rank dies with ``message``; torchelastic tears the other workers down (SIGTERM) seconds later."""
    yield _framework(t, n, gpu, message)
    yield _exit(t + timedelta(seconds=1), n, gpu, 1, message)
    for m in range(NODES):
        for g in range(GPUS):
            if (m, g) != (n, gpu):
                yield _exit(t + timedelta(seconds=3), m, g, -15)


def _watchdogs(t: datetime, skip: set[int] | None = None) -> Iterator[tuple[datetime, Obs]]:
    """Every rank (but ``skip``) reports the collective timeout when the NCCL watchdog fires."""
    at = t + timedelta(seconds=COLLECTIVE_TIMEOUT_S)
    for r in range(NODES * GPUS):
        if skip and r in skip:
            continue
        n, g = divmod(r, GPUS)
        yield _framework(at + timedelta(milliseconds=r), n, g,
                         f"[rank{r}]:[E] ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation "
                         "timeout: WorkNCCL(SeqNum=4096, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
                         "ran for 600081 milliseconds before timing out.")
    for r in range(NODES * GPUS):
        if skip and r in skip:
            continue
        n, g = divmod(r, GPUS)
        yield _exit(at + timedelta(seconds=5), n, g, -6)


def gpu_lost(t: datetime, n: int, gpu: int, code: int, text: str) -> Iterator[tuple[datetime, Obs]]:
    yield xid_line(t, n, gpu, code, text)
    yield from _crash(t + timedelta(seconds=1), n, gpu, "RuntimeError: CUDA error: an illegal memory access was "
                      "encountered")


def _faulty_gpu(t: datetime, k: int) -> Iterator[tuple[datetime, Obs]]:
    yield from gpu_lost(t, 1, 5 - k, 79, "GPU has fallen off the bus.")


def _hbm(t: datetime, k: int) -> Iterator[tuple[datetime, Obs]]:
    gpu = 3 + k
    yield observed_at(t, {"source": "nvml", "node": _node(2), "gpu": {"index": gpu, "uuid": gpu_uuid(2, gpu)},
                  "metrics": {"ecc_dbe_volatile": 1, "ecc_dbe_aggregate": 1, "remapped_rows_pending": 1}})
    yield from gpu_lost(t, 2, gpu, 48, "An uncorrectable double bit error (DBE) has been detected on GPU in the "
                         "framebuffer at partition 6, subpartition 0.")


def _sram(t: datetime, k: int) -> Iterator[tuple[datetime, Obs]]:
    yield from gpu_lost(t, 0, 6 - k, 95, "Uncontained: FBHUB. RST: Yes, D-RST: No")


def _gsp(t: datetime, k: int) -> Iterator[tuple[datetime, Obs]]:
    yield from gpu_lost(t, 3, 1 + k, 119, "Timeout after 6s of waiting for RPC response from GPU0 GSP!")


def _software(message: str) -> Callable[[datetime, int], Iterator[tuple[datetime, Obs]]]:
    def gen(t: datetime, k: int) -> Iterator[tuple[datetime, Obs]]:
        yield from _crash(t, 2, k, message)
    return gen


def _network(t: datetime, k: int) -> Iterator[tuple[datetime, Obs]]:
    """A link goes: the collectives that cross it stall; every rank's watchdog fires after the timeout."""
    yield _framework(t + timedelta(seconds=2), 1, 2, "NCCL WARN NET/IB : Got completion from peer 10.0.1.7 with "
                     "status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.1.2")
    yield from _watchdogs(t)


def _nccl_watchdog(t: datetime, k: int) -> Iterator[tuple[datetime, Obs]]:
    """One rank stops calling collectives (a stuck process); the others time out waiting for it."""
    yield from _watchdogs(t, skip={19 + k})
    yield _exit(t + timedelta(seconds=COLLECTIVE_TIMEOUT_S + 5), 2, 3 + k, -6)


def _host_gone(t: datetime, k: int) -> Iterator[tuple[datetime, Obs]]:
    """The host stops (maintenance): agent and BMC power say so, its ranks vanish, the rest time out."""
    n = SILENT_NODE["host_maintenance"][k]
    yield observed_at(t + timedelta(seconds=20), {"source": "bmc", "node": _node(n), "power": "off"})
    yield from _watchdogs(t, skip=set(range(n * GPUS, (n + 1) * GPUS)))


def _sdc(t: datetime, k: int) -> Iterator[tuple[datetime, Obs]]:
    """Silent data corruption: nothing fails but the loss, which goes NaN; the job is stopped by hand."""
    for k in range(6):
        yield observed_at(t + timedelta(seconds=10 * k), {"source": "trainer", "job": JOB, "rank": 0, "node": _node(0),
                                                  "event": "step", "step": 90_000 + k, "loss": float("nan"),
                                                  "samples_per_s": 400.0})


def _thermal(t: datetime, k: int) -> Iterator[tuple[datetime, Obs]]:
    """A GPU's thermal interface fails: it runs hot, throttles, and its rank dies."""
    gpu = 2 + k
    for s in range(0, 400, 10):
        yield observed_at(t + timedelta(seconds=s), {"source": "nvml", "node": _node(1),
                                             "gpu": {"index": gpu, "uuid": gpu_uuid(1, gpu)},
                                             "metrics": {"temperature_c": 96.0,
                                                         "clocks_event_reasons": ["HW_THERMAL_SLOWDOWN"]}})
    yield from _crash(t + timedelta(seconds=400), 1, gpu, "RuntimeError: CUDA error: unspecified launch failure")


def _ssd(t: datetime, k: int) -> Iterator[tuple[datetime, Obs]]:
    yield observed_at(t, {"source": "trainer", "job": JOB, "rank": 0, "node": _node(0), "event": "checkpoint_failed",
                  "step": 90_000, "path": f"/ckpt/{JOB}/step_90000", "error": "OSError: [Errno 5] Input/output error"})
    yield from _crash(t + timedelta(seconds=2), 0, k, "OSError: [Errno 5] Input/output error")


def _psu(t: datetime, k: int) -> Iterator[tuple[datetime, Obs]]:
    n = 2 - k
    yield observed_at(t, {"source": "bmc", "node": _node(n), "sel": "1a | 04/22/2026 | 00:00:00 | Power Supply PS2 | "
                  "Failure detected | Asserted"})
    for g in range(4):  # the GPUs that rail fed
        yield xid_line(t + timedelta(milliseconds=20 * g), n, g, 79, "GPU has fallen off the bus.")
    yield from _crash(t + timedelta(seconds=1), n, 0, "RuntimeError: CUDA error: unknown error")


def _chassis(t: datetime, k: int) -> Iterator[tuple[datetime, Obs]]:
    n = SILENT_NODE["server_chassis"][k]
    yield observed_at(t, {"source": "bmc", "node": _node(n), "sel": "2b | 04/22/2026 | 00:00:00 | System Board #0x07 | "
                  "Uncorrectable machine check exception | Asserted"})
    yield from _watchdogs(t, skip=set(range(n * GPUS, (n + 1) * GPUS)))


def _host_oom(t: datetime, k: int) -> Iterator[tuple[datetime, Obs]]:
    yield observed_at(t, {"source": "kernel", "node": _node(0), "line": "Out of memory: Killed process 4242 (python) "
                  "total-vm:912345678kB, anon-rss:812345678kB, file-rss:0kB, shmem-rss:0kB, UID:1000"})
    yield _exit(t + timedelta(seconds=1), 0, 4 + k, -9)
    for m in range(NODES):
        for g in range(GPUS):
            if (m, g) != (0, 4 + k):
                yield _exit(t + timedelta(seconds=3), m, g, -15)


#: cause -> (what happens, its signals). Silent nodes are modelled by their heartbeats stopping.
SIGNALS: dict[str, tuple[str, Callable[[datetime, int], Iterator[tuple[datetime, Obs]]]]] = {
    "faulty_gpu": ("XID 79 (off the bus), the rank's CUDA error, the others torn down", _faulty_gpu),
    "gpu_hbm3_memory": ("NVML double-bit ECC with rows pending remap, XID 48, the rank's crash", _hbm),
    "software_bug": ("a Python exception in one rank, exit 1, the others torn down",
                     _software("ValueError: shapes (4096,) and (4095,) not aligned")),
    "network_switch_cable": ("an IB completion error, then every rank's watchdog at the 600 s collective timeout",
                             _network),
    "host_maintenance": ("the host powers off (BMC), its agent and ranks go silent, the others time out",
                         _host_gone),
    "gpu_sram_memory": ("XID 95 (uncontained ECC), the rank's crash", _sram),
    "gpu_system_processor": ("XID 119 (GSP RPC timeout), the rank's crash", _gsp),
    "nic": ("an IB completion error, then every rank's watchdog at the collective timeout", _network),
    "nccl_watchdog_timeout": ("one rank stops; every other rank's watchdog at the collective timeout",
                              _nccl_watchdog),
    "silent_data_corruption": ("the loss turns NaN, nothing else", _sdc),
    "gpu_thermal_interface_sensor": ("a GPU at 96 C with thermal slowdown for minutes, then its rank's crash",
                                     _thermal),
    "ssd": ("a checkpoint write fails with EIO, the rank's OSError", _ssd),
    "power_supply": ("a PSU failure SEL, the 4 GPUs on that rail off the bus, the crash", _psu),
    "server_chassis": ("a board machine-check SEL, the node silent, the others time out", _chassis),
    "io_network": ("an IB completion error, then every rank's watchdog at the collective timeout", _network),
    "dependency": ("an exception from a dependency in one rank", _software("ImportError: libnccl-net.so: cannot "
                                                                           "open shared object file")),
    "other_software": ("an exception in one rank", _software("RuntimeError: DataLoader worker (pid 4242) exited "
                                                              "unexpectedly")),
    "host_oom": ("the host OOM killer kills a rank (-9), the others torn down", _host_oom),
}
#: The nodes (first, second time) whose agent stops at the fault.
SILENT_NODE: dict[str, tuple[int, int]] = {"host_maintenance": (3, 2), "server_chassis": (1, 0)}


@dataclass(frozen=True)
class Timing:
    """What the engine did about one occurrence of a cause, in seconds from the fault (None: never)."""

    category: str | None  # the incident it opened
    detect_s: float | None  # the first incident about it published
    fence_s: float | None  # the first fence of its hardware (quarantine, cordon, drain)
    restart_s: float | None  # the restart command, approved or waiting for a person
    restart_needs_approval: bool | None
    restart_mode: str | None = None  # the restart's way back as the engine chose it (``params.mode``)


@dataclass(frozen=True)
class CauseTiming:
    first: Timing
    again: Timing  # the same cause, to the same job, hours later


def running_job(start: datetime, end: datetime, launcher: bool) -> Iterator[tuple[datetime, Obs]]:
    if launcher:  # what torchrun logs as it starts: the engine's evidence it can restart workers in process
        yield _framework(start, 0, 0, f"torchrun --nnodes={NODES}:{NODES} --nproc_per_node={GPUS} train.py")
    yield observed_at(start, {"source": "scheduler", "event": "job_started", "job": JOB, "allocation": [
        {"node": _node(n), "gpus": list(range(GPUS)), "ranks": list(range(n * GPUS, (n + 1) * GPUS))}
        for n in range(NODES)], "world_size": NODES * GPUS,
        "elastic": {"min_gpus": NODES * GPUS, "max_gpus": NODES * GPUS},
        "checkpoint": {"dir": f"/ckpt/{JOB}", "interval_s": 1800}, "gpu_class": "H100-80GB", "owner": "pretraining",
        "max_restarts": 3})
    t, step = start + timedelta(seconds=30), 0
    while t < end:
        step += 1
        yield observed_at(t, {"source": "trainer", "job": JOB, "rank": 0, "node": _node(0), "event": "step", "step": step,
                      "loss": 2.0, "samples_per_s": 400.0})
        if step % 60 == 0:
            yield observed_at(t + timedelta(seconds=3), {"source": "trainer", "job": JOB, "rank": 0, "node": _node(0),
                                                 "event": "checkpoint_saved", "step": step,
                                                 "path": f"/ckpt/{JOB}/step_{step:06d}", "bytes": 10**12,
                                                 "seconds": 3.0})
        t += timedelta(seconds=10)


def telemetry(start: datetime, end: datetime, silent: dict[int, datetime],
               spare: bool) -> Iterator[tuple[datetime, Obs]]:
    for n in range(NODES + 1 if spare else NODES):
        yield observed_at(start, {"source": "inventory", "node": _node(n), "rack": "r1", "gpus": [
            {"index": i, "uuid": gpu_uuid(n, i), "pci_bus_id": f"00000000:{_pci(i)}:00.0", "name": "NVIDIA H100 80GB HBM3",
             "power_domain": f"psu-{'A' if i < 4 else 'B'}"} for i in range(GPUS)]})
        t = start
        while t < end and (n not in silent or t < silent[n]):
            yield observed_at(t, {"source": "node_agent", "node": _node(n), "alive": True})
            t += timedelta(seconds=15)


def _capture(cause: str, fault_at: list[datetime], end: datetime, launcher: bool, spare: bool) -> list[bytes]:
    """The job runs, the cause strikes, the job is started again (as a scheduler would, without the hardware
    the first time broke), the cause strikes again. ``launcher``: the job is launched by torchrun, which says
    so; ``spare``: the inventory holds a fifth node."""
    _, signals = SIGNALS[cause]
    silent = {SILENT_NODE[cause][k]: t for k, t in enumerate(fault_at)} if cause in SILENT_NODE else {}
    obs: list[tuple[datetime, Obs]] = [*telemetry(T0, end, silent, spare)]
    starts = [T0 + timedelta(seconds=5)] + [t + timedelta(seconds=COLLECTIVE_TIMEOUT_S + 300) for t in fault_at[:-1]]
    for k, (start, fault) in enumerate(zip(starts, fault_at, strict=True)):
        obs += running_job(start, fault, launcher)
        obs += signals(fault, k)
    obs.sort(key=lambda x: x[0])
    return [json.dumps(o, allow_nan=True).encode() for _, o in obs]


def judge(lines: list[bytes]) -> list[Incident | Command]:
    engine = Correlator(load_policy(None))
    out: list[Incident | Command] = []
    last: Event | None = None
    for verdict in CaptureScreen().screen(lines):
        if isinstance(verdict, Accepted):
            for e in verdict.events:
                last = e
                out += engine.process(e)  # type: ignore[arg-type]
    if last is not None:
        out += engine.process(Event(id="end", ts=last.ts, source="replay", body=EndOfCapture()))  # type: ignore[arg-type]
    return out


def _timing(decisions: list[Incident | Command], fault: datetime, until: datetime) -> Timing:
    inside = [d for d in decisions if fault <= _when(d) < until]
    incidents = [d for d in inside if isinstance(d, Incident) and d.job == JOB]
    commands = [d for d in inside if isinstance(d, Command)]
    fences = [c for c in commands if c.type in FENCES]
    restarts = [c for c in commands if c.type == "restart_job"]

    def after(d: Incident | Command | None) -> float | None:
        return None if d is None else round((_when(d) - fault).total_seconds(), 2)

    first = incidents[0] if incidents else None
    return Timing(first.category if first else None, after(first), after(fences[0] if fences else None),
                  after(restarts[0] if restarts else None), restarts[0].requires_approval if restarts else None,
                  restarts[0].params.get("mode") if restarts else None)


def _when(d: Incident | Command) -> datetime:
    return d.issued_at if isinstance(d, Command) else (d.updated_at or d.opened_at)


def measure(cause: str, launcher: bool = True, spare: bool = True) -> CauseTiming:
    """The engine's timings for ``cause`` happening to a running job, and again hours later (``launcher``,
    ``spare``: :func:`_capture`)."""
    first = T0 + timedelta(hours=1)
    again = first + timedelta(hours=3)  # Llama 3's run: 419 interruptions in 54 days, one every ~3 h
    end = again + timedelta(seconds=COLLECTIVE_TIMEOUT_S + 900)
    decisions = judge(_capture(cause, [first, again], end, launcher, spare))
    return CauseTiming(_timing(decisions, first, again), _timing(decisions, again, end))


@cache
def measure_all(launcher: bool = True, spare: bool = True) -> dict[str, CauseTiming]:
    """:func:`measure` for every cause of :data:`SIGNALS` (computed once per process and assumption)."""
    return {cause: measure(cause, launcher, spare) for cause in SIGNALS}


def as_json(timings: dict[str, CauseTiming]) -> dict[str, Any]:
    return {cause: {"signals": SIGNALS[cause][0], **asdict(t)} for cause, t in timings.items()}
