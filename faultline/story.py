"""An incident's story as a person reads it: every entry in one sentence, repeats grouped.

The archive's ``incident_timeline`` view holds the raw entries (signals with their JSON body,
incident versions, commands with their reason and parameters, executors' results), from an hour
before the incident opened to its last version. Two things it cannot show on its own:

* **The aftermath.** A fault's consequences often come after the correlator has decided: the
  NCCL watchdog of every other rank fires minutes later (its timeout is 10 minutes by default),
  torchelastic reports the exits, the scheduler marks the job failed. :func:`story` adds the
  job's (and the culprit node's) signals after the last version, until the story ends: the
  incident's last version when it is resolved or closed; otherwise the job's next run starting,
  the job's next incident opening, or :data:`AFTERMATH` after the last version, whichever first.
* **Sentences.** :func:`describe_signal` and :func:`describe_command` turn a body or parameters
  into one line (``XID 79: GPU has fallen off the bus. (GPU 3a:00)``, ``from step 1210
  (/mnt/ckpt/...) on 32 GPUs, excluding GPU GPU-e406...``), never JSON cut mid-token.

:func:`group` folds entries of one lane that say the same thing within :data:`GROUP_WINDOW` into
one (``31 × NCCL watchdog timeout ...``, with the ranks and nodes it came from), so that a
collective's timeout on every rank reads as the one event it is.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from sinks.archive.store import Archive

__all__ = ["AFTERMATH", "GROUP_WINDOW", "LANES", "Entry", "describe_command", "describe_signal", "gate_lines", "group",
           "story"]

LANES = ("signal", "incident", "command", "result")
AFTERMATH = timedelta(hours=1)
GROUP_WINDOW = timedelta(seconds=60)
_NOISE = ("gpu_sample", "agent_heartbeat", "trainer_heartbeat", "train_step", "end_of_capture")


@dataclass(frozen=True)
class Entry:
    """One line of the story: when, which lane, what kind, the sentence, and where it came from."""

    ts: datetime
    lane: str
    what: str
    text: str
    count: int = 1
    last_ts: datetime | None = None
    nodes: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()
    raw: str = field(default="", compare=False)
    command: str = ""  # a command entry's command id: what `faultline approve` and the executors' results name

    @property
    def label(self) -> str:
        """The sentence, with ``N ×`` in front of a group."""
        return f"{self.count} × {self.text}" if self.count > 1 else self.text

    @property
    def origin(self) -> str:
        """``ranks 0-30 on n01, n02`` for a group; the node for one signal; empty otherwise."""
        parts = []
        if self.ranks:
            parts.append(f"rank{'s' if len(self.ranks) > 1 else ''} {_ranges(self.ranks)}")
        if self.nodes:
            parts.append(("on " if parts else "") + ", ".join(self.nodes))
        return " ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"ts": self.ts, "lane": self.lane, "what": self.what, "text": self.text, "count": self.count,
                "last_ts": self.last_ts, "nodes": list(self.nodes), "ranks": list(self.ranks),
                "command": self.command or None}


def _ranges(values: Iterable[int]) -> str:
    """``0-7, 9, 12-13``."""
    out: list[str] = []
    run: list[int] = []
    for v in sorted(set(values)):
        if run and v == run[-1] + 1:
            run.append(v)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [v]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)


def _loads(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _gpu(ref: Any) -> str:
    if not isinstance(ref, Mapping):
        return ""
    for key in ("uuid", "index", "pci"):
        if ref.get(key) is not None:
            return f"GPU {ref[key]}"
    return ""


def _size(n: Any) -> str:
    if not isinstance(n, int | float):
        return ""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def _secs(ms: Any) -> str:
    return f"{ms / 1000:g} s" if isinstance(ms, int | float) else "?"


def describe_signal(kind: str, body: Mapping[str, Any] | str) -> str:
    """One sentence for a canonical event's body (:mod:`streams.events`); unknown kinds say their fields."""
    b = _loads(body) if isinstance(body, str) else dict(body)
    get = b.get
    match kind:
        case "xid":
            return f"XID {get('code')}: {get('message') or 'no message'} ({_gpu(get('gpu')) or 'GPU ?'})"
        case "gpu_lost":
            return f"{_gpu(get('gpu')) or 'a GPU'} lost: {get('message') or 'gone from NVML'}"
        case "kernel_fault":
            device = f" {get('device')}" if get("device") else ""
            return f"kernel {get('fault')} ({get('severity')}){device}: {get('message')}"
        case "nccl_timeout":
            return f"NCCL watchdog timeout ({get('op_type') or 'collective'} #{get('seq')}, timeout {_secs(get('timeout_ms'))})"
        case "nccl_progress":
            return f"NCCL progress: last completed #{get('last_completed')}, last enqueued #{get('last_enqueued')}"
        case "nccl_error":
            return f"NCCL error: {get('message')}"
        case "cuda_error":
            return f"CUDA error: {get('error') or get('message')}"
        case "cuda_oom":
            on = f" on GPU {get('gpu_index')}" if get("gpu_index") is not None else ""
            return f"CUDA out of memory{on}"
        case "app_error":
            return f"{get('exception') or 'error'}: {get('message')}"
        case "worker_exit":
            why = f"signal {get('signal')}" if get("signal") else f"exit code {get('exitcode')}"
            error = f": {get('error')}" if get("error") else ""
            return f"worker exited ({why}){error}"
        case "job_started":
            alloc = get("allocation") or []
            nodes = [a.get("node") for a in alloc if isinstance(a, Mapping)]
            gpus = get("world_size") or sum(len(a.get("gpus") or []) for a in alloc if isinstance(a, Mapping))
            return f"job started on {gpus} GPUs ({', '.join(str(n) for n in nodes) or 'no allocation'})"
        case "job_ended":
            return f"job {get('status')}"
        case "node_state":
            return "node ready" if get("ready") else "node not ready"
        case "bmc_power":
            return f"BMC: power {'on' if get('on') else 'off'}"
        case "bmc_sel":
            return f"BMC SEL: {get('sensor')} {get('description')}".strip()
        case "bmc_unreachable":
            return "BMC did not answer"
        case "checkpoint_saved":
            extra = ", ".join(x for x in (_size(get("bytes")), f"{get('seconds')} s" if get("seconds") else "") if x)
            extra = f" ({extra})" if extra else ""
            return f"checkpoint step {get('step')} saved{extra}: {get('path')}"
        case "checkpoint_failed":
            return f"checkpoint step {get('step')} failed: {get('error')}"
        case "checkpoint_loaded":
            return f"checkpoint step {get('step')} loaded: {get('path')}"
        case "inventory":
            gpus = get("gpus") or []
            names = sorted({str(g["name"]) for g in gpus if isinstance(g, Mapping) and g.get("name")})
            models = f" ({', '.join(names)})" if names else ""
            return f"inventory: {len(gpus)} GPUs{models}, rack {get('rack') or '?'}"
        case "operator_action":
            return f"{get('action')} by {get('by')}: {get('reason') or get('validated_by') or ''}".rstrip(": ")
    fields = ", ".join(f"{k}={v}" for k, v in b.items() if k != "kind" and v not in (None, "", [], {}))
    return f"{kind}: {fields}" if fields else kind


def describe_command(kind: str, params: Mapping[str, Any] | str, reason: str = "") -> str:
    """One sentence for a command: what it does and why (its reason)."""
    p = _loads(params) if isinstance(params, str) else dict(params)
    if kind == "restart_job":
        ck = p.get("checkpoint") or {}
        start = f"from step {ck.get('step')} ({ck.get('path')})" if ck else "from the start (no checkpoint)"
        ex = p.get("exclude") or {}
        avoid = [f"node {n}" for n in ex.get("nodes") or []] + [f"GPU {g}" for g in ex.get("gpus") or []]
        what = f"{start} on {p.get('gpus')} GPUs" + (f", excluding {', '.join(avoid)}" if avoid else "")
    elif kind == "open_ticket":
        what = f"{p.get('kind') or 'ticket'} ticket for {', '.join(p.get('gpus') or p.get('nodes') or []) or '?'}"
    elif kind == "notify":
        what = f"tell {p.get('to') or p.get('audience') or 'on-call'}: {p.get('message') or ''}".rstrip(": ")
    else:
        what = ", ".join(f"{k}={v}" for k, v in p.items() if v not in (None, "", [], {}))
    return "; ".join(x for x in (what, reason) if x)


GATE_WAIT = "waiting for a verdict on "


def _version_text(what: str, summary: str) -> str:
    """An incident version: its state, and, while its restart gate waits, for what (the summary's last clause)."""
    at = summary.rfind(GATE_WAIT)
    return f"{what}: {summary[at:]}" if at >= 0 else what


def gate_lines(payload: Mapping[str, Any]) -> list[str]:
    """What an incident's restart gate and its other faults say, for people (an incident's JSON)."""
    out = []
    gate = payload.get("gate") or {}
    if gate.get("state") == "waiting":
        waits = "; ".join(f"{w.get('node')}{' ' + str(w['gpu']) if w.get('gpu') else ''}: {w.get('detector')} due by "
                          f"{w.get('due')}" for w in gate.get("waiting") or [])
        out.append(f"restart gate: waiting for a verdict ({waits}), at the latest until {gate.get('bound')}")
    elif gate.get("state") == "passed":
        left = "; ".join(f"{x.get('node')}{' ' + str(x['gpu']) if x.get('gpu') else ''} ({x.get('verdict')}: "
                         f"{x.get('why')})" for x in gate.get("excluded") or [])
        out.append("restart gate: passed" + (f", leaving out {left}" if left else ", every piece judged"))
    for f in payload.get("faults") or []:
        culprit = f.get("culprit") or {}
        out.append(f"also {f.get('category')} on {culprit.get('node')} {', '.join(culprit.get('gpus') or [])}: "
                   f"{f.get('reason')}".rstrip())
    return out


def group(entries: Sequence[Entry], window: timedelta = GROUP_WINDOW) -> list[Entry]:
    """Entries of one lane saying the same thing within ``window`` of the first of them, folded into one."""
    out: list[Entry] = []
    open_groups: dict[tuple[str, str, str], int] = {}
    for e in sorted(entries, key=lambda x: (x.ts, LANES.index(x.lane) if x.lane in LANES else 9)):
        key = (e.lane, e.what, e.text + e.command)  # two commands are two entries, whatever they say
        at = open_groups.get(key)
        if at is not None and e.ts - out[at].ts <= window:
            g = out[at]
            out[at] = replace(g, count=g.count + e.count, last_ts=max(g.last_ts or g.ts, e.last_ts or e.ts),
                              nodes=tuple(sorted(set(g.nodes + e.nodes))), ranks=tuple(sorted(set(g.ranks + e.ranks))))
            continue
        open_groups[key] = len(out)
        out.append(e)
    return out


def _signal(row: Mapping[str, Any]) -> Entry:
    node, rank = row.get("node"), row.get("rank")
    return Entry(row["ts"], "signal", str(row["what"]), describe_signal(str(row["what"]), str(row.get("detail") or "")),
                 nodes=(node,) if node else (), ranks=(rank,) if rank is not None else (), raw=str(row.get("detail") or ""))


def _take_command(candidates: list[dict[str, Any]], detail: str) -> dict[str, Any]:
    """The archived command a timeline row of ``detail`` is, taken out of ``candidates`` (the commands of its
    type and time): the one whose reason and parameters the row shows, else the first; {} when none is left.
    Taking it out gives two commands of one type and millisecond (two GPUs fenced at once) their own ids."""
    for i, c in enumerate(candidates):
        shown = f"{'[needs approval] ' if c.get('requires_approval') else ''}{c.get('reason') or ''} {c.get('params')}"
        if shown == detail:
            return candidates.pop(i)
    return candidates.pop(0) if candidates else {}


def story(archive: Archive, incident: Mapping[str, Any]) -> list[Entry]:
    """Every entry of ``incident`` (a row of ``incidents_latest``): the view's, the aftermath, in time order."""
    inc_id = str(incident["id"])
    rows = archive.timeline(inc_id)
    commands: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for c in archive.commands(inc_id):
        commands.setdefault((c["type"], c["issued_at"]), []).append(c)
    entries = []
    for r in rows:
        lane = str(r["entry_type"])
        if lane == "signal":
            entries.append(_signal(r))
        elif lane == "command":
            c = _take_command(commands.get((r["what"], r["ts"])) or [], str(r.get("detail") or ""))
            text = describe_command(str(r["what"]), str(c.get("params") or "{}"), str(c.get("reason") or ""))
            if c.get("requires_approval"):
                text = f"waits for approval: {text}"
            target = [x for x in (c.get("node"), c.get("gpu")) if x]
            entries.append(Entry(r["ts"], lane, str(r["what"]), text, nodes=tuple(target), raw=str(r.get("detail") or ""),
                                 command=str(c.get("id") or "")))
        elif lane == "incident":  # what: "v2 gpu_off_bus mitigating (page)"; detail: the summary
            entries.append(Entry(r["ts"], lane, str(r["what"]), _version_text(str(r["what"]), str(r.get("detail") or "")),
                                 raw=str(r.get("detail") or "")))
        else:
            entries.append(Entry(r["ts"], lane, str(r["what"]), " ".join(str(r.get("detail") or "").split()),
                                 raw=str(r.get("detail") or "")))
    entries += [_signal(r) for r in _aftermath(archive, incident)]
    return sorted(entries, key=lambda e: (e.ts, LANES.index(e.lane) if e.lane in LANES else 9))


def _aftermath(archive: Archive, incident: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The job's (and job-less signals of the culprit node's) events after the incident's last version."""
    job, node = incident.get("job"), incident.get("culprit_node")
    if job is None and node is None:
        return []
    after = max(incident["opened_at"], incident.get("updated_at") or incident["opened_at"])
    if incident.get("state") in ("resolved", "closed"):
        return []
    end = after + AFTERMATH
    if job is not None:
        nexts = archive.query(
            "SELECT min(t) AS t FROM ("
            " SELECT ts AS t FROM events WHERE job = {job:String} AND kind = 'job_started' AND ts > {after:DateTime64(3)}"
            " UNION ALL SELECT opened_at AS t FROM incidents_latest WHERE job = {job:String}"
            " AND opened_at > {after:DateTime64(3)} AND id != {id:String})",
            {"job": job, "after": after, "id": incident["id"]})
        nxt = nexts[0]["t"] if nexts else None
        if nxt is not None and nxt.year > 1970:
            end = min(end, nxt)
    noise = ", ".join(f"'{k}'" for k in _NOISE)
    return archive.query(
        "SELECT ts, 'signal' AS entry_type, toString(kind) AS what, body AS detail, node, rank FROM events FINAL"
        " WHERE ts > {after:DateTime64(3)} AND ts < {end:DateTime64(3)} AND kind NOT IN (" + noise + ")"
        " AND (job = {job:String} OR (job IS NULL AND node = {node:String})) ORDER BY ts, id",
        {"after": after, "end": end, "job": job or "", "node": node or ""})
