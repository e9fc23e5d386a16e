"""A backtest for people: what was replayed, what changed, and what it costs, as tables.

The first lines say what was compared with what, over which window, how many events in how long,
and what the archive's retention means for the window; then one table each: incidents, commands by
type, costs per category and per XID (baseline -> candidate), and the incidents and commands that
differ, one line each (``--json`` has every field; ``--html`` draws them side by side).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from faultline.terminal import Column, human_time, make_console, plural, print_table

__all__ = ["render"]

Json = dict[str, Any]
SHOWN = 40  # differing incidents and commands listed here; --json and --html have them all


def _say(console: Console, text: str = "") -> None:
    console.print(text, markup=False, highlight=False)


def _arrow(b: float | int, c: float | int) -> str:
    return f"{b:g} -> {c:g}" if b != c else f"{b:g}"


def _culprit(i: Json) -> str:
    cul = i.get("culprit") or {}
    return " ".join([cul.get("node") or "", *(cul.get("gpus") or [])]).strip() or "-"


def _change_rows(d: Json) -> list[Json]:
    inc = d["incidents"]
    rows: list[Json] = []
    for kind, key in (("re-categorised", "recategorised"), ("re-blamed", "reblamed")):
        for pair in inc[key]:
            b, c = pair["baseline"], pair["candidate"]
            rows.append({"change": kind, "job": c["job"], "opened": b["opened_at"],
                         "baseline": f"{b['category']} {_culprit(b)}", "candidate": f"{c['category']} {_culprit(c)}",
                         "note": "raw telemetry expired" if b.get("raw_telemetry_expired") else ""})
    for kind, key, side in (("removed", "removed", "baseline"), ("added", "added", "candidate")):
        for i in inc[key]:
            rows.append({"change": kind, "job": i["job"], "opened": i["opened_at"],
                         side: f"{i['category']} {_culprit(i)}",
                         "note": "raw telemetry expired" if i.get("raw_telemetry_expired") else ""})
    return sorted(rows, key=lambda r: (r["opened"], r["change"]))


def _command_rows(d: Json) -> list[Json]:
    cmds = d["commands"]
    rows: list[Json] = []
    for kind, key in (("removed", "removed"), ("added", "added")):
        for c in cmds[key]:
            t = c.get("target") or {}
            rows.append({"change": kind, "issued": c["issued_at"], "type": c["type"], "job": t.get("job"),
                         "node": t.get("node"), "gpu": t.get("gpu"), "approval": c["requires_approval"],
                         "category": c.get("category")})
    for pair in cmds["changed"]:
        b, c = pair["baseline"], pair["candidate"]
        t = c.get("target") or {}
        what = []
        if b["requires_approval"] != c["requires_approval"]:
            what.append("now waits for approval" if c["requires_approval"] else "no longer waits for approval")
        if b.get("params") != c.get("params"):
            what.append("another checkpoint, size or exclusions")
        rows.append({"change": "changed: " + "; ".join(what), "issued": c["issued_at"], "type": c["type"],
                     "job": t.get("job"), "node": t.get("node"), "gpu": t.get("gpu"),
                     "approval": c["requires_approval"], "category": c.get("category")})
    return sorted(rows, key=lambda r: (r["issued"], r["type"]))


def render(result: Json, console: Console | None = None) -> None:
    """Print a backtest's JSON (:meth:`~faultline.backtest.run.Backtest.to_json`) for a person."""
    console = console or make_console()
    pol, win, tim = result["policies"], result["window"], result["timing"]
    against = "what was decided live" if result["against"] == "live" else f"the current policy ({pol.get('baseline')})"
    _say(console, f"faultline backtest: candidate {pol.get('candidate')} against {against}; {result['source']}")
    warm = f" (judged from {human_time(win['read_from'])}: warm-up)" if win.get("read_from") and win["read_from"] != \
        win.get("since") else ""
    span = (f"window {human_time(win['since']) or 'the first event'} to {human_time(win['until']) or 'the last'}"
            if win.get("since") or win.get("until") else "the whole history")
    _say(console, f"{span}{warm}: "
                  f"{plural(result['events'], 'event')} judged in {tim['total_s']:.1f} s "
                  f"({tim['events_per_s'] or 0:,} events/s; reading {tim['read_s']:.1f} s, engines {tim['engine_s']:.1f} s)")
    if result.get("retention"):
        _say(console, result["retention"]["note"])
    if result["unreadable_events"]["rows"]:
        _say(console, f"{plural(result['unreadable_events']['rows'], 'archived row')} were not events and were "
                      f"skipped ({result['unreadable_events']['first']})")
    if result["bad_lines"]:
        _say(console, f"{plural(result['bad_lines'], 'capture line')} refused (bad input), as `faultline replay` would")
    inc, cmds, costs = result["incidents"], result["commands"], result["costs"]
    b, c = costs["baseline"], costs["candidate"]
    _say(console)
    _say(console, f"incidents {_arrow(inc['baseline'], inc['candidate'])}: {len(inc['added'])} added, "
                  f"{len(inc['removed'])} removed, {len(inc['recategorised'])} re-categorised, "
                  f"{len(inc['reblamed'])} re-blamed, {inc['unchanged']} unchanged")
    _say(console, f"commands {_arrow(cmds['baseline'], cmds['candidate'])}; approvals asked "
                  f"{_arrow(b['approvals_asked'], c['approvals_asked'])}; lost GPU-hours "
                  f"{_arrow(b['lost_gpu_hours'], c['lost_gpu_hours'])}; fenced GPUs "
                  f"{_arrow(b['gpus_fenced'], c['gpus_fenced'])}, nodes {_arrow(b['nodes_fenced'], c['nodes_fenced'])} "
                  f"(lemons {_arrow(b['lemon_fences'], c['lemon_fences'])})")
    down = (b.get("jobs_down_at_end", 0), c.get("jobs_down_at_end", 0))
    if any(down):
        _say(console, f"lost GPU-hours count the work since the checkpoint and the time each job is down; jobs "
                      f"still down at the end of the events (counted until then) {_arrow(*down)}")
    if not result["differs"]:
        _say(console, "no difference: the candidate decides exactly what the baseline did")
        return
    types = sorted(set(b["commands"]) | set(c["commands"]) | set(cmds["by_type"]))
    _say(console)
    print_table(console, "Commands by type", [
        {"type": t, "baseline": b["commands"].get(t, 0), "candidate": c["commands"].get(t, 0),
         **cmds["by_type"].get(t, {"added": 0, "removed": 0, "changed": 0})} for t in types],
        [Column("type"), *(Column(k, kind="number") for k in ("baseline", "candidate", "added", "removed", "changed"))])
    for key, title, name in (("by_category", "Costs by category", "category"), ("by_xid", "Costs by XID", "xid")):
        rows = [{name: r["name"], **{f"{f}_{side[0]}": r[side][f] for side in ("baseline", "candidate")
                                     for f in ("incidents", "lost_gpu_hours", "gpus_fenced", "nodes_fenced")}}
                for r in costs[key] if r["baseline"] != r["candidate"]]
        if rows:
            _say(console)
            print_table(console, title, rows, [Column(name)] + [
                Column(f"{f}_{s}", f"{label} {'base' if s == 'b' else 'cand'}", "number")
                for f, label in (("incidents", "incidents"), ("lost_gpu_hours", "lost GPU-h"),
                                 ("gpus_fenced", "GPUs fenced"), ("nodes_fenced", "nodes fenced")) for s in "bc"],
                caption="only the rows that differ")
    for title, rows, cols in (
        ("Incidents that differ", _change_rows(result),
         [Column("change"), Column("job", kind="id"), Column("opened", kind="time"), Column("baseline"),
          Column("candidate"), Column("note")]),
        ("Commands that differ", _command_rows(result),
         [Column("change"), Column("issued", kind="time"), Column("type"), Column("job", kind="id"),
          Column("node", kind="id"), Column("gpu", kind="id"), Column("approval"), Column("category")])):
        if rows:
            _say(console)
            more = f"the first {SHOWN} of {len(rows)}: --json or --html for all" if len(rows) > SHOWN else ""
            print_table(console, title, rows[:SHOWN], cols, caption=more)
