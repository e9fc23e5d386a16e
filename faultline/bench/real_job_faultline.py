"""The arm "with faultline" of ``faultline bench --real-job`` (the rule is :mod:`faultline.bench.real_job_arms`').

Observations go to the real :class:`~correlators.engine.Correlator` through the same capture screen
``faultline replay`` uses, live: each poll takes what the job-side sources saw and what the node said, and
then moves the engine's clock to the wall clock, so its settle and gate windows close on time. Its commands
are acted on by :meth:`WithFaultline.act`, a local executor.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from correlators.engine import Correlator
from correlators.policy import load_policy
from faultline.bench.real_job_arms import PER_NODE, SLOTS, Arm, inventory
from faultline.bench.real_job_proc import failed_workers, uuid
from producers.capture.screen import Accepted, CaptureScreen
from producers.jobs.framework_log import FollowedLog, FrameworkLog
from producers.jobs.identity import JobIdentity
from producers.jobs.reporter import request_checkpoint
from producers.jobs.torchelastic_watch import TorchelasticWatch, worker_exit
from producers.jobs.trainer_file import TrainerFile
from producers.node.follow import FileFollower
from streams.decisions import Command, Incident

__all__ = ["WithFaultline", "checkpoint_step"]

HEARTBEAT_S = 10.0


def checkpoint_step(path: str | Path) -> int | None:
    """The step of a checkpoint file the example wrote (``step-<n>.pt``)."""
    stem = Path(path).stem
    return int(stem.split("-")[1]) if stem.startswith("step-") and stem.split("-")[1].isdigit() else None


@dataclass
class WithFaultline(Arm):
    policy_path: str | None = None
    engine: Correlator | None = None
    pending: list[dict[str, Any]] = field(default_factory=list)
    commands: list[dict[str, Any]] = field(default_factory=list)
    incidents: dict[str, dict[str, Any]] = field(default_factory=dict)
    restart_at: tuple[float, Command] | None = None
    down_since: float | None = None
    _trainer: TrainerFile | None = None
    _errors: TorchelasticWatch | None = None
    _framework: list[FrameworkLog] = field(default_factory=list)
    _followed: set[Path] = field(default_factory=set)
    _beat: float = -1e9
    _screen: CaptureScreen = field(default_factory=CaptureScreen)
    _acted: set[str] = field(default_factory=set)
    _agent_read: dict[int, int] = field(default_factory=dict)

    def on_start(self) -> None:
        self.engine = Correlator(load_policy(self.policy_path))
        self._trainer = TrainerFile(FileFollower(self.out / "trainer.jsonl", self.out / "trainer.state"),
                                    interval_s=0.2)
        self._errors = TorchelasticWatch(JobIdentity(self.job, self.node), self.out / "logs")
        for node in self.nodes:
            self.emit(inventory(node, self.ts()))

    def on_launch(self) -> None:
        self.down_since = None
        self.emit({"ts": self.ts(), "source": "scheduler", "event": "job_started", "job": self.job,
                   "allocation": self.allocation(),
                   "world_size": self.k.ranks, "elastic": {"min_gpus": self.k.ranks, "max_gpus": self.k.ranks},
                   "checkpoint": {"dir": str(self.out / "ckpt"),
                                  "interval_s": self.k.checkpoint_every * self.k.step_s},
                   "gpu_class": "H100-80GB", "owner": "bench", "max_restarts": self.k.restart_budget})

    def allocation(self) -> list[dict[str, Any]]:
        """The ranks' slots as the scheduler says them: per node, its GPU indices and ranks."""
        out: dict[str, dict[str, Any]] = {}
        for rank, slot in enumerate(self.placement):
            node = out.setdefault(self.node_of(slot), {"node": self.node_of(slot), "gpus": [], "ranks": []})
            node["gpus"].append(slot % PER_NODE)
            node["ranks"].append(rank)
        return list(out.values())

    def emit(self, obs: dict[str, Any]) -> None:
        self.pending.append(obs)

    def step(self, now: float) -> None:
        wall = datetime.now(UTC)
        if now - self._beat >= HEARTBEAT_S:
            self._beat = now
            for node in self.nodes:
                self.emit({"ts": self.ts(), "source": "node_agent", "node": node, "alive": True})
        self._follow_new_logs()
        self._agent_failures(wall)
        seen = [*self.pending]
        self.pending.clear()
        for source in (self._trainer, self._errors, *self._framework):
            if source is not None:
                seen.extend(source.poll(wall))
        seen.sort(key=lambda o: str(o.get("ts", "")))
        assert self.engine is not None
        decisions: list[Any] = []
        lines = [json.dumps(o).encode() for o in seen]
        with (self.out / "capture.jsonl").open("ab") as capture:  # what the engine saw: faultline replay reads it
            capture.writelines(line + b"\n" for line in lines)
        for verdict in self._screen.screen(lines):
            if isinstance(verdict, Accepted):
                for e in verdict.events:
                    decisions += self.engine.process(e)
        decisions += self.engine.advance_to(wall)
        for d in decisions:
            if isinstance(d, Incident):
                self.incidents[d.id] = {"category": d.category, "state": d.state, "at_s": round(now, 1),
                                        "opened_s": self.incidents.get(d.id, {}).get("opened_s", round(now, 1))}
            if isinstance(d, Command) and d.id not in self._acted:
                self._acted.add(d.id)
                self.act(d, now)
        self._restart_when_due(now)

    def stop(self) -> None:
        super().stop()
        for source in (self._trainer, self._errors, *self._framework):
            if source is not None:
                source.close()

    def _agent_failures(self, wall: datetime) -> None:
        """A worker killed by a signal writes no error file: torchrun's agent log says which one, with
        what exit code (what the node agent's torchelastic source reports with ``worker_exit``)."""
        g = self.group
        if g is None or not g.agent_log.exists():
            return
        text = g.agent_log.read_text(encoding="utf-8", errors="replace")
        done = self._agent_read.get(g.launch, 0)
        self._agent_read[g.launch] = len(text)
        for local_rank, code in failed_workers(text[done:]):
            if code < 0:
                node = self.node_of(g.slots[local_rank]) if local_rank < len(g.slots) else self.node
                self.emit(worker_exit(self.job, node, local_rank, wall, exitcode=code, local_rank=local_rank))

    def _follow_new_logs(self) -> None:
        g = self.group
        if g is None:
            return
        for attempt in sorted(g.logs.glob("*/attempt_*")):
            if attempt in self._followed:
                continue
            self._followed.add(attempt)
            self._framework.append(FrameworkLog([
                FollowedLog(FileFollower(attempt / str(r) / "stderr.log", self.out / f"fw-{g.launch}-{r}.state"),
                            JobIdentity(self.job, self.node_of(g.slots[r]), rank=r, local_rank=r))
                for r in range(self.k.ranks)]))

    def act(self, c: Command, now: float) -> None:
        """The local executor: what each command does to this arm's job and slots."""
        record = {"at_s": round(now, 1), "type": c.type, "id": c.id, "requires_approval": c.requires_approval,
                  "reason": c.reason, "gpu": c.target.gpu, "params": dict(c.params or {})}
        self.commands.append(record)
        if c.type == "quarantine_gpu" and c.target.gpu is not None:
            self.fenced |= {s for s in range(SLOTS) if self.node_of(s) == c.target.node
                            and c.target.gpu in (uuid(c.target.node, s % PER_NODE), str(s % PER_NODE))}
        elif c.type in ("cordon_node", "drain_node"):
            self.fenced |= {s for s in range(SLOTS) if self.node_of(s) == c.target.node}
        elif c.type == "checkpoint_now":
            request_checkpoint(self.out / "checkpoint-now", c.id, c.reason or "")
        elif c.type == "restart_job":
            wait = self.k.approval_s if c.requires_approval else 0.0
            self.restart_at = (now + wait, c)

    def _restart_when_due(self, now: float) -> None:
        if self.restart_at is not None and now >= self.restart_at[0]:
            _, c = self.restart_at
            self.restart_at = None
            self.relaunch(c.id, (c.params or {}).get("checkpoint"), (c.params or {}).get("exclude") or {})
            return
        if self.group is not None and not self.group.alive() and self.restart_at is None:
            self.down_since = now if self.down_since is None else self.down_since
            if now - self.down_since >= self.k.human_s:
                self.relaunch("a person, no restart decided", _NEWEST, {})

    def relaunch(self, why: str, checkpoint: Any, exclude: dict[str, Any]) -> None:
        """Relaunch from ``checkpoint`` (newer files are set aside, all of them for a restart from the start:
        the example loads the newest in its folder), every rank on a fenced or excluded slot moved to the
        lowest slot that is neither nor in use."""
        path = None if checkpoint is _NEWEST else _checkpoint_path(checkpoint)
        if checkpoint is not _NEWEST:
            named = checkpoint_step(path) if path is not None and Path(path).exists() else 0
            for f in (self.out / "ckpt").glob("step-*.pt"):
                step = checkpoint_step(f)
                if named is not None and step is not None and step > named:
                    (self.out / "ckpt-set-aside").mkdir(exist_ok=True)
                    shutil.move(str(f), self.out / "ckpt-set-aside" / f.name)
        out_nodes = set(exclude.get("nodes") or [])
        out_gpus = set(exclude.get("gpus") or [])
        usable = [s for s in range(SLOTS) if s not in self.fenced and self.node_of(s) not in out_nodes
                  and uuid(self.node_of(s), s % PER_NODE) not in out_gpus]
        for r, slot in enumerate(self.placement):
            if slot not in usable:
                free = [s for s in usable if s not in self.placement]
                if free:
                    self.placement[r] = free[0]
        self.launch(why, path)


_NEWEST = object()  # a person's relaunch: from the newest checkpoint, as the example does by itself


def _checkpoint_path(checkpoint: Any) -> str | None:
    if isinstance(checkpoint, dict):
        found = checkpoint.get("path")
        return str(found) if found else None
    return str(checkpoint) if checkpoint else None
