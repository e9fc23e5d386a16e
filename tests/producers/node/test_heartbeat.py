"""The node agent heartbeat."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from producers.capture import parse_capture_line
from producers.node import heartbeat
from producers.registry import SourceContext
from streams.events import AgentHeartbeat


def test_heartbeat_is_a_node_agent_alive_line(tmp_path: Path) -> None:
    source = heartbeat.create(SourceContext(node="n17", state_dir=tmp_path), {})
    assert source.interval_s == 15
    [obs] = source.poll(datetime(2026, 4, 22, 3, 0, tzinfo=UTC))
    assert obs == {"ts": "2026-04-22T03:00:00.000+00:00", "source": "node_agent", "node": "n17", "alive": True}
    [event] = parse_capture_line(json.dumps(obs))
    assert isinstance(event.body, AgentHeartbeat) and event.node == "n17"
    assert heartbeat.create(SourceContext(node="n17", state_dir=tmp_path), {"interval_s": 2}).interval_s == 2
