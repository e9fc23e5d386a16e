"""trainer_file: the reporter's file followed by the agent, lines passed on unchanged."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path

from producers.capture import parse_capture_line
from producers.jobs.reporter import Reporter
from producers.jobs.trainer_file import create, parse_trainer_line
from producers.registry import SourceContext
from streams.events import TrainStep

NOW = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)


def test_reporter_lines_reach_the_agent_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "trainer.jsonl"
    source = create(SourceContext(node="n07", state_dir=tmp_path / "state"), {"path": str(path)})
    assert source.poll(NOW) == []
    with Reporter("llama", 1, node="n07", path=path) as rep:
        rep.step(1, 2.0, 10.0)
        rep.step(2, float("nan"), 10.0)
    with path.open("a") as fh:
        fh.write('not json\n{"source": "kernel", "ts": "2026-04-22T03:00:00Z"}\n')
    obs = source.poll(NOW)
    assert [o["step"] for o in obs] == [1, 2]
    assert math.isnan(obs[1]["loss"])
    body = parse_capture_line(json.dumps(obs[1]))[0].body  # the agent's json.dumps writes NaN back
    assert isinstance(body, TrainStep) and body.loss is not None and math.isnan(body.loss)
    assert source.poll(NOW) == []
    source.close()


def test_only_trainer_observations_pass() -> None:
    assert parse_trainer_line("") is None
    assert parse_trainer_line("[1, 2]") is None
    assert parse_trainer_line('{"source": "trainer"}') is None  # no ts
    line = '{"ts": "2026-04-22T03:00:00Z", "source": "trainer", "job": "j", "event": "heartbeat"}'
    assert parse_trainer_line(line) == json.loads(line)
