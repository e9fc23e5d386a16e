"""Bad input mixed into a good capture, and the pace of the producer with and without it.

:func:`mixed_capture` interleaves a capture's good lines with every kind of bad
line the producer refuses (``producers.capture.BAD_KINDS``): not JSON, invalid
UTF-8, missing fields, wrong types, unknown sources, absurd timestamps (years
1970 and 9999, numbers, NaN, a BMC clock reset to 2000-01-01, years or days
away from the capture), one 10 MB line and a flood of duplicates. It says which
line is bad and why, so ``tests/faultline/test_bad_input.py`` can check each
dead letter and that the decisions are those of the good lines alone.

``python -m faultline.bench.bad_input [CAPTURE] [--broker]`` measures the producer's pace
(lines per second through reading, screening and parsing; with ``--broker``,
``faultline replay`` end to end) on the good lines alone and on the mixed
capture, and prints one JSON object.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from producers.capture import BadKind, parse_capture_line
from producers.capture.reader import read_capture_lines
from producers.capture.screen import CaptureScreen, Refused

__all__ = ["MixedCapture", "mixed_capture", "parse_pace", "screen_pace"]

#: The size of the one huge line: ten times the Kafka record limit.
HUGE_LINE_BYTES = 10 * 1024 * 1024


@dataclass
class MixedCapture:
    """The mixed capture's lines, and for each bad line (1-based number) the kind it must be refused as."""

    lines: list[bytes] = field(default_factory=list)
    bad: dict[int, BadKind] = field(default_factory=dict)
    good: list[bytes] = field(default_factory=list)

    def add(self, line: bytes, kind: BadKind | None = None) -> None:
        self.lines.append(line)
        if kind is None:
            self.good.append(line)
        else:
            self.bad[len(self.lines)] = kind

    def write(self, path: Path) -> Path:
        with path.open("wb") as f:
            for line in self.lines:
                f.write(line + b"\n")
        return path

    def kinds(self) -> Counter[str]:
        return Counter(self.bad.values())


def _with(obj: dict[str, Any], **fields: Any) -> bytes:
    return json.dumps({**obj, **fields}).encode()


def _without(obj: dict[str, Any], key: str) -> bytes:
    return json.dumps({k: v for k, v in obj.items() if k != key}).encode()


def _iso(ts: datetime) -> str:
    return ts.isoformat().replace("+00:00", "Z")


def _bad_lines(sample: dict[str, Any], clock: datetime) -> list[tuple[bytes, BadKind]]:
    """One of each bad kind (but duplicates and outliers, placed apart), from a good ``sample`` line."""
    hb = {"ts": sample["ts"], "source": "node_agent", "node": "n-bad", "alive": True}
    return [
        (b"this is not json", "not_json"),
        (b'{"ts": "2026-04-22T03:00:00Z", "source": "kernel", ', "not_json"),
        (b"[1, 2, 3]", "not_json"),
        (b"", "not_json"),
        (b'"just a string"', "not_json"),
        (b"\xff\xfe\x00 broken utf-8", "invalid_utf8"),
        (b'{"ts": "2026-04-22T03:00:00Z", "source": "kernel", "node": "n\xc3\x28", "line": "x"}', "invalid_utf8"),
        (_with(hb, node="n\ud800"), "invalid_utf8"),
        (_without(hb, "ts"), "missing_field"),
        (_without(hb, "source"), "missing_field"),
        (_without(hb, "alive"), "missing_field"),
        (_with(hb, source="kernel"), "missing_field"),  # a kernel line without its 'line'
        (_with(hb, source="nvml", gpu={"index": 0}), "missing_field"),
        (_with(hb, node=5), "wrong_type"),
        (_with(hb, rank="3"), "wrong_type"),
        (_with(hb, alive="yes"), "wrong_type"),
        (_with(hb, source="torchelastic", job="j", exitcode="-6"), "wrong_type"),
        (_with(hb, source="nvml", gpu={"index": 0}, metrics={"temperature_c": "hot"}), "wrong_type"),
        (_with(hb, source="toaster"), "unknown_source"),
        (_with(hb, source=7), "unknown_source"),
        (_with(hb, source=""), "unknown_source"),
        (_with(hb, ts="1970-01-01T00:00:00Z"), "bad_timestamp"),
        (_with(hb, ts="9999-12-31T23:59:59Z"), "bad_timestamp"),
        (_with(hb, ts=-1), "bad_timestamp"),
        (_with(hb, ts=1776828201), "bad_timestamp"),
        (_with(hb, ts=float("nan")), "bad_timestamp"),  # json writes NaN
        (_with(hb, ts="NaN"), "bad_timestamp"),
        (_with(hb, ts="yesterday"), "bad_timestamp"),
        (_with(hb, ts="2026-04-22T03:00:00"), "bad_timestamp"),
        (_with(hb, ts=_iso(clock + timedelta(days=365 * 73))), "clock_outlier"),  # year 2099
        (_with(hb, ts=_iso(clock + timedelta(days=3))), "clock_outlier"),
        (_with(hb, ts=_iso(clock - timedelta(days=2))), "clock_outlier"),
        (_with(hb, ts=_iso(clock + timedelta(hours=5))), "clock_outlier"),
        (_with(hb, source="scheduler", event="job_exploded", job="j"), "invalid_value"),
        (_with(hb, source="bmc", power="maybe"), "invalid_value"),
    ]


def mixed_capture(good: list[bytes], duplicates: int = 3000, seed: int = 6) -> MixedCapture:
    """``good`` with every kind of bad line spread through it, one 10 MB line and ``duplicates`` copies.

    Copies always come after their original (so the original is the line that counts): half of them
    as one burst of a single line, the rest scattered copies of random good lines (the same event
    ids again) and of a bad line. A BMC with its clock reset sends a run of 8 lines at 2000-01-01.
    """
    rng = random.Random(seed)
    out = MixedCapture()
    step = max(1, len(good) // 40)
    burst_at, huge_at, reset_at = len(good) // 3, len(good) // 2, (2 * len(good)) // 3
    scattered = duplicates - duplicates // 2
    copy_at = sorted(rng.randrange(1, len(good)) for _ in range(scattered))
    pending_bad: list[tuple[bytes, BadKind]] = []
    for i, line in enumerate(good):
        out.add(line)
        obj = json.loads(line)
        clock = datetime.fromisoformat(obj["ts"].replace("Z", "+00:00"))
        if i == 0:
            pending_bad = _bad_lines(obj, clock)
        if i % step == 0 and pending_bad:
            raw, kind = pending_bad.pop()
            out.add(raw, kind)
            if kind == "not_json" and raw:  # a copy of a bad line is a duplicate of it
                out.add(raw, "duplicate")
        if i == burst_at:
            for _ in range(duplicates // 2):
                out.add(line, "duplicate")
        if i == huge_at:
            pad = "x" * HUGE_LINE_BYTES
            out.add(_with(obj, source="kernel", node="n-huge", line=f"NVRM: Xid {pad}"), "too_long")
        if i == reset_at:
            for k in range(8):
                out.add(_with(obj, source="bmc", node="n-reset", power="on",
                              ts=_iso(datetime(2000, 1, 1, 0, 0, k, tzinfo=clock.tzinfo))), "clock_outlier")
        while copy_at and copy_at[0] == i:
            copy_at.pop(0)
            out.add(good[rng.randrange(0, i + 1)], "duplicate")
    for raw, kind in pending_bad:
        out.add(raw, kind)
    return out


def screen_pace(lines: list[bytes], repeats: int = 5) -> dict[str, float]:
    """Read, screen and parse ``lines`` as a file, in-process, ``repeats`` times (the best counts:
    a shared machine is noisy): lines per second, and good lines per second (the pace the good
    lines keep amid the bad ones)."""
    data = b"".join(line + b"\n" for line in lines)
    best, refused = float("inf"), 0
    for _ in range(repeats):
        start = time.perf_counter()
        refused = sum(isinstance(v, Refused) for v in CaptureScreen().screen(read_capture_lines(io.BytesIO(data))))
        best = min(best, time.perf_counter() - start)
    return {"lines": len(lines), "refused": refused, "seconds": round(best, 3),
            "lines_per_s": round(len(lines) / best), "good_lines_per_s": round((len(lines) - refused) / best)}


def parse_pace(lines: list[bytes], repeats: int = 5) -> dict[str, float]:
    """The bare per-line parser on good lines, best of ``repeats``: what the screen adds to."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for line in lines:
            parse_capture_line(line)
        best = min(best, time.perf_counter() - start)
    return {"lines": len(lines), "seconds": round(best, 3), "lines_per_s": round(len(lines) / best)}


def _replay_pace(capture: Path) -> dict[str, float]:
    from common.settings import Settings
    from faultline.pipeline import replay

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp), archive=f"chdb://{tmp}/archive")
        start = time.perf_counter()
        run = replay(capture, settings)
        seconds = time.perf_counter() - start
    return {"lines": run.lines, "bad": run.bad, "seconds": round(seconds, 2), "lines_per_s": round(run.lines / seconds)}


def main(argv: list[str] | None = None) -> int:
    here = Path(__file__).resolve().parents[2] / "shared" / "scenarios" / "xid79_multi_node.jsonl"
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("capture", nargs="?", type=Path, default=here, help="good capture (default: %(default)s)")
    parser.add_argument("--broker", action="store_true", help="also replay both through the broker (FAULTLINE_KAFKA)")
    args = parser.parse_args(argv)
    good = args.capture.read_bytes().splitlines()
    mixed = mixed_capture(good)
    small = [line for line in mixed.lines if len(line) < HUGE_LINE_BYTES]  # without the one huge line
    result: dict[str, Any] = {
        "capture": args.capture.name, "good_lines": len(good), "bad_lines": len(mixed.bad),
        "bad_by_kind": dict(sorted(mixed.kinds().items())),
        "parse_good": parse_pace(good), "screen_good": screen_pace(good), "screen_mixed": screen_pace(mixed.lines),
        "screen_mixed_without_huge_line": screen_pace(small),
    }
    if args.broker:
        with tempfile.TemporaryDirectory() as tmp:
            result["replay_good"] = _replay_pace(args.capture)
            result["replay_mixed"] = _replay_pace(mixed.write(Path(tmp) / "mixed.jsonl"))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
