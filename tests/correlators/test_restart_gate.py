"""The restart gate seen from outside: the incident says what it waits for and until when, no restart goes
out while it waits, a word from the awaited hardware wakes it, and the restart says what it left out."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from scenario_book import SCENARIOS

from correlators.gate_round import Wait
from correlators.restart_gate import waiting_text
from faultline.outcome import decide_offline
from streams.decisions import Command, Incident

T = datetime(2026, 4, 22, 1, 21, 13, tzinfo=UTC)


def _versions(name: str) -> tuple[list[Incident | Command], Any]:
    cap, _ = SCENARIOS[name]()
    decided: list[Incident | Command] = []
    decide_offline(cap.lines(), on_decisions=decided.extend)
    return decided, cap


def _ts(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def test_the_incident_says_what_the_gate_waits_for_and_nothing_restarts_meanwhile() -> None:
    decided, _ = _versions("gate_waits_for_a_slow_agent")  # nothing but n2's silence can judge it
    waiting = [d for d in decided if isinstance(d, Incident) and d.gate is not None and d.gate.state == "waiting"]
    assert waiting, "no version of the incident showed the gate waiting"
    text = waiting[0].summary
    assert re.search(r"waiting for a verdict on n2: [a-z ]+ due by \d\d:\d\d:\d\dZ", text), text
    assert {w.node for w in waiting[0].gate.waiting} >= {"n2"} and all(w.due > waiting[0].updated_at for w in
                                                                         waiting[0].gate.waiting if w.node == "n2")
    first_restart = next(k for k, d in enumerate(decided) if isinstance(d, Command) and d.type == "restart_job")
    last_wait = max(k for k, d in enumerate(decided) if isinstance(d, Incident) and d.gate is not None
                    and d.gate.state == "waiting")
    assert last_wait < first_restart  # the gate had passed before the restart went out
    final = [d for d in decided if isinstance(d, Incident)][-1]
    assert final.gate is not None and final.gate.state == "passed" and "waiting for" not in final.summary


def test_a_word_from_the_awaited_hardware_wakes_the_gate() -> None:
    """The restart goes out on the BMC poll it waited for, not at the next settle or the bound."""
    decided, cap = _versions("gate_waits_for_every_bmc_poll")
    restart = next(d for d in decided if isinstance(d, Command) and d.type == "restart_job")
    polls = [json.loads(line) for line in cap.lines() if '"source":"bmc"' in line]
    fault = datetime(2026, 4, 22, 3, 15, 13, tzinfo=UTC)
    last_awaited = max(min(_ts(p["ts"]) for p in polls if p["node"] == n and _ts(p["ts"]) > fault) for n in ("n1", "n2"))
    assert restart.issued_at == last_awaited


def test_the_restart_says_what_it_left_out_and_why() -> None:
    decided, _ = _versions("gate_suspect_node_not_ready_is_left_out")
    restart = next(d for d in decided if isinstance(d, Command) and d.type == "restart_job")
    [left] = restart.params["gate"]["excluded"]
    assert (left["node"], left["gpu"], left["verdict"]) == ("n2", None, "suspect") and "not ready" in left["why"]
    assert "leaving out n2 (the scheduler says it is not ready" in restart.reason
    final = [d for d in decided if isinstance(d, Incident)][-1]
    assert final.gate is not None and [x.node for x in final.gate.excluded] == ["n2"]


def test_the_waiting_text_names_each_piece_once_with_its_latest_due() -> None:
    waits = [Wait("n05", None, "heartbeat", T), Wait("n05", None, "heartbeat", T - timedelta(seconds=5)),
             Wait("n03", 2, "NVML sample", T + timedelta(seconds=9)), Wait("n05", None, "BMC poll", T)]
    assert waiting_text(waits) == ("waiting for a verdict on n05: heartbeat due by 01:21:13Z, BMC poll due by "
                                   "01:21:13Z; n03 GPU 2: NVML sample due by 01:21:22Z")
    kernel = [Wait("n05", None, "late kernel lines", T), Wait("n03", None, "late kernel lines", T)]
    assert waiting_text(kernel) == "waiting for late kernel lines until 01:21:13Z"
    assert waiting_text(kernel + waits[:1]).endswith("n05: heartbeat due by 01:21:13Z; late kernel lines until 01:21:13Z")
    many = [Wait(f"n{k}", None, "heartbeat", T) for k in range(7)]
    assert waiting_text(many).endswith("; and 3 more") and waiting_text([]) == ""
