"""The capture screen: one verdict per line, in order; each bad kind refused with its reason; good lines kept."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import pytest

from correlators.engine import Correlator
from correlators.policy import load_policy
from faultline.bench.bad_input import HUGE_LINE_BYTES, mixed_capture
from faultline.outcome import decide_offline
from producers.capture import BAD_KINDS, MAX_LINE_BYTES, BadInput, parse_capture_line
from producers.capture.reader import OversizedLine, read_capture_lines
from producers.capture.screen import (
    DUPLICATE_RAW_BYTES,
    RAW_KEPT_BYTES,
    Accepted,
    CaptureScreen,
    Refused,
    Verdict,
)
from tests.harness.shared import needs_shared, scenario

SCENARIO = scenario("xid79_multi_node")
needs_scenario = needs_shared(SCENARIO)


def hb(second: int, node: str = "n1") -> bytes:
    return json.dumps({"ts": f"2026-04-22T03:00:{second:02d}Z", "source": "node_agent", "node": node,
                       "alive": True}).encode()


def screen(lines: list[bytes | str | OversizedLine], **kw: int) -> list[Verdict]:
    verdicts = list(CaptureScreen(**kw).screen(lines))
    assert [v.line for v in verdicts] == list(range(1, len(lines) + 1))  # one each, in order
    return verdicts


def kinds(verdicts: list[Verdict]) -> list[str | None]:
    return [v.error.kind if isinstance(v, Refused) else None for v in verdicts]


def test_good_lines_are_accepted_with_their_events() -> None:
    lines = [hb(s) for s in range(5)]
    verdicts = screen(lines)
    assert all(isinstance(v, Accepted) for v in verdicts)
    assert [v.events for v in verdicts if isinstance(v, Accepted)] == [parse_capture_line(x) for x in lines]


def test_a_line_that_says_nothing_is_accepted_without_events() -> None:
    quiet = json.dumps({"ts": "2026-04-22T03:00:00Z", "source": "node_agent", "node": "n", "alive": False})
    assert screen([quiet.encode()]) == [Accepted(1, [])]


def test_bad_lines_keep_their_parse_reason_and_kind() -> None:
    lines = [hb(0), b"not json", b'{"source": "node_agent", "node": "n", "alive": true}', hb(1)]
    verdicts = screen(lines)
    assert kinds(verdicts) == [None, "not_json", "missing_field", None]
    refused = verdicts[2]
    assert isinstance(refused, Refused) and refused.error.reason == "missing 'ts'"


def test_a_flood_of_copies_is_refused_each_naming_the_first() -> None:
    lines = [hb(0), hb(1)] + [hb(1)] * 5000 + [hb(2)]
    verdicts = screen(lines)
    assert kinds(verdicts) == [None, None] + ["duplicate"] * 5000 + [None]
    for v in verdicts[2:-1]:
        assert isinstance(v, Refused) and v.error.reason.startswith("duplicate of line 2 ")
        assert len(v.raw) <= DUPLICATE_RAW_BYTES


def test_line_endings_do_not_hide_a_copy_and_blank_lines_are_not_copies() -> None:
    verdicts = screen([hb(0) + b"\n", hb(0) + b"\r\n", hb(0).decode(), b"", b"\n", b"  "])
    assert kinds(verdicts) == [None, "duplicate", "duplicate", "not_json", "not_json", "not_json"]


def test_copies_further_apart_than_the_window_are_left_to_the_correlator() -> None:
    verdicts = screen([hb(0), hb(1), hb(2), hb(0)], dedupe_window=2)
    assert kinds(verdicts) == [None, None, None, None]  # the same event id: the correlator ignores it


def test_a_copy_of_a_bad_line_is_a_duplicate() -> None:
    assert kinds(screen([b"junk", b"junk"])) == ["not_json", "duplicate"]


def test_too_long_lines_are_refused_unread_with_their_size() -> None:
    big = b'{"ts": "2026-04-22T03:00:00Z", "source": "kernel", "node": "n", "line": "' + b"x" * HUGE_LINE_BYTES + b'"}'
    read = list(read_capture_lines(io.BytesIO(hb(0) + b"\n" + big + b"\n" + hb(1) + b"\n")))
    for lines in (read, [hb(0), big, hb(1)]):  # from the reader, or handed in whole
        verdicts = screen(lines)
        assert kinds(verdicts) == [None, "too_long", None]
        refused = verdicts[1]
        assert isinstance(refused, Refused) and f"line of {len(big):,} bytes" in refused.error.reason
        assert len(refused.raw) <= RAW_KEPT_BYTES


def test_a_line_of_exactly_the_limit_is_parsed() -> None:
    head = b'{"ts": "2026-04-22T03:00:00Z", "source": "kernel", "node": "n", "line": "'
    exact = head + b"x" * (MAX_LINE_BYTES - len(head) - 2) + b'"}'
    assert len(exact) == MAX_LINE_BYTES
    assert kinds(screen([exact, exact[:-2] + b'x"}'])) == [None, "too_long"]
    with pytest.raises(BadInput) as info:
        parse_capture_line((exact[:-2] + b'x"}').decode())
    assert info.value.kind == "too_long"


def test_a_time_far_from_its_neighbours_is_refused_and_the_rest_kept() -> None:
    lines = [hb(s % 60, f"n{s}") for s in range(40)]
    lines.insert(20, json.dumps({"ts": "2099-01-01T00:00:00Z", "source": "node_agent", "node": "x",
                                 "alive": True}).encode())
    verdicts = screen(lines)
    assert kinds(verdicts) == [None] * 20 + ["clock_outlier"] + [None] * 20
    refused = verdicts[20]
    assert isinstance(refused, Refused) and "ahead of the capture's clock" in refused.error.reason


def test_the_dead_letter_names_the_line_and_keeps_the_start_of_it() -> None:
    (v,) = screen([b"not json at all"])
    assert isinstance(v, Refused)
    at = datetime(2026, 11, 29, tzinfo=UTC)
    dl = v.dead_letter("producer", at)
    assert (dl.stage, dl.raw, dl.at) == ("producer", "not json at all", at)
    assert dl.reason.startswith("line 1: not JSON")


@needs_scenario
def test_every_bad_kind_mixed_into_a_real_capture_is_refused_as_that_kind_and_only_the_good_lines_count() -> None:
    good = SCENARIO.read_bytes().splitlines()
    mixed = mixed_capture(good)
    assert set(mixed.kinds()) == set(BAD_KINDS)  # every kind is exercised
    verdicts = screen(list(read_capture_lines(io.BytesIO(b"".join(x + b"\n" for x in mixed.lines)))))
    assert {v.line: v.error.kind for v in verdicts if isinstance(v, Refused)} == mixed.bad
    accepted = [mixed.lines[v.line - 1] for v in verdicts if isinstance(v, Accepted)]
    assert accepted == good
    # Not a vacuous check: fed to the correlator unscreened (each line parsed alone), the same
    # lines decide otherwise. (decide_offline screens, as replay does.)
    unscreened = [x for x in mixed.lines if len(x) <= MAX_LINE_BYTES]
    assert _decide_unscreened(unscreened) != _decide_unscreened(good)
    assert decide_offline(mixed.lines) == decide_offline(good)  # screened, they decide as the good alone


def _decide_unscreened(lines: list[bytes]) -> list[tuple[str, str]]:
    """The correlator's decisions (kind, id) on lines parsed one by one, no screen around them."""
    engine = Correlator(load_policy(None))
    out: list[tuple[str, str]] = []
    for raw in lines:
        try:
            events = parse_capture_line(raw)
        except BadInput:
            continue
        for e in events:
            out += [(type(d).__name__, d.id) for d in engine.process(e)]
    return out
