"""A self-contained HTML page of one incident's story: a graphical timeline and the full list.

No scripts, no external assets: inline SVG and CSS, so the file can be attached to a ticket or
opened offline. One lane per kind of entry (signals, incident versions, commands, executors'
results); the entries are :mod:`faultline.story`'s, repeated signals already grouped
(``31 × NCCL watchdog timeout``).

The horizontal axis is **real time**, with the long quiet stretches compressed: an incident
packs a dozen entries into a second after ten minutes of nothing, and both must be readable.
A gap between consecutive entries longer than :data:`LONG_GAP` (and than a sixth of the story)
is drawn as a fixed-width break marked with its length (``9 min 30 s``); the remaining time is
spread linearly over the width, consecutive distinct times at least :data:`MIN_STEP` pixels
apart. Labels are the entries' full sentences, stacked in rows within their lane so none
overlaps another; a legend explains the lanes and marks, and an empty lane says why it is empty.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from faultline.story import gate_lines

__all__ = ["LONG_GAP", "MIN_STEP", "render_timeline", "time_axis"]

LANES = ("signal", "incident", "command", "result")
TITLES = {"signal": "signals", "incident": "incident", "command": "commands", "result": "results"}
COLORS = {"signal": "#d97706", "incident": "#7c3aed", "command": "#2563eb", "result": "#059669"}
EMPTY = {
    "result": "no executor results: no executor carried these commands out (a replay or a demo runs none; "
              "`faultline executor run` reports here)",
    "command": "no commands for this incident",
    "signal": "no signals in the archive around this incident",
    "incident": "no versions",
}
LONG_GAP = timedelta(minutes=2)
MIN_STEP = 8.0
W, LEFT, RIGHT, TOP = 1400, 110, 30, 64
ROW_H, LANE_PAD, BREAK_W = 18, 14, 46
CHAR_W = 6.1  # average advance of the 11 px label font, for laying labels out without measuring them


def _ts(v: Any) -> datetime:
    return v if isinstance(v, datetime) else datetime.fromisoformat(str(v).replace("Z", "+00:00"))


def _span(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        m, s = divmod(round(seconds), 60)
        return f"{m} min {s} s" if s else f"{m} min"
    return f"{seconds:.1f} s"


def time_axis(times: Sequence[datetime], width: float) -> tuple[dict[datetime, float], list[tuple[float, float]]]:
    """x of each distinct time over ``width`` pixels, and the compressed gaps as (x where it starts, seconds)."""
    distinct = sorted(set(times))
    if len(distinct) < 2:
        return {t: width / 2 for t in distinct}, []
    gaps = [(b - a).total_seconds() for a, b in zip(distinct, distinct[1:], strict=False)]
    total = sum(gaps)
    long = [g > LONG_GAP.total_seconds() and g > total / 6 for g in gaps]
    active = sum(g for g, is_long in zip(gaps, long, strict=True) if not is_long)
    room = width - BREAK_W * sum(long)
    steps: list[float] = []
    scale = room / active if active > 0 else 0.0
    for _ in range(3):  # the minimum step takes room from the rest: rescale until it fits
        steps = [BREAK_W if is_long else max(MIN_STEP, g * scale) for g, is_long in zip(gaps, long, strict=True)]
        over = sum(steps) - width
        if over <= 0.5 or scale == 0:
            break
        scale *= max(0.05, 1 - over / max(1.0, sum(s for s, is_long in zip(steps, long, strict=True)
                                                       if not is_long and s > MIN_STEP)))
    fit = min(1.0, width / sum(steps))
    xs, breaks, x = {distinct[0]: 0.0}, [], 0.0
    for t, step, g, is_long in zip(distinct[1:], steps, gaps, long, strict=True):
        if is_long:
            breaks.append((x, g))
        x += step * fit
        xs[t] = x
    return xs, breaks


def _label_rows(items: list[tuple[float, str]], left_edge: float,
                right_edge: float) -> list[tuple[int, float, str]]:
    """Per label (x of its mark, text): its row, the x its text starts at, and the text drawn.

    The rule: a label stays inside [left_edge, right_edge]. It starts at its mark when it fits there,
    else ends at its mark when that fits, else is slid along until it fits; a label longer than the
    whole width is cut with an ellipsis (the full sentence is the mark's tooltip and in the list)."""
    ends: list[float] = []  # per row, where the last label ends
    out = []
    room = right_edge - left_edge
    for x, text in items:
        if len(text) * CHAR_W + 10 > room:
            text = text[:max(1, int((room - 10) / CHAR_W) - 1)] + "…"
        width = len(text) * CHAR_W + 10
        if x + width <= right_edge:
            start = x + 4
        elif x - width >= left_edge:
            start = x - width + 6
        else:
            start = max(left_edge, right_edge - width) + 4
        row = next((i for i, e in enumerate(ends) if start - 4 > e + 4), len(ends))
        if row == len(ends):
            ends.append(start - 4 + width)
        else:
            ends[row] = start - 4 + width
        out.append((row, start, text))
    return out


def _entries(entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = [dict(e) for e in entries]
    for e in rows:
        e["entry_type"] = e["entry_type"] if e["entry_type"] in LANES else "signal"
        e.setdefault("text", str(e.get("what")))
        e.setdefault("count", 1)
    return sorted(rows, key=lambda e: (_ts(e["ts"]), LANES.index(e["entry_type"])))


def _label(e: Mapping[str, Any]) -> str:
    """The entry's sentence; a command or result says its type first; a group its size."""
    text = str(e["text"])
    if e["entry_type"] in ("command", "result") and not text.startswith(str(e["what"])):
        text = f"{e['what']}: {text}" if text else str(e["what"])
    return f"{e['count']} × {text}" if e.get("count", 1) > 1 else text


def render_timeline(incident: Mapping[str, Any], entries: Sequence[Mapping[str, Any]]) -> str:
    """The page for ``incident`` (a latest-incident row) and its story ``entries`` (:func:`faultline.story`'s
    JSON form: ts, entry_type, what, text, count, last_ts, nodes, ranks, detail)."""
    rows = _entries(entries)
    plot_w = W - LEFT - RIGHT
    xs, breaks = time_axis([_ts(e["ts"]) for e in rows] + [_ts(e["last_ts"]) for e in rows if e.get("last_ts")],
                           plot_w)
    labels: dict[int, tuple[int, float, str]] = {}
    lane_rows: dict[str, int] = {}
    for lane in LANES:
        mine = [(k, e) for k, e in enumerate(rows) if e["entry_type"] == lane]
        placed = _label_rows([(LEFT + xs[_ts(e["ts"])], _label(e)) for _, e in mine], 4, W - 4)
        labels.update({k: p for (k, _), p in zip(mine, placed, strict=True)})
        lane_rows[lane] = max([r for r, _, _ in placed], default=0) + 1
    lane_top, y = {}, TOP
    for lane in LANES:
        lane_top[lane] = y
        y += LANE_PAD * 2 + ROW_H * (lane_rows[lane] + 1)
    bottom = y
    height = bottom + 40
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}" '
           f'role="img" aria-label="incident timeline">']
    for n, (x, seconds) in enumerate(breaks):  # a compressed quiet stretch: a band across the lanes, its length
        bx = LEFT + x
        svg.append(f'<g class="break"><rect x="{bx + 8:.1f}" y="{TOP - 14}" width="{BREAK_W - 16}" '
                   f'height="{bottom - TOP + 14}" class="gap"/>'
                   f'<text x="{bx + BREAK_W / 2:.1f}" y="{TOP - 20 - 13 * (n % 2)}" class="gaplabel">'
                   f'{_span(seconds)} quiet</text></g>')
    for lane in LANES:
        top = lane_top[lane]
        axis_y = top + LANE_PAD + ROW_H / 2
        svg.append(f'<text x="10" y="{axis_y + 4}" class="lane">{TITLES[lane]}</text>'
                   f'<line x1="{LEFT}" y1="{axis_y}" x2="{W - RIGHT}" y2="{axis_y}" class="axis"/>')
        if not any(e["entry_type"] == lane for e in rows):
            svg.append(f'<text x="{LEFT + 10}" y="{axis_y + ROW_H + 4}" class="empty" id="empty-{lane}">'
                       f'{html.escape(EMPTY[lane])}</text>')
    ticks: list[float] = []
    for t, x in sorted(xs.items()):
        if all(abs(x - other) > 70 for other in ticks):
            ticks.append(x)
            svg.append(f'<line x1="{LEFT + x:.1f}" y1="{TOP - 6}" x2="{LEFT + x:.1f}" y2="{bottom}" class="grid"/>'
                       f'<text x="{LEFT + x:.1f}" y="{bottom + 16}" class="tick">{t:%H:%M:%S}</text>')
    for k, e in enumerate(rows):
        lane = e["entry_type"]
        x = LEFT + xs[_ts(e["ts"])]
        axis_y = lane_top[lane] + LANE_PAD + ROW_H / 2
        row, start, shown = labels[k]
        ly = axis_y + ROW_H * (row + 1) + 4
        when = _ts(e["ts"]).strftime("%H:%M:%S.%f")[:-3]
        label = html.escape(_label(e))
        span = ""
        if e.get("last_ts") and _ts(e["last_ts"]) > _ts(e["ts"]):
            x2 = LEFT + xs[_ts(e["last_ts"])]
            span = f'<line x1="{x:.1f}" y1="{axis_y}" x2="{x2:.1f}" y2="{axis_y}" class="span" stroke="{COLORS[lane]}"/>'
        svg.append(
            f'<g class="mark" id="mark-{k}" data-lane="{lane}" data-what="{html.escape(str(e["what"]))}" '
            f'data-count="{e.get("count", 1)}"><title>{when} {TITLES[lane]}: {label}</title>{span}'
            f'<circle cx="{x:.1f}" cy="{axis_y}" r="{7 if e.get("count", 1) > 1 else 5}" fill="{COLORS[lane]}"/>'
            f'<line x1="{x:.1f}" y1="{axis_y}" x2="{x:.1f}" y2="{ly - 9}" class="leader"/>'
            f'<text x="{start:.1f}" y="{ly}" class="label{" left" if start < x else ""}">{html.escape(shown)}</text></g>')
    svg.append("</svg>")
    legend = "".join(f'<span class="key"><span class="dot" style="background:{COLORS[lane]}"></span>{TITLES[lane]}</span>'
                     for lane in LANES)
    legend += ('<span class="key"><span class="gapkey"></span>a quiet stretch, compressed (its length above it)</span>'
               '<span class="key"><b>N ×</b> the same signal N times within a minute (ranks and nodes in the list)</span>')
    table = "".join(
        f'<tr class="{e["entry_type"]}"><td class="when">{_ts(e["ts"]).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]}</td>'
        f'<td>{TITLES[e["entry_type"]]}</td><td>{html.escape(str(e["what"]))}</td>'
        f'<td>{html.escape(_label(e))}</td><td>{html.escape(_origin(e))}</td>'
        f'<td class="detail">{_raw(e)}</td></tr>'
        for e in rows)
    culprit = f'{incident.get("culprit_node") or "-"} {", ".join(incident.get("culprit_gpus") or [])}'
    head = (f'{html.escape(str(incident.get("category")))} · job {html.escape(str(incident.get("job") or "-"))} · '
            f'culprit {html.escape(culprit)} · {html.escape(str(incident.get("severity")))} · '
            f'state {html.escape(str(incident.get("state")))}')
    lost = incident.get("lost_gpu_hours")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>faultline incident {html.escape(str(incident.get("id")))}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 24px; color: #111; }}
h1 {{ font-size: 20px; margin: 0 0 4px; }} .sub {{ color: #444; margin-bottom: 8px; }}
.legend {{ font-size: 13px; color: #333; margin: 6px 0 10px; }} .key {{ margin-right: 18px; white-space: nowrap; }}
.dot {{ display: inline-block; width: 10px; height: 10px; border-radius: 5px; margin-right: 5px; }}
.gapkey {{ display: inline-block; width: 14px; height: 10px; margin-right: 5px; background: repeating-linear-gradient(
  135deg, #e5e7eb, #e5e7eb 3px, #fff 3px, #fff 6px); border: 1px solid #cbd5e1; }}
.lane {{ font-size: 13px; font-weight: 600; fill: #333; }} .axis {{ stroke: #bbb; stroke-width: 2; }}
.grid {{ stroke: #f1f1f1; }} .tick {{ font-size: 11px; fill: #555; text-anchor: middle; }}
.gap {{ fill: #f3f4f6; stroke: #cbd5e1; stroke-dasharray: 4 3; }}
.gaplabel {{ font-size: 11px; fill: #475569; text-anchor: middle; font-style: italic; }}
.label {{ font-size: 11px; fill: #222; }}
.leader {{ stroke: #d4d4d4; }} .span {{ stroke-width: 5; stroke-opacity: 0.45; }}
.empty {{ font-size: 12px; fill: #777; font-style: italic; }}
table {{ border-collapse: collapse; width: 100%; font-size: 13px; margin-top: 16px; }}
td {{ border-bottom: 1px solid #eee; padding: 4px 8px; vertical-align: top; }} td.when {{ white-space: nowrap; }}
td.detail {{ font-family: ui-monospace, monospace; font-size: 11px; color: #555; word-break: break-all; }}
tr.signal td:nth-child(2) {{ color: {COLORS["signal"]}; }} tr.incident td:nth-child(2) {{ color: {COLORS["incident"]}; }}
tr.command td:nth-child(2) {{ color: {COLORS["command"]}; }} tr.result td:nth-child(2) {{ color: {COLORS["result"]}; }}
</style></head><body>
<h1>Incident {html.escape(str(incident.get("id")))}</h1>
<div class="sub">{head}{f" · lost {lost:.2f} GPU-hours" if isinstance(lost, int | float) else ""}<br>
{html.escape(str(incident.get("summary") or ""))}{"".join(f'<br><span class="gate">{html.escape(x)}</span>'
                                                      for x in gate_lines(incident))}</div>
<div class="legend">{legend}</div>
{"".join(svg)}
<table id="entries"><thead><tr><td>time (UTC)</td><td>lane</td><td>what</td><td>entry</td><td>from</td>
<td>recorded as</td></tr></thead>
<tbody>{table}</tbody></table>
<p class="sub">{len(rows)} entries · times UTC · generated by faultline</p>
</body></html>
"""


def _origin(e: Mapping[str, Any]) -> str:
    ranks, nodes = list(e.get("ranks") or []), list(e.get("nodes") or [])
    parts = []
    if ranks:
        from faultline.story import Entry

        parts.append(Entry(_ts(e["ts"]), "signal", "", "", ranks=tuple(ranks)).origin)
    if nodes:
        parts.append(("on " if parts else "") + ", ".join(nodes))
    return " ".join(parts)


def _raw(e: Mapping[str, Any]) -> str:
    raw = str(e.get("detail") or "")
    if not raw or raw == e.get("text"):
        return ""
    first = " (the first of them)" if e.get("count", 1) > 1 else ""
    return f"<details><summary>raw{first}</summary>{html.escape(raw)}</details>"
