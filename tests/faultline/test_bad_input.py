"""Bad input through the real pipeline: each bad line one dead letter with its reason and a metric,
the good lines around them decided exactly as if the bad ones had never been there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from common.kafka_admin import delete_namespace_topics
from common.kafka_reader import read_topic
from common.settings import Settings
from faultline.bench.bad_input import mixed_capture
from faultline.outcome import decide_offline
from faultline.pipeline import replay
from producers.capture import BAD_KINDS, parse_capture_line
from sinks.archive.store import Archive
from streams.decisions import DeadLetter
from streams.topics import topic_name
from tests.harness.shared import needs_shared, scenario

SCENARIO = scenario("xid79_multi_node")

pytestmark = [pytest.mark.broker,
              needs_shared(SCENARIO)]

# What the reason of each kind says (the dead letter carries the reason, the metric the kind).
REASONS = {
    "too_long": "bytes is longer than the",
    "duplicate": "duplicate of line",
    "not_json": r"not JSON|not a JSON object|empty line",
    "invalid_utf8": "invalid UTF-8",
    "missing_field": r"missing '|needs |Field required",
    "wrong_type": r"must be|Input should be",
    "unknown_source": "unknown source",
    "bad_timestamp": r"^(field 'ts'|ts )",
    "clock_outlier": "the capture's clock",
    "invalid_value": r"unknown event|must be 'on' or 'off'",
}
MAX_DEAD_LETTER_BYTES = 16_384


def _count(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_every_kind_of_bad_line_is_one_dead_letter_and_the_good_lines_decide_as_alone(
        kafka_bootstrap: str, tmp_path: Path, unique_name: str) -> None:
    good = SCENARIO.read_bytes().splitlines()
    mixed = mixed_capture(good, duplicates=3000)
    assert set(mixed.kinds()) == set(BAD_KINDS) and len(mixed.bad) > 3000
    capture = mixed.write(tmp_path / "mixed.jsonl")
    settings = Settings(kafka=kafka_bootstrap, data_dir=tmp_path, namespace=unique_name,
                        archive=f"chdb://{tmp_path}/archive")
    before = {k: _count("faultline_capture_bad_lines_total", {"kind": k}) for k in BAD_KINDS}
    dead_before = _count("faultline_dead_letters_total", {"stage": "producer"})

    run = replay(capture, settings, keep_topics=True)
    conf = settings.kafka_config(kafka_bootstrap)
    try:
        letters = [(raw, DeadLetter.model_validate_json(raw))
                   for raw in read_topic(conf, topic_name(run.namespace, "deadletters"))]
    finally:
        delete_namespace_topics(conf, run.namespace)

    # Counted: every line, every bad one, the events of the good ones only.
    assert (run.lines, run.bad) == (len(mixed.lines), len(mixed.bad))
    assert run.events == sum(len(parse_capture_line(line)) for line in good)

    # One dead letter per bad line, with a reason of the right kind; none for a good line; all small.
    by_line: dict[int, DeadLetter] = {}
    for raw, dl in letters:
        m = re.match(r"line (\d+): (.*)", dl.reason, re.S)
        assert dl.stage == "producer" and m, dl.reason
        line = int(m.group(1))
        assert line not in by_line, f"two dead letters for line {line}"
        by_line[line] = dl
        assert line in mixed.bad, f"good line {line} dead-lettered: {dl.reason}"
        assert re.search(REASONS[mixed.bad[line]], m.group(2)), (mixed.bad[line], dl.reason)
        assert len(raw) <= MAX_DEAD_LETTER_BYTES
    assert set(by_line) == set(mixed.bad)

    # Metrics: each kind counted, every one a producer dead letter.
    for kind, n in mixed.kinds().items():
        assert _count("faultline_capture_bad_lines_total", {"kind": kind}) - before[kind] == n, kind
    assert _count("faultline_dead_letters_total", {"stage": "producer"}) - dead_before == len(mixed.bad)

    # Decisions: those of the good lines alone (same ids, same states, same commands in order).
    want, got = decide_offline(good), run.contract()
    assert [(i["id"], i["category"], i["state"]) for i in got["incidents"]] == \
           [(i["id"], i["category"], i["state"]) for i in want["incidents"]]
    assert [c["id"] for c in got["commands"]] == [c["id"] for c in want["commands"]]
    assert [i["category"] for i in got["incidents"]] == ["gpu_off_bus"]

    with Archive.open(settings.archive_url, run.archive_namespace) as archive:  # the replay's own namespace
        assert archive.count("deadletters") == len(mixed.bad)
