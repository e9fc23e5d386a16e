"""Every incident and command the correlator builds fits :data:`streams.bounds.MAX_RECORD_BYTES`.

What grows with a job's size is kept short where the record is built, by one rule per field:

* an incident's restart gate keeps the first :data:`~streams.bounds.LIST_KEPT` waits and exclusions
  (in the gate's own order) and counts the rest (``waiting_more``, ``excluded_more``); its other
  faults the first ``LIST_KEPT``; every free text (summary, a reason, a why) at most
  :data:`~streams.bounds.TEXT_KEPT_CHARS`, cut in the middle so the newest clause stays;
* a command's text (``reason``, a notify's ``message``, a ticket's ``summary``) the same; the gate's
  exclusions a restart carries for people the first ``LIST_KEPT``; what a machine acts on
  (a restart's ``exclude`` lists, a ticket's ``nodes``/``gpus``, a fence's target) stays exact;
* whatever was cut is said in the record itself (an incident's ``cut``, a command's ``params.cut``),
  with where the full detail is: the archive keeps every event and every version, and
  ``faultline incident <id>`` shows them;
* a record still over the cap after that (a fleet's worth of names in an exact list) is cut to its
  identity by the publisher (:func:`minimal`), dead-lettered with the reason, never published whole.

A restart's exclusions never become fewer: if the exact lists could not fit, each node with a GPU
to leave out is left out whole (:func:`fold_exclusions`: a superset, so the job never lands on a
fenced GPU; it costs capacity, so that restart needs a person's approval and says why).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from streams.bounds import LIST_KEPT, MAX_RECORD_BYTES, TEXT_KEPT_CHARS, names, record_bytes
from streams.decisions import Command, Incident, RestartGate, Target

__all__ = ["WHERE", "EXCLUDE_BUDGET", "bounded_command", "bounded_incident", "fold_exclusions", "middle",
           "minimal"]

#: Where a person finds what a record leaves out.
WHERE = "the archive keeps every event: faultline incident {id}"
#: The most the exact exclude lists of one restart may take (bytes of their JSON); past it they are folded.
EXCLUDE_BUDGET = MAX_RECORD_BYTES // 2
#: The most of one exclusion's or fault's why kept in a record.
WHY_KEPT_CHARS = 300


def middle(text: str, limit: int = TEXT_KEPT_CHARS) -> str:
    """``text`` in at most ``limit`` characters: its start and its end (the newest clause), `` … `` between."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head - 3
    return f"{text[:head]} … {text[len(text) - tail:]}"


def _gate(gate: RestartGate, cut: list[str], keep: int) -> RestartGate:
    waiting, excluded = gate.waiting, gate.excluded
    if len(waiting) > keep:
        nodes = {w.node for w in waiting}
        cut.append(f"gate waits for {len(waiting):,} detectors on {len(nodes):,} nodes ({names(nodes)}), "
                   f"{keep} shown")
    if len(excluded) > keep:
        cut.append(f"gate leaves out {len(excluded):,} pieces ({names({x.node for x in excluded})}), {keep} shown")
    return gate.model_copy(update={
        "waiting": waiting[:keep], "waiting_more": gate.waiting_more + max(0, len(waiting) - keep),
        "excluded": [x.model_copy(update={"why": middle(x.why, WHY_KEPT_CHARS)}) for x in excluded[:keep]],
        "excluded_more": gate.excluded_more + max(0, len(excluded) - keep)})


def _incident(inc: Incident, keep: int, text: int) -> Incident:
    cut: list[str] = []
    gate = _gate(inc.gate, cut, keep) if inc.gate is not None else None
    if len(inc.faults) > keep:
        cut.append(f"{len(inc.faults):,} other faults, {keep} shown")
    faults = [f.model_copy(update={"reason": middle(f.reason, WHY_KEPT_CHARS)}) for f in inc.faults[:keep]]
    evidence = inc.evidence if keep >= LIST_KEPT else inc.evidence[:keep]
    if len(evidence) < len(inc.evidence):
        cut.append(f"{len(inc.evidence):,} evidence events, {len(evidence)} listed")
    if len(inc.summary) > text:
        cut.append(f"summary of {len(inc.summary):,} characters shortened")
    note = "; ".join(cut)
    if note:
        note = f"{note} ({WHERE.format(id=inc.id)})"
    return inc.model_copy(update={"gate": gate, "faults": faults, "evidence": evidence,
                                  "summary": middle(inc.summary, text), "cut": note})


def bounded_incident(inc: Incident) -> Incident:
    """``inc`` within the cap (module docstring); unchanged when nothing needs cutting."""
    out = _incident(inc, LIST_KEPT, TEXT_KEPT_CHARS)
    if record_bytes(out) > MAX_RECORD_BYTES:  # names too long for even that: the counts alone
        out = _incident(inc, 0, WHY_KEPT_CHARS)
    return out


def _short_params(params: dict[str, Any], cut: list[str]) -> dict[str, Any]:
    out = dict(params)
    for key in ("message", "summary"):
        if isinstance(out.get(key), str) and len(out[key]) > TEXT_KEPT_CHARS:
            out[key] = middle(out[key])
            cut.append(f"{key} shortened")
    gate = out.get("gate")
    if isinstance(gate, dict) and isinstance(gate.get("excluded"), list):
        excluded = gate["excluded"]
        if len(excluded) > LIST_KEPT:
            cut.append(f"gate exclusions: {len(excluded):,}, {LIST_KEPT} explained here (all are in exclude)")
        kept = [{**x, "why": middle(str(x.get("why", "")), WHY_KEPT_CHARS)} if isinstance(x, dict) else x
                for x in excluded[:LIST_KEPT]]
        out["gate"] = {**gate, "excluded": kept, "excluded_more": max(0, len(excluded) - LIST_KEPT)}
    skipped = out.get("checkpoint_skipped")
    if isinstance(skipped, list) and len(skipped) > LIST_KEPT:
        cut.append(f"checkpoints skipped: {len(skipped):,}, {LIST_KEPT} listed")
        out["checkpoint_skipped"] = skipped[:LIST_KEPT]
    return out


def bounded_command(cmd: Command) -> Command:
    """``cmd`` with its text and its lists for people within the cap; what a machine acts on is left exact."""
    cut: list[str] = []
    params = _short_params(cmd.params, cut)
    reason = cmd.reason
    if len(reason) > TEXT_KEPT_CHARS:
        reason = middle(reason)
        cut.append("reason shortened")
    if not cut:
        return cmd
    params["cut"] = f"{'; '.join(cut)} ({WHERE.format(id=cmd.incident)})"
    return cmd.model_copy(update={"params": params, "reason": reason})


def fold_exclusions(nodes: list[str], gpus: list[tuple[str, str]]) -> tuple[list[str], list[str], bool]:
    """A restart's exclude lists (nodes; (node, GPU id) pairs): exact when they fit :data:`EXCLUDE_BUDGET`,
    else every node with a GPU to leave out is left out whole (a superset). The lists, and whether folded."""
    exact = sorted(g for _, g in gpus)
    size = sum(len(n) + 3 for n in nodes) + sum(len(g) + 3 for g in exact)
    if size <= EXCLUDE_BUDGET:
        return nodes, exact, False
    return sorted(set(nodes) | {n for n, _ in gpus}), [], True


def minimal(record: Incident | Command, why: str, at: datetime | None = None) -> Incident | Command:
    """The smallest record of the same id and type that says it was cut and why (the publisher's last resort).

    ``why`` is said by its first word (``too_large``, ``over_cap``, ``invalid``); the dead letter has the
    rest. A command cut so is never carried out as it was decided: it asks for approval and keeps no
    params but ``cut`` (an executor acting on it would act without what it needed; a person looks first)."""
    note = f"not published whole: {why.split(':')[0][:40]} (the dead letter says why; faultline incident {_incident_id(record)})"
    if isinstance(record, Incident):
        return Incident(id=record.id, job=record.job, category=record.category, culprit=record.culprit,
                        opened_at=record.opened_at, severity=record.severity, state=record.state,
                        version=record.version, updated_at=record.updated_at or at or datetime.now(UTC),
                        summary=middle(record.summary, 120), cut=note)
    return Command(id=record.id, incident=record.incident, type=record.type, issued_at=record.issued_at,
                   target=Target(job=record.target.job, node=record.target.node, gpu=record.target.gpu),
                   requires_approval=True, params={"cut": note})


def _incident_id(record: Incident | Command) -> str:
    return record.id if isinstance(record, Incident) else record.incident
