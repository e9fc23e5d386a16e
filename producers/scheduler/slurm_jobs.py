"""Slurm jobs, from ``squeue --json`` or ``scontrol show job -d`` text, as :class:`JobView` s.

Both forms come down to a :class:`SlurmJob`: its state, when it (re)started
and ended, and its allocation -- the nodes in order with the GPU indices of
each, read from the detailed GRES (``gpu:2(IDX:0-1)``, ``gpu:a100:4(IDX:0-3)``,
``gpu(IDX:0,2)``): ``gres_detail`` in JSON (one entry per allocated node, in
node order), the ``Nodes=... GRES=...`` lines of ``scontrol show job -d``.
JSON field shapes of Slurm 21.08 to 24.x are accepted (plain numbers or
``{"set", "number"}``; a state string or list; ``job_resources`` node lists
of either form).

:func:`job_view` ranks the GPUs in allocation order (node by node, GPU by
GPU: the i-th rank on a node runs on its i-th GPU) and adds what the job's
comment says (``sbatch --comment``), else defaults::

    faultline: elastic=8:16 max_restarts=3 checkpoint_dir=/ckpt/llama checkpoint_interval_s=900 gpu_class=H100

=============================  ===============================================
hint                           default
=============================  ===============================================
``elastic=MIN:MAX``            fixed size: the allocated GPU count
``max_restarts=N``             the source's ``max_restarts`` setting
``checkpoint_dir``/``..._s``   none
``gpu_class``                  the GRES type (``a100`` in ``gpu:a100:4``)
``owner``                      the job's user
=============================  ===============================================
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from producers.scheduler.hostlist import expand_hostlist
from producers.scheduler.scontrol_text import Record, parse_records
from producers.scheduler.tracking import JobState, JobView

__all__ = [
    "SlurmJob",
    "gpu_gres",
    "job_hints",
    "job_view",
    "jobs_from_json",
    "jobs_from_text",
]

_GRES = re.compile(r"(?P<name>[A-Za-z][\w.-]*)(?::(?P<a>[^:,()]+))?(?::(?P<b>[^:,()]+))?\(IDX:(?P<idx>[^)]*)\)")
_HINT = re.compile(r"([A-Za-z_]\w*)=([^\s,;]+)")

_STATES: dict[str, JobState] = {
    "RUNNING": "running",
    "COMPLETED": "finished",
    "FAILED": "failed",
    "TIMEOUT": "failed",
    "NODE_FAIL": "failed",
    "OUT_OF_MEMORY": "failed",
    "BOOT_FAIL": "failed",
    "DEADLINE": "failed",
    "CANCELLED": "cancelled",
    "PREEMPTED": "cancelled",
}  # anything else (PENDING, CONFIGURING, COMPLETING, SUSPENDED, REQUEUED...) is "other"


@dataclass(frozen=True)
class SlurmJob:
    """One Slurm job as either output form describes it."""

    job_id: str
    name: str
    state: str
    user: str | None = None
    comment: str = ""
    restarts: int = 0
    start_time: datetime | None = None
    end_time: datetime | None = None
    gpus: list[tuple[str, list[int]]] = field(default_factory=list)  # per allocated node, in order
    gpu_type: str | None = None


# --- GRES --------------------------------------------------------------------------------


def _indices(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        lo, sep, hi = part.strip().partition("-")
        if lo.isdigit() and (not sep or hi.isdigit()):
            out.extend(range(int(lo), int(hi if sep else lo) + 1))
    return out


def gpu_gres(detail: str) -> tuple[list[int], str | None]:
    """GPU indices and type in a detailed GRES string: ``gpu:a100:2(IDX:0-1),nic:1(IDX:0)`` -> ``[0, 1], 'a100'``."""
    indices: list[int] = []
    gpu_type: str | None = None
    for m in _GRES.finditer(detail):
        if m.group("name") != "gpu":
            continue
        indices.extend(_indices(m.group("idx")))
        a = m.group("a")
        if a is not None and not a.isdigit():
            gpu_type = gpu_type or a
    return sorted(set(indices)), gpu_type


# --- JSON (squeue --json) -------------------------------------------------------------------


def _num(value: Any) -> int | None:
    """A number in either JSON shape: ``5`` or ``{"set": true, "infinite": false, "number": 5}``."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _epoch(value: Any) -> datetime | None:
    seconds = _num(value)
    return datetime.fromtimestamp(seconds, UTC) if seconds else None


def _state(value: Any) -> str:
    if isinstance(value, list):
        value = value[0] if value else ""
    return str(value or "").upper()


def _comment(value: Any) -> str:
    if isinstance(value, Mapping):  # data_parser v0.0.40+: {"administrator", "job", "system"}
        value = value.get("job")
    return value if isinstance(value, str) else ""


def _json_nodes(job: Mapping[str, Any]) -> list[str]:
    resources = job.get("job_resources") or {}
    if isinstance(resources, Mapping):
        nodes = resources.get("nodes")
        if isinstance(nodes, Mapping) and isinstance(nodes.get("allocation"), list):  # v0.0.40+
            return [str(n.get("name")) for n in nodes["allocation"] if isinstance(n, Mapping)]
        if isinstance(resources.get("allocated_nodes"), list):  # v0.0.37 .. v0.0.39
            return [str(n.get("nodename")) for n in resources["allocated_nodes"] if isinstance(n, Mapping)]
    text = job.get("nodes")
    return expand_hostlist(text) if isinstance(text, str) and text else []


def _json_job(job: Mapping[str, Any]) -> SlurmJob:
    nodes = _json_nodes(job)
    details = [d for d in job.get("gres_detail") or [] if isinstance(d, str)]
    per_node = [gpu_gres(d) for d in details]
    gpus = [(node, idx) for node, (idx, _) in zip(nodes, per_node, strict=False)]
    return SlurmJob(
        job_id=str(job.get("job_id")),
        name=str(job.get("name") or ""),
        state=_state(job.get("job_state")),
        user=job.get("user_name") or None,
        comment=_comment(job.get("comment")),
        restarts=_num(job.get("restart_cnt")) or 0,
        start_time=_epoch(job.get("start_time")),
        end_time=_epoch(job.get("end_time")),
        gpus=gpus,
        gpu_type=next((t for _, t in per_node if t), None),
    )


def jobs_from_json(doc: Mapping[str, Any]) -> list[SlurmJob]:
    """The jobs of a ``squeue --json`` document."""
    return [_json_job(j) for j in doc.get("jobs") or [] if isinstance(j, Mapping)]


# --- text (scontrol show job -d) ------------------------------------------------------------


def _local_time(text: str | None) -> datetime | None:
    """scontrol prints the controller's local time without an offset: read it as this host's."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text).astimezone(UTC)
    except ValueError:
        return None


def _text_job(rec: Record) -> SlurmJob:
    gpus: list[tuple[str, list[int]]] = []
    gpu_type: str | None = None
    for detail in rec.details:
        idx, kind = gpu_gres(detail.get("GRES", ""))
        gpu_type = gpu_type or kind
        for node in expand_hostlist(detail.get("Nodes", "")):
            gpus.append((node, idx))
    user = rec.get("UserId")
    restarts = rec.get("Restarts") or "0"
    return SlurmJob(
        job_id=rec.get("JobId") or "",
        name=rec.get("JobName") or "",
        state=(rec.get("JobState") or "").upper(),
        user=user.split("(", 1)[0] if user else None,
        comment=rec.fields.get("Comment", ""),
        restarts=int(restarts) if restarts.isdigit() else 0,
        start_time=_local_time(rec.get("StartTime")),
        end_time=_local_time(rec.get("EndTime")),
        gpus=gpus,
        gpu_type=gpu_type,
    )


def jobs_from_text(text: str) -> list[SlurmJob]:
    """The jobs of ``scontrol show job -d`` output."""
    return [_text_job(r) for r in parse_records(text, "JobId")]


# --- the view ----------------------------------------------------------------------------------


def job_hints(comment: str) -> dict[str, str]:
    """``key=value`` hints in a job comment (an optional ``faultline:`` prefix is ignored)."""
    return dict(_HINT.findall(comment or ""))


def _elastic(spec: str | None, world: int) -> dict[str, int]:
    if spec:
        lo, _, hi = spec.replace("-", ":").partition(":")
        if lo.isdigit() and (hi or lo).isdigit():
            return {"min_gpus": int(lo), "max_gpus": int(hi or lo)}
    return {"min_gpus": world, "max_gpus": world}


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def job_view(job: SlurmJob, key: Literal["id", "name"] = "id", max_restarts: int | None = None) -> JobView:
    """What the tracker needs of ``job``: its state, its run, and its ``job_started`` fields."""
    hints = job_hints(job.comment)
    allocation, rank = [], 0
    for node, gpus in job.gpus:
        allocation.append({"node": node, "gpus": gpus, "ranks": list(range(rank, rank + len(gpus)))})
        rank += len(gpus)
    restarts = hints.get("max_restarts")
    checkpoint = {k: v for k, v in (("dir", hints.get("checkpoint_dir")),
                                     ("interval_s", _float(hints.get("checkpoint_interval_s")))) if v is not None}
    details: dict[str, Any] = {
        "allocation": allocation,
        "world_size": rank or None,
        "elastic": _elastic(hints.get("elastic"), rank) if rank else None,
        "checkpoint": checkpoint or None,
        "gpu_class": hints.get("gpu_class") or job.gpu_type,
        "owner": hints.get("owner") or job.user,
        "max_restarts": int(restarts) if restarts and restarts.isdigit() else max_restarts,
    }
    start = job.start_time.timestamp() if job.start_time else 0
    return JobView(
        job=job.job_id if key == "id" else job.name or job.job_id,
        state=_STATES.get(job.state.split("+")[0].split()[0] if job.state else "", "other"),
        run=f"{job.job_id}.{job.restarts}.{start:.0f}",
        started_at=job.start_time,
        ended_at=job.end_time,
        details=details,
    )
