"""How a restarted job comes back: the cheapest way that can work, chosen and said why.

A restart (``restart_job``) says *what* the job needs -- its checkpoint, its size, what to avoid
(:mod:`correlators.planner`). This module says *how* it gets there, ``params.mode``:

=============  ====================================================================  ==============================
mode           when it can work                                                      what coming back costs
=============  ====================================================================  ==============================
``in_process`` its launcher restarts workers in place (torchelastic seen, restarts      ``in_process_s``
               allowed) and nothing of its allocation is left out or fenced
``spare``      hardware is left out, and the healthy GPUs known (its own that are     ``spare_s``
               left, idle inventory) cover the size it asks for
``requeue``    always: back through the scheduler's queue                            ``requeue_s``
=============  ====================================================================  ==============================

Each cost is the time the job's GPUs stand idle while it comes back, in seconds, from the policy
(``restart_modes``); its expected GPU-hours are ``seconds x GPUs asked / 3600``. The mode that
works and costs least is chosen (ties in the table's order). The checkpoint's age costs the same
whichever way back, so it is not part of the comparison; the work since it is in the incident's
lost GPU-hours. A requeue whose size the healthy GPUs known cannot cover says so: it waits in the
queue for repair or for other jobs to end.

The defaults are assumptions, not measurements of a site: a torchelastic re-rendezvous and reload
(1 min), a scheduler placing the job on a spare it holds (3 min), a requeue behind other work
(15 min). Executors run every mode as a restart today (Slurm: a requeue that excludes the
hardware); the mode is the advice an executor that can do better (a spare pool, an in-process
restart hook behind the webhook) acts on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["MODES", "Mode", "ModeChoice", "RestartModes", "choose_mode"]

Mode = Literal["in_process", "spare", "requeue"]
MODES: tuple[Mode, ...] = ("in_process", "spare", "requeue")


class RestartModes(BaseModel):
    """Seconds a job's GPUs stand idle while it comes back, per mode (policy ``restart_modes``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    in_process_s: float = 60
    spare_s: float = 180
    requeue_s: float = 900


@dataclass(frozen=True)
class ModeChoice:
    mode: Mode
    why: str
    gpu_hours: dict[Mode, float]  # each mode that can work -> its expected GPU-hours to come back

    def params(self) -> dict[str, Any]:
        return {"mode": self.mode, "mode_gpu_hours": self.gpu_hours}


def choose_mode(costs: RestartModes, *, gpus: int, in_process_launcher: bool, avoids_own_hardware: bool,
                capacity_known: int | None) -> ModeChoice:
    """The mode for a restart asking for ``gpus`` (module docstring, the table)."""
    seconds = {"in_process": costs.in_process_s, "spare": costs.spare_s, "requeue": costs.requeue_s}
    works: dict[Mode, str] = {}
    if in_process_launcher and not avoids_own_hardware:
        works["in_process"] = "its launcher restarts workers in place and none of its hardware is left out"
    if avoids_own_hardware and capacity_known is not None and capacity_known >= gpus:
        works["spare"] = f"{capacity_known:,} healthy GPUs known cover the {gpus:,} it asks for"
    short = capacity_known is not None and capacity_known < gpus
    works["requeue"] = (f"only {capacity_known:,} healthy GPUs known for the {gpus:,} it asks for: it waits in the "
                        "queue for repair or other jobs" if short else "back through the scheduler's queue")
    hours = {m: round(seconds[m] * gpus / 3600, 3) for m in MODES if m in works}
    mode = min((m for m in MODES if m in works), key=lambda m: (hours[m], MODES.index(m)))
    others = ", ".join(f"{m} {hours[m]:g}" for m in MODES if m in works and m != mode)
    why = f"back by {mode}: {works[mode]} ({hours[mode]:g} GPU-hours idle coming back"
    return ModeChoice(mode, why + (f"; {others})" if others else ")"), hours)
