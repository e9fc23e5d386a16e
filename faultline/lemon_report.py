"""``faultline report lemons``: the GPUs and nodes that keep hurting jobs, worst first, with their evidence.

Read from the archive's ``lemon_implications`` view (each failure incident of a job blamed on
software or an unknown cause, once per culprit GPU) and ``lemon_fences`` (what the correlator
fenced), and scored with the correlator's own arithmetic and policy (:mod:`correlators.lemons`,
``lemons`` in the policy): the same score the correlator keeps, at the time of the archive's newest
event (its event clock; ``at`` to choose another). A GPU fenced as a lemon and since released (a
release needs a recorded validation) starts afresh from the release, as in the correlator.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

from correlators.lemons import Implication, decayed, implicated_jobs, score
from correlators.policy import Lemons
from sinks.archive.store import Archive

__all__ = ["lemon_report", "print_lemons"]

Json = dict[str, Any]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ms(t: datetime) -> int:
    return (t.astimezone(UTC) - _EPOCH) // timedelta(milliseconds=1)


def _utc(t: datetime) -> datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def lemon_report(archive: Archive, policy: Lemons, since: datetime | None = None, at: datetime | None = None,
                 top: int = 20) -> Json:
    """The worst ``top`` GPUs and nodes by lemon score at ``at``, from the incidents opened since ``since``."""
    newest = archive.query("SELECT count() AS n, max(ts) AS last FROM events")[0]
    now = at or (_utc(newest["last"]) if newest["n"] else datetime.now(UTC))
    rows = archive.query("SELECT * FROM lemon_implications WHERE opened_at >= fromUnixTimestamp64Milli("
                         "{since:Int64}, 'UTC') AND opened_at <= fromUnixTimestamp64Milli({at:Int64}, 'UTC') "
                         "ORDER BY opened_at, incident, gpu", {"since": _ms(since or _EPOCH), "at": _ms(now)})
    fences = archive.query("SELECT * FROM lemon_fences ORDER BY issued_at, command")
    releases = archive.query("SELECT ifNull(node, '') AS node, ifNull(gpu, '') AS gpu, issued_at FROM commands FINAL "
                             "WHERE type = 'release_gpu' ORDER BY issued_at")
    w, hl = policy.weights, policy.half_life_s

    def state(node: str, gpu: str) -> tuple[str, Json | None, datetime | None]:
        """('fenced' | 'validated' | '', the newest lemon fence, when it was released)."""
        mine = [f for f in fences if f["node"] == node and (f["gpu"] == gpu or (gpu == "" and f["type"] == "cordon_node"))]
        if not mine:
            return "", None, None
        last = mine[-1]
        back = [_utc(r["issued_at"]) for r in releases if r["node"] == node and r["gpu"] in (gpu, "")
                and _utc(r["issued_at"]) >= _utc(last["issued_at"])]
        return ("validated", last, back[0]) if back else ("fenced", last, None)

    gpus: dict[tuple[str, str], list[Json]] = defaultdict(list)
    nodes: dict[str, dict[str, Json]] = defaultdict(dict)
    for r in rows:
        if w.get(r["category"], 0.0) <= 0:
            continue
        if r["gpu"]:
            gpus[(r["node"], r["gpu"])].append(r)
        nodes[r["node"]].setdefault(r["incident"], r)

    def entry(kind: str, node: str, gpu: str, found: list[Json], index: Any) -> Json:
        st, fence, released = state(node, gpu)
        kept = [r for r in found if released is None or _utc(r["opened_at"]) > released]
        imps = [Implication(_utc(r["opened_at"]), r["job"], r["category"],
                            (1.0 / max(1, r["culprit_gpus"])) if kind == "gpu" else 1.0) for r in kept]
        evidence = [{"incident": r["incident"], "job": r["job"], "category": r["category"], "opened_at": r["opened_at"],
                     "state": r["state"], "counts": round(decayed(i, now, w, hl), 3)} for r, i in zip(kept, imps, strict=True)]
        return {"node": node, "gpu": gpu or None, "gpu_index": index, "score": round(score(imps, now, w, hl), 3),
                "incidents": len(kept), "jobs": len(implicated_jobs(imps, w)),
                "categories": sorted({r["category"] for r in kept}), "last_at": kept[-1]["opened_at"] if kept else None,
                "state": st, "fenced_at": fence["issued_at"] if fence else None,
                "fenced_score": fence["score"] if fence else None, "evidence": evidence}

    gpu_rows = [entry("gpu", n, g, found, found[-1]["gpu_index"]) for (n, g), found in gpus.items()]
    node_rows = [entry("node", n, "", list(found.values()), None) for n, found in nodes.items()]

    def worst(rs: list[Json]) -> list[Json]:
        return sorted(rs, key=lambda r: (-r["score"], r["node"], r["gpu"] or ""))[:top]

    return {"at": now, "since": since, "policy": {"threshold": policy.threshold, "node_threshold": policy.node_threshold,
                                                  "half_life_s": hl, "min_jobs": policy.min_jobs, "weights": dict(w),
                                                  "enabled": policy.enabled},
            "gpus": worst(gpu_rows), "nodes": worst(node_rows),
            "fenced": [f for f in fences if state(f["node"], f["gpu"] if f["type"] == "quarantine_gpu" else "")[0]
                       == "fenced"]}


def print_lemons(report: Json) -> None:
    """The two tables for a person, worst first, each row with the incidents behind it."""
    from faultline.terminal import Column, human_time, make_console, print_table

    console = make_console()
    p = report["policy"]
    console.print(f"faultline report lemons: scores at {human_time(report['at'])} (the archive's newest event), "
                  f"half-life {p['half_life_s'] / 86400:g} days; a GPU is fenced at {p['threshold']:g} with incidents "
                  f"of {p['min_jobs']}+ jobs, a node at {p['node_threshold']:g}"
                  + ("" if p["enabled"] else " (lemon fencing is off in this policy)"), markup=False, highlight=False)
    for key, title in (("gpus", "GPUs"), ("nodes", "Nodes")):
        rows = [{**r, "evidence_ids": [e["incident"] for e in r["evidence"]]} for r in report[key]]
        console.print()
        if not rows:
            console.print(f"{title}: none implicated in failures blamed on software or unknown causes",
                          markup=False, highlight=False)
            continue
        cols = [Column("node", kind="id")] + ([Column("gpu_index", "gpu", "number"), Column("gpu", "uuid", "id")]
                                              if key == "gpus" else [])
        cols += [Column("score", kind="number"), Column("incidents", kind="number"), Column("jobs", kind="number"),
                 Column("categories", kind="list"), Column("last_at", "last", "time"), Column("state"),
                 Column("evidence_ids", "evidence (incidents)", "list")]
        print_table(console, f"{title} by lemon score", rows, cols,
                    caption="`faultline incident ID` tells each incident's story")
