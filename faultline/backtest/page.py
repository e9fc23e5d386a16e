"""``faultline backtest --html``: the differing incidents side by side, baseline left, candidate right.

One self-contained page (inline CSS, no scripts, every value escaped), to attach to a policy
change's review: the summary, the costs that differ by category and XID, then one row per
differing incident with each side's card (category, culprit, state, lost GPU-hours, XIDs, and the
commands that side issued for it), then the commands that differ on incidents present on both sides.
"""

from __future__ import annotations

import html
from typing import Any

from faultline.backtest.judge import Decided
from faultline.backtest.run import Backtest
from faultline.terminal import human_time

__all__ = ["render_page"]

Json = dict[str, Any]
_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#111}h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f4f6}.num{text-align:right}.pair{display:grid;grid-template-columns:1fr 1fr;gap:12px;margin:10px 0}
.card{border:1px solid #d1d5db;border-radius:6px;padding:8px 10px}.none{color:#6b7280;font-style:italic}
.b{border-left:4px solid #9ca3af}.c{border-left:4px solid #2563eb}.tag{font-size:12px;background:#fef3c7;padding:1px 6px;
border-radius:4px;margin-left:6px}.cmd{font-family:ui-monospace,monospace;font-size:12px}.diff{background:#eff6ff}
"""


def _e(v: Any) -> str:
    return html.escape("-" if v is None or v == "" else str(v))


def _culprit(i: Json) -> str:
    c = i.get("culprit") or {}
    return " ".join([c.get("node") or "", *(c.get("gpus") or [])]).strip() or "-"


def _card(i: Json | None, side: Decided, cls: str, label: str) -> str:
    if i is None:
        return f'<div class="card {cls}"><span class="none">{label}: no such incident</span></div>'
    full = side.incident(i["id"]) or i
    cmds = [c for c in side.commands if c["incident"] == i["id"]]
    tag = '<span class="tag">raw telemetry expired</span>' if i.get("raw_telemetry_expired") else ""
    lines = "".join(f'<div class="cmd">{_e(human_time(c["issued_at"], ms=True))} {_e(c["type"])} '
                    f'{_e(" ".join(str(v) for v in (c.get("target") or {}).values() if v))}'
                    f'{" (waits for approval)" if c["requires_approval"] else ""}</div>' for c in cmds)
    return (f'<div class="card {cls}"><b>{label}: {_e(i["category"])}</b>{tag}<br>culprit {_e(_culprit(i))}<br>'
            f'job {_e(i.get("job"))}, {_e(full.get("severity"))}, state {_e(full.get("state"))}, opened '
            f'{_e(human_time(i["opened_at"]))}<br>lost GPU-hours {_e(full.get("lost_gpu_hours"))}; XIDs '
            f'{_e(", ".join(map(str, i.get("xids") or [])) or None)}<br>'
            f'{lines or "<span class=none>no commands</span>"}<br><span class="none">{_e(i["id"])}</span></div>')


def _table(rows: list[list[Any]], head: list[str]) -> str:
    def cell(v: Any) -> str:
        return f'<td class="num">{_e(v)}</td>' if isinstance(v, int | float) else f"<td>{_e(v)}</td>"

    return ("<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"
            + "".join("<tr>" + "".join(cell(v) for v in r) + "</tr>" for r in rows) + "</table>")


def _window(w: Json) -> str:
    if not w.get("since") and not w.get("until"):
        return "the whole history"
    return f"window {human_time(w.get('since')) or 'the first event'} to {human_time(w.get('until')) or 'the last'}"


def render_page(bt: Backtest) -> str:
    """The page for one backtest."""
    j = bt.to_json()
    inc, cmds, costs = j["incidents"], j["commands"], j["costs"]
    b, c = costs["baseline"], costs["candidate"]
    base = "what was decided live" if bt.against == "live" else f"the current policy ({bt.labels.get('baseline')})"
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>faultline backtest</title><style>{_CSS}</style>"
           f"</head><body><h1>Backtest: {_e(bt.labels.get('candidate'))} against {_e(base)}</h1>",
           f"<p>{_e(bt.source.describe)}; {_e(_window(j['window']))}; {j['events']:,} events judged in "
           f"{j['timing']['total_s']:.1f} s.</p>"]
    if j["retention"]:
        out.append(f"<p>{_e(j['retention']['note'])}</p>")
    out.append("<h2>Summary</h2>" + _table([
        ["incidents", inc["baseline"], inc["candidate"]], ["commands", cmds["baseline"], cmds["candidate"]],
        ["approvals asked", b["approvals_asked"], c["approvals_asked"]],
        ["lost GPU-hours", b["lost_gpu_hours"], c["lost_gpu_hours"]],
        ["GPUs fenced", b["gpus_fenced"], c["gpus_fenced"]], ["nodes fenced", b["nodes_fenced"], c["nodes_fenced"]],
        ["lemon fences", b["lemon_fences"], c["lemon_fences"]],
        *[[f"{t} commands", b["commands"].get(t, 0), c["commands"].get(t, 0)]
          for t in sorted(set(b["commands"]) | set(c["commands"]))]], ["", "baseline", "candidate"]))
    for key, title in (("by_category", "By category"), ("by_xid", "By XID")):
        rows = [[r["name"], *(r[s][f] for f in ("incidents", "lost_gpu_hours", "gpus_fenced", "nodes_fenced")
                              for s in ("baseline", "candidate"))] for r in costs[key] if r["baseline"] != r["candidate"]]
        if rows:
            out.append(f"<h2>{title} (rows that differ)</h2>" + _table(rows, [
                "", "incidents (base)", "incidents (cand)", "lost GPU-h (base)", "lost GPU-h (cand)",
                "GPUs fenced (base)", "GPUs fenced (cand)", "nodes fenced (base)", "nodes fenced (cand)"]))
    pairs = [(p["baseline"], p["candidate"], "re-categorised") for p in inc["recategorised"]]
    pairs += [(p["baseline"], p["candidate"], "re-blamed") for p in inc["reblamed"]
              if p["baseline"]["category"] == p["candidate"]["category"]]
    pairs += [(i, None, "removed") for i in inc["removed"]] + [(None, i, "added") for i in inc["added"]]
    pairs.sort(key=lambda p: (p[0] or p[1] or {}).get("opened_at", ""))
    out.append(f"<h2>Incidents that differ ({len(pairs)})</h2>")
    if not pairs:
        out.append('<p class="none">none</p>')
    for bi, ci, what in pairs:
        out.append(f"<div><b>{_e(what)}</b> job {_e((bi or ci or {}).get('job'))}</div><div class='pair'>"
                   f"{_card(bi, bt.baseline, 'b', 'baseline')}{_card(ci, bt.candidate, 'c', 'candidate')}</div>")
    rows = [[ch["candidate"]["type"], human_time(ch["candidate"]["issued_at"], ms=True),
             " ".join(str(v) for v in (ch["candidate"].get("target") or {}).values() if v),
             f"{ch['baseline']['requires_approval']} -> {ch['candidate']['requires_approval']}",
             str(ch["baseline"].get("params", "")), str(ch["candidate"].get("params", ""))] for ch in cmds["changed"]]
    rows += [[x["type"], human_time(x["issued_at"], ms=True),
              " ".join(str(v) for v in (x.get("target") or {}).values() if v), f"{what} (approval {x['requires_approval']})",
              "", ""] for what, key in (("removed", "removed"), ("added", "added")) for x in cmds[key]]
    out.append(f"<h2>Commands that differ ({len(rows)})</h2>" + (_table(rows, [
        "type", "issued", "target", "approval / change", "baseline params", "candidate params"]) if rows
        else '<p class="none">none</p>'))
    out.append("</body></html>")
    return "\n".join(out)
