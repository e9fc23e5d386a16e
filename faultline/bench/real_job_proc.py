"""The processes of ``faultline bench --real-job``: one torchrun group of the example job, and its faults.

:class:`Group` launches ``producers/jobs/examples/train.py`` under a real ``torchrun`` (CPU, gloo), in its
own session, with its ranks placed on logical GPU slots (the harness's model of a node's GPU indices: the
job itself runs on CPU). A worker is found by the ``RANK`` in its environment under the torchrun agent.
Faults act on those workers: SIGKILL (a crash), SIGSTOP (a hang); the harness writes the kernel's XID line
of the slot itself (:func:`xid_line`, the NVIDIA driver's ``NVRM: Xid`` form that ``producers/node`` parses).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ROOT", "TRAIN", "Group", "failed_workers", "xid_line", "pci", "uuid"]

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "producers" / "jobs" / "examples" / "train.py"


def pci(slot: int) -> str:
    """The PCI bus of GPU slot ``slot`` (as an 8-GPU node numbers them)."""
    return f"{0x18 + 0x10 * slot:02x}"


def uuid(node: str, slot: int) -> str:
    n = sum(node.encode()) % 10_000
    return f"GPU-{n:04d}{slot:04d}-0000-4000-8000-{n * 100 + slot:012d}"


def xid_line(slot: int, code: int, text: str) -> str:
    return f"NVRM: Xid (PCI:0000:{pci(slot)}:00): {code}, pid=4242, name=python, {text}"


_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")


def failed_workers(text: str) -> list[tuple[int, int]]:
    """(local rank, exit code) of each ``failed (exitcode: ...)`` line torchrun's agent logs."""
    return [(int(m.group(2)), int(m.group(1))) for m in _FAILED.finditer(text)]


def _children(pid: int) -> list[int]:
    try:
        found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [int(p) for p in found]


def _rank_of(pid: int) -> int | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for kv in env:
        if kv.startswith(b"RANK="):
            return int(kv[5:])
    return None


@dataclass
class Group:
    """One launch of the job: ``slots[r]`` is the GPU slot rank ``r`` runs on."""

    job: str
    node: str
    out: Path
    slots: list[int]
    launch: int
    max_restarts: int
    step_s: float
    checkpoint_every: int
    collective_timeout_s: float
    started: float = field(default_factory=time.monotonic)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def logs(self) -> Path:
        return self.out / "logs" / f"launch-{self.launch}"

    @property
    def agent_log(self) -> Path:
        return self.out / f"agent-{self.launch}.log"

    def start(self) -> None:
        env = {**os.environ, "FAULTLINE_TRAINER_LOG": str(self.out / "trainer.jsonl"), "FAULTLINE_JOB": self.job,
               "FAULTLINE_NODE": self.node, "FAULTLINE_CHECKPOINT_NOW": str(self.out / "checkpoint-now"),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               "OMP_NUM_THREADS": "1"}
        args = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
                "--nproc-per-node", str(len(self.slots)), "--max-restarts", str(self.max_restarts),
                "--monitor-interval", "0.2", "--log-dir", str(self.logs), "--redirects", "3",
                str(TRAIN), "--steps", "100000000", "--checkpoint-every", str(self.checkpoint_every),
                "--checkpoint-dir", str(self.out / "ckpt"), "--step-seconds", str(self.step_s),
                "--collective-timeout-s", str(self.collective_timeout_s)]
        self.started = time.monotonic()
        self.out.mkdir(parents=True, exist_ok=True)
        with self.agent_log.open("ab") as log:  # torchrun's own log: which worker failed, with what exit code
            self.proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def workers(self) -> dict[int, int]:
        """rank -> pid of the workers running now (the agent's children that carry a ``RANK``)."""
        if not self.alive():
            return {}
        assert self.proc is not None
        found: dict[int, int] = {}
        todo = _children(self.proc.pid)
        while todo:
            pid = todo.pop()
            rank = _rank_of(pid)
            if rank is not None and rank not in found:
                found[rank] = pid
            todo += _children(pid)
        return found

    def signal_rank(self, rank: int, sig: signal.Signals) -> bool:
        pid = self.workers().get(rank)
        if pid is None:
            return False
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return False
        return True

    def stop(self) -> None:
        """Kill the whole group (workers, stopped ones too, then the agent) and reap it."""
        if self.proc is None:
            return
        for pid in self.workers().values():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
