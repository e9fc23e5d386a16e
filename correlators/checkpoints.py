"""A job's checkpoints and which of them is a restart point: lineage, failures, the failure domain.

The newest valid checkpoint is not the highest step ever saved:

* **Lineage.** A run that loads an older checkpoint (``checkpoint_loaded``, or the restart faultline
  issued) starts a new lineage: every checkpoint saved after the one it loaded, by the runs before,
  belongs to an abandoned, diverged history (an owner's rollback after a NaN loss) and is no restart
  point any more. A run that saves at a step no higher than checkpoints of earlier runs without
  saying what it loaded gives itself away the same way.
* **Failed.** A checkpoint whose write failed (``checkpoint_failed`` at its step or path) is not one;
  neither is one that a restarted run could not load (it died before its first step with a load
  error: a truncated shard, missing ``state_dict`` keys) -- storage or software, never the GPU.
* **Loaded.** A checkpoint a run reports it loaded (``checkpoint_loaded``) is proven readable: it is a
  restart point of that run's lineage even when no save of it was ever seen (a job started from step
  48,000 that dies before its first save restarts from 48,000, never from nothing) -- unless it is
  already known bad (a failed write, a failed load), which a later report never revives.
* **Failure domain.** A checkpoint written only under a node-local prefix of the policy
  (``/mnt/nvme``, ``/local``) lives and dies with the node that wrote it: once that node is fenced or
  left out of the restart it is no restart point, and the restart says what skipping it cost.

Plain data (part of the engine's state, in :class:`~correlators.job_progress.JobProgress`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Literal

from correlators.state_fields import Bounded, Instant

__all__ = ["CHECKPOINTS_KEPT", "CheckpointBook", "SavedCheckpoint", "Skipped"]

CHECKPOINTS_KEPT = 64  # the newest saves remembered per job (older ones are never the restart point)

State = Literal["valid", "failed", "failed_load", "abandoned"]


@dataclass
class SavedCheckpoint:
    step: int
    path: str | None
    ts: Instant
    node: str | None = None  # the node whose trainer reported it (where a node-local copy lives)
    local: bool = False  # written under a node-local prefix
    state: State = "valid"
    why: str = ""
    origin: Literal["saved", "loaded"] = "saved"  # "loaded": known only from the run that loaded it
    heard: Instant | None = None  # the cell's clock when its report arrived, kept when its source lags the cell
    stamp: Instant | None = None  # as its source stamped it (``ts`` is the cell's time where the line was screened)


@dataclass
class Skipped:
    """A newer checkpoint passed over for the restart point, and why."""

    step: int
    ts: datetime
    why: str


@dataclass
class CheckpointBook:
    saved: Annotated[deque[SavedCheckpoint], Bounded(CHECKPOINTS_KEPT)] = field(
        default_factory=lambda: deque(maxlen=CHECKPOINTS_KEPT))
    run_started: Instant | None = None  # when the current run (the newest job_started) began
    loading: int | None = None  # the step the current run loaded (or was told to load)
    loading_path: str | None = None
    load_failed: bool = False  # the current run's load failure is recorded already

    # --- what the job reports -------------------------------------------------------------
    def on_run_start(self, ts: datetime, step: int | None, path: str | None) -> None:
        """A new run of the job; ``step``: the checkpoint it is loading, when known (faultline's restart)."""
        self.run_started = ts
        self.loading, self.loading_path, self.load_failed = None, None, False
        if step is not None:
            self.on_loaded(step, path)

    def on_loaded(self, step: int, path: str | None, ts: datetime | None = None, node: str | None = None,
                  local: bool = False) -> None:
        """The current run loaded ``step``: what was saved after it belongs to an abandoned lineage. Reported by
        the trainer (``ts``: when), the loaded checkpoint is a restart point itself when no save of that step
        is known (a job that started from it); a known one keeps its state (a bad one stays bad)."""
        self.loading, self.loading_path = step, path
        for ck in self.saved:
            if ck.state == "valid" and ck.step > step:
                ck.state, ck.why = "abandoned", f"saved after step {step}, which a later run loaded"
        if ts is not None and not any(ck.step == step for ck in self.saved):
            self.saved.append(SavedCheckpoint(step, path, ts, node, local, origin="loaded"))

    def on_saved(self, ts: datetime, step: int, path: str | None, node: str | None, local: bool,
                 heard: datetime | None = None, stamp: datetime | None = None) -> None:
        """A save reported, stamped ``ts``; ``heard``: the cell's clock when the report arrived, given when its
        source runs behind the cell (:meth:`correlators.clock.CellClock.lags`)."""
        started = self.run_started
        if started is not None:
            for ck in self.saved:  # this run went back to before them without saying: a new lineage
                if ck.state == "valid" and ck.step >= step and ck.ts < started:
                    ck.state, ck.why = "abandoned", f"a later run saved step {step} after it"
        self.saved.append(SavedCheckpoint(step, path, ts, node, local, heard=heard, stamp=stamp))

    def on_failed(self, step: int | None, path: str | None, ts: datetime | None = None, node: str | None = None,
                  stamp: datetime | None = None) -> None:
        """A write reported failed (at ``ts``): a save of that step (or path) by then is no checkpoint. A save of it
        made after the failed write stands, however late the failure's report arrives: two reports of the same
        node's trainer are ordered by its own stamps (``stamp``), whatever time the cell judged either at."""
        for ck in self.saved:
            if stamp is not None and ck.stamp is not None and node is not None and ck.node == node:
                later = ck.stamp > stamp
            else:
                later = ts is not None and ck.ts > ts
            if later:
                continue
            if ck.state == "valid" and ((path is not None and ck.path == path) or (step is not None and ck.step == step)):
                ck.state, ck.why = "failed", "its write failed"

    def loaded_failed(self, why: str) -> SavedCheckpoint | None:
        """The current run could not load its checkpoint: it is no restart point (returned, when known)."""
        hit = None
        for ck in self.saved:
            if ck.step == self.loading and (self.loading_path is None or ck.path in (None, self.loading_path)):
                if ck.state in ("valid", "abandoned"):
                    ck.state, ck.why = "failed_load", why
                hit = ck
        return hit

    # --- the restart point --------------------------------------------------------------------
    def newest(self) -> SavedCheckpoint | None:
        """The newest valid checkpoint of the current lineage, wherever it is."""
        valid = [ck for ck in self.saved if ck.state == "valid"]
        return max(valid, key=lambda c: (c.step, c.ts)) if valid else None

    def restart_point(self, lost_nodes: set[str], failure_at: datetime | None = None,
                      rerun: tuple[datetime, datetime] | None = None) -> tuple[SavedCheckpoint | None, list[Skipped]]:
        """The newest valid checkpoint saved by ``failure_at`` (or within ``rerun``: by a run that began after
        it, up to that run's own failure) outside the failure domain of ``lost_nodes`` (fenced or left out), and
        the newer ones passed over (failed to load, or only on a lost node's local storage). One completed by
        the failing run after the failure began may hold its damage: it is passed over silently. A save is
        after the failure by its stamp, or, when its source lags the cell (``heard`` kept), by its report
        arriving once the cell's clock had reached the failure: a trainer 20 s slow stamps a save made 4 s
        after an XID 16 s before it, and only its arrival, after the XID's, tells."""
        skipped: list[Skipped] = []
        for ck in sorted(self.saved, key=lambda c: (c.step, c.ts), reverse=True):
            after = failure_at is not None and (ck.ts > failure_at or (ck.heard is not None and ck.heard >= failure_at))
            if after and not (rerun and rerun[0] <= ck.ts <= rerun[1]):
                continue
            if ck.state == "valid" and not (ck.local and ck.node in lost_nodes):
                return ck, skipped
            if ck.state == "failed_load":
                skipped.append(Skipped(ck.step, ck.ts, f"failed to load ({ck.why})"))
            elif ck.state == "valid":
                skipped.append(Skipped(ck.step, ck.ts, f"is only on {ck.node}'s node-local storage ({ck.path})"))
        return None, skipped
