"""``faultline report checkpoints`` for people: each job's checkpoint interval beside the advised one.

The rule is :mod:`sinks.checkpoint_advice`'s, printed above the table with the prior it falls back on;
each row says what its MTBF rests on (the job's GPU model, the whole fleet, or the prior) and on how
many hardware failures. Cells are terminal-safe and tables plain in a pipe
(:func:`faultline.terminal.print_table`); times are UTC.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from faultline.terminal import Column, make_console, plural, print_table

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["render_advice"]

_BASIS = {"gpu_model": "its GPU model", "fleet": "the whole fleet", "prior": "the prior"}

_COLUMNS = [
    Column("job", kind="id"), Column("gpus", kind="number"), Column("gpu_name", "GPU model"),
    Column("interval_s", "interval s", "number"), Column("interval_source", "from"),
    Column("save_s", "save s", "number"), Column("mtbf_h", "MTBF h", "number"), Column("mtbf_from", "MTBF from"),
    Column("advised_interval_s", "advised s", "number"),
    Column("lost_gpu_hours_per_day_now", "lost GPU-h/day now", "number"),
    Column("lost_gpu_hours_per_day_advised", "at advised", "number"),
    Column("cost_gpu_hours_per_day", "difference GPU-h/day", "number"),
    Column("last_save_at", "last save", "time"),
]


def _mtbf_from(row: dict[str, Any]) -> str:
    """``its GPU model (6 hardware failures)``; the prior says what the archive had instead."""
    failures = plural(int(row["failures"] or 0), "hardware failure")
    if row["mtbf_basis"] == "prior":
        return f"the prior (archive: {failures})"
    return f"{_BASIS.get(row['mtbf_basis'], row['mtbf_basis'])} ({failures})"


def render_advice(doc: dict[str, Any], console: Console | None = None) -> None:
    """The rule, the prior, and one row per job (or a line saying there is none)."""
    console = console or make_console()
    prior = doc["prior"]

    def say(text: str) -> None:
        console.print(text, markup=False, highlight=False)

    say("faultline report checkpoints: every job's latest run, over the archive's whole history")
    say(f"rule: {doc['rule']}")
    say(f"MTBF: the fleet's hardware failures per GPU-hour for the job's GPU model (else the whole fleet's, "
        f"with {doc['min_failures']}+ failures), times the job's GPUs; with fewer, the prior: "
        f"{prior['interruptions']} interruptions in {prior['days']} days on {prior['gpus']:,} GPUs "
        f"({prior['source']})")
    console.print()
    if not doc["jobs"]:
        say("Checkpoint advice: no job has started in the archive")
        return
    rows = [{**r, "mtbf_from": _mtbf_from(r)} for r in doc["jobs"]]
    print_table(console, "Checkpoint advice", rows, _COLUMNS,
                caption="difference: the GPU-hours a day the job would win back at the advised interval")
