"""The difference between two policies' decisions over the same events, exactly.

**Incidents** are paired first by id (the same decision on the same input gives the same id), then,
for those left, by the evidence they share: an incident's id hashes its first finding, so one that a
policy files under another category gets another id, but it still names the same events (the same
job, or for job-less hardware the same node). Each pair is *re-categorised* when its category
differs, *re-blamed* when its culprit (node and GPUs) differs; what is left is *removed* (only the
baseline opened it) or *added* (only the candidate did).

**Commands** are paired by id, then, among those left, by what they act on -- (type, job, node, GPU)
-- in the order issued: the same quarantine of the same GPU serving a differently named incident is
the same action. A pair is *changed* when it differs in what it does: whether it waits for a
person, or, for a restart, its checkpoint, size and exclusions. The rest is added or removed.
Approvals asked are the commands that wait for a person.

**Costs** per side, in total, per category and per XID (an incident counts under every XID among its
evidence): incidents, their lost GPU-hours -- the work since the checkpoint *and* the time the job is
down until it runs again, or until the end of the events, said so (:mod:`faultline.lost_hours`; a
start in the events that followed only the other policy's restart does not end this side's
downtime) -- and the hardware fenced for them: GPUs quarantined and nodes cordoned (each once),
lemon fences apart.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from faultline.backtest.judge import Decided, Json
from faultline.lost_hours import Timeline, account, restarts_by_job

__all__ = ["compare", "costs", "differs"]

FENCES = {"quarantine_gpu": "gpus_fenced", "cordon_node": "nodes_fenced"}


def _culprit(i: Json) -> tuple[str | None, tuple[str, ...]]:
    c = i.get("culprit") or {}
    return c.get("node"), tuple(sorted(c.get("gpus") or ()))


def _brief(i: Json, xids: dict[str, int]) -> Json:
    node, gpus = _culprit(i)
    return {"id": i["id"], "job": i.get("job"), "category": i["category"], "culprit": {"node": node, "gpus": list(gpus)},
            "opened_at": i["opened_at"], "state": i["state"], "severity": i["severity"],
            "lost_gpu_hours": i.get("lost_gpu_hours"), "lost": i.get("lost"), "xids": _xids_of(i, xids)}


def _with_lost(d: Decided, timeline: Timeline | None, other: Decided | None) -> Decided:
    """``d`` with each incident's honest lost GPU-hours (``lost_gpu_hours`` the total, ``lost`` the parts)."""
    if timeline is None:
        return d
    others = restarts_by_job(other.commands) if other is not None else {}

    def one(i: Json) -> Json:
        lost = account(i, d.commands, timeline, others.get(i.get("job") or "", ()))
        return i if lost is None else {**i, "lost_gpu_hours": lost.gpu_hours, "lost": lost.to_json()}

    return Decided([one(i) for i in d.incidents], d.commands, d.earlier)


def _xids_of(i: Json, xids: dict[str, int]) -> list[int]:
    return sorted({xids[e] for e in i.get("evidence") or () if e in xids})


def _pair_incidents(base: list[Json], cand: list[Json]) -> tuple[list[tuple[Json, Json]], list[Json], list[Json]]:
    by_id = {i["id"]: i for i in base}
    pairs = [(by_id[c["id"]], c) for c in cand if c["id"] in by_id]
    paired = {c["id"] for _, c in pairs}
    left_b = [b for b in base if b["id"] not in paired]
    left_c = [c for c in cand if c["id"] not in paired]
    taken: set[str] = set()
    added: list[Json] = []

    def subject(i: Json) -> tuple[str, str | None]:
        return ("job", i["job"]) if i.get("job") else ("node", _culprit(i)[0])

    for c in sorted(left_c, key=lambda i: (i["opened_at"], i["id"])):
        ev = set(c.get("evidence") or ())
        best: tuple[int, str, str] | None = None
        for b in left_b:
            if b["id"] in taken or subject(b) != subject(c):
                continue
            shared = len(ev & set(b.get("evidence") or ()))
            if shared and (best is None or (-shared, b["opened_at"], b["id"]) < best):
                best = (-shared, b["opened_at"], b["id"])
        if best is None:
            added.append(c)
            continue
        taken.add(best[2])
        pairs.append((next(b for b in left_b if b["id"] == best[2]), c))
    removed = [b for b in left_b if b["id"] not in taken]
    return pairs, removed, added


def _does(c: Json) -> tuple[Any, ...]:
    """What a command does, beyond what it acts on (a pair differing here is *changed*)."""
    if c["type"] != "restart_job":
        return (c["requires_approval"],)
    p = c.get("params") or {}
    ex = p.get("exclude") or {}
    return (c["requires_approval"], (p.get("checkpoint") or {}).get("step"), p.get("gpus"),
            tuple(sorted(ex.get("nodes") or ())), tuple(sorted(ex.get("gpus") or ())))


def _acts_on(c: Json) -> tuple[str, str | None, str | None, str | None]:
    t = c.get("target") or {}
    return c["type"], t.get("job"), t.get("node"), t.get("gpu")


def _pair_commands(base: list[Json], cand: list[Json]) -> tuple[list[tuple[Json, Json]], list[Json], list[Json]]:
    by_id = {c["id"]: c for c in base}
    pairs = [(by_id[c["id"]], c) for c in cand if c["id"] in by_id]
    done = {c["id"] for _, c in pairs}
    rest_b: dict[tuple[Any, ...], list[Json]] = defaultdict(list)
    for b in base:
        if b["id"] not in done:
            rest_b[_acts_on(b)].append(b)
    added: list[Json] = []
    for c in cand:
        if c["id"] in done:
            continue
        same = rest_b.get(_acts_on(c))
        if same:
            pairs.append((same.pop(0), c))
        else:
            added.append(c)
    removed = sorted((b for rest in rest_b.values() for b in rest), key=lambda c: (c["issued_at"], c["id"]))
    return pairs, removed, added


def _cmd(c: Json, d: Decided) -> Json:
    inc = d.incident(c["incident"])
    return {"id": c["id"], "type": c["type"], "target": c.get("target"), "issued_at": c["issued_at"],
            "requires_approval": c["requires_approval"], "incident": c["incident"],
            "category": inc["category"] if inc else None, "reason": c.get("reason", ""),
            **({"params": {k: c["params"][k] for k in ("checkpoint", "gpus", "exclude") if k in c["params"]}}
               if c["type"] == "restart_job" else {})}


def costs(d: Decided, xids: dict[str, int]) -> Json:
    """One side's totals, per category and per XID."""
    def blank() -> Json:
        return {"incidents": 0, "lost_gpu_hours": 0.0, "gpus_fenced": set(), "nodes_fenced": set()}

    total = blank()
    down_at_end = sum(1 for i in d.incidents if (i.get("lost") or {}).get("until") == "end_of_capture")
    by_cat: defaultdict[str, Json] = defaultdict(blank)
    by_xid: defaultdict[int, Json] = defaultdict(blank)
    for i in d.incidents:
        for row in (total, by_cat[i["category"]], *(by_xid[x] for x in _xids_of(i, xids))):
            row["incidents"] += 1
            row["lost_gpu_hours"] += i.get("lost_gpu_hours") or 0.0
    lemons: set[tuple[str | None, str | None]] = set()
    for c in d.commands:
        key = FENCES.get(c["type"])
        if key is None:
            continue
        t = c.get("target") or {}
        what = (t.get("node"), t.get("gpu")) if c["type"] == "quarantine_gpu" else (t.get("node"), None)
        inc = d.incident(c["incident"])
        rows = [total] + ([by_cat[inc["category"]], *(by_xid[x] for x in _xids_of(inc, xids))] if inc else [])
        for row in rows:
            row[key].add(what)
        if (c.get("params") or {}).get("reason") == "lemon":
            lemons.add(what)

    def plain(row: Json) -> Json:
        return {**row, "lost_gpu_hours": round(row["lost_gpu_hours"], 3), "gpus_fenced": len(row["gpus_fenced"]),
                "nodes_fenced": len(row["nodes_fenced"])}

    types = Counter(c["type"] for c in d.commands)
    return {**plain(total), "jobs_down_at_end": down_at_end, "commands": dict(sorted(types.items())),
            "approvals_asked": sum(1 for c in d.commands if c["requires_approval"]), "lemon_fences": len(lemons),
            "by_category": {k: plain(v) for k, v in sorted(by_cat.items())},
            "by_xid": {str(k): plain(v) for k, v in sorted(by_xid.items())}}


def _side_by_side(base: Json, cand: Json, key: str) -> list[Json]:
    names = sorted(set(base[key]) | set(cand[key]), key=lambda k: (int(k) if k.isdigit() else 0, k))
    zero = {"incidents": 0, "lost_gpu_hours": 0.0, "gpus_fenced": 0, "nodes_fenced": 0}
    return [{"name": n, "baseline": base[key].get(n, zero), "candidate": cand[key].get(n, zero)} for n in names]


def compare(base: Decided, cand: Decided, xids: dict[str, int],
            marks: Callable[[str, str], bool] | None = None, timeline: Timeline | None = None) -> Json:
    """The whole difference (plain JSON); ``marks(category, opened_at)`` flags differences that may
    come from expired raw telemetry rather than from the policy (:meth:`Retention.marks`); with the
    events' ``timeline`` lost GPU-hours count the time each job is down (else only the engine's figure)."""
    base, cand = _with_lost(base, timeline, cand), _with_lost(cand, timeline, base)
    pairs, removed, added = _pair_incidents(base.incidents, cand.incidents)

    def brief(i: Json) -> Json:
        out = _brief(i, xids)
        if marks is not None and marks(i["category"], i["opened_at"]):
            out["raw_telemetry_expired"] = True
        return out

    recat = [{"baseline": brief(b), "candidate": brief(c)} for b, c in pairs if b["category"] != c["category"]]
    reblamed = [{"baseline": brief(b), "candidate": brief(c)} for b, c in pairs if _culprit(b) != _culprit(c)]
    unchanged = sum(1 for b, c in pairs if b["category"] == c["category"] and _culprit(b) == _culprit(c))
    cpairs, cremoved, cadded = _pair_commands(base.commands, cand.commands)
    changed = [{"baseline": _cmd(b, base), "candidate": _cmd(c, cand)} for b, c in cpairs if _does(b) != _does(c)]
    by_type: dict[str, Json] = defaultdict(lambda: {"added": 0, "removed": 0, "changed": 0})
    for c in cadded:
        by_type[c["type"]]["added"] += 1
    for c in cremoved:
        by_type[c["type"]]["removed"] += 1
    for ch in changed:
        by_type[ch["candidate"]["type"]]["changed"] += 1
    b_cost, c_cost = costs(base, xids), costs(cand, xids)
    return {
        "incidents": {"baseline": len(base.incidents), "candidate": len(cand.incidents), "unchanged": unchanged,
                      "added": [brief(i) for i in added], "removed": [brief(i) for i in removed],
                      "recategorised": recat, "reblamed": reblamed},
        "commands": {"baseline": len(base.commands), "candidate": len(cand.commands),
                     "by_type": dict(sorted(by_type.items())),
                     "added": [_cmd(c, cand) for c in cadded], "removed": [_cmd(c, base) for c in cremoved],
                     "changed": changed},
        "costs": {"baseline": {k: v for k, v in b_cost.items() if not k.startswith("by_")},
                  "candidate": {k: v for k, v in c_cost.items() if not k.startswith("by_")},
                  "by_category": _side_by_side(b_cost, c_cost, "by_category"),
                  "by_xid": _side_by_side(b_cost, c_cost, "by_xid")},
    }


def differs(diff: Json) -> bool:
    """Whether the two sides decided anything differently."""
    i, c = diff["incidents"], diff["commands"]
    return bool(i["added"] or i["removed"] or i["recategorised"] or i["reblamed"]
                or c["added"] or c["removed"] or c["changed"])

