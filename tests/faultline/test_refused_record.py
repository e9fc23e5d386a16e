"""A record the broker refuses never stops the correlator (issue #24).

The ``commands`` topic of a namespace is given a ``max.message.bytes`` below the size of the scenario's
largest command and above every minimal record: the broker refuses that command for good
(``MESSAGE_TOO_LARGE``). The worker replaces it by its minimal record (same id), dead-letters the refusal
and goes on; a successor that takes over judges the capture to its end too, and every command id of
the offline run is on the topic (whole, or as its minimal record).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from common.kafka_admin import create_namespace_topics, delete_namespace_topics
from common.kafka_reader import read_topic
from common.settings import Settings
from correlators.bounded import minimal
from faultline.outcome import decide_offline
from faultline.pipeline import CorrelatorWorker, publish_capture
from producers.delivery import EventPublisher
from streams.decisions import Command, DeadLetter
from tests.faultline.takeover import finish_with_successor, sigkill
from tests.harness.shared import needs_shared, scenario

SCENARIO = scenario("xid79_multi_node")

pytestmark = [pytest.mark.broker, needs_shared(SCENARIO)]


def _limit(lines: list[bytes]) -> tuple[int, set[str]]:
    """A topic limit between every minimal command and the largest command; the ids over it."""
    want = decide_offline(lines)
    cmds = [Command.model_validate(c) for c in want["commands"]]
    small = max(len(minimal(c, "too_large: " + "x" * 200).model_dump_json()) for c in cmds)
    limit = small + 110  # the record batch's headers and the key (the id) around one minimal record
    over = {c.id for c in cmds if len(c.model_dump_json()) + 61 > limit}  # 61: a batch's header alone
    assert over, "the scenario has no command large enough to be refused"
    return limit, over


def test_a_refused_command_is_replaced_and_neither_worker_dies(kafka_bootstrap: str, tmp_path: Path,
                                                             unique_name: str) -> None:
    settings = Settings(kafka=kafka_bootstrap, data_dir=tmp_path, namespace=unique_name)
    conf = settings.kafka_config(kafka_bootstrap)
    ns = f"{unique_name}.replay-refused"  # a capture ends (end_of_capture) only in a replay namespace
    create_namespace_topics(conf, ns, partitions=1)
    lines = SCENARIO.read_bytes().splitlines()
    limit, over = _limit(lines)
    admin = AdminClient(conf)
    res = ConfigResource("topic", f"{ns}.commands", incremental_configs=[
        ConfigEntry("max.message.bytes", str(limit), incremental_operation=AlterConfigOpType.SET)])
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(timeout=30)
    first: CorrelatorWorker | None = None
    try:
        pub = EventPublisher(conf, ns)
        n, _, _, last = publish_capture(pub, lines)
        pub.flush()
        first = CorrelatorWorker(settings, kafka_bootstrap, ns)
        deadline = time.monotonic() + 120
        dead: list[DeadLetter] = []
        while not dead:  # the refusal is dead-lettered, and the worker lives on
            assert time.monotonic() < deadline and first.alive(), first.tail()
            dead = [d for d in (DeadLetter.model_validate_json(v) for v in read_topic(conf, f"{ns}.deadletters", 5))
                    if "not published whole" in d.reason]
            time.sleep(0.5)
        time.sleep(3)
        assert first.alive(), first.tail()
        sigkill(first)  # the successor takes over where emitted says, past the refused record
        log = finish_with_successor(settings, kafka_bootstrap, ns, pub, n, last)
        assert "Traceback" not in log, log[-3000:]
        got = [Command.model_validate_json(v) for v in read_topic(conf, f"{ns}.commands", 10)]
        ids = {c.id for c in got}
        assert {c["id"] for c in decide_offline(lines)["commands"]} <= ids  # every decision, whole or minimal
        cut = {c.id for c in got if "cut" in c.params}
        # at least the large ones; records sent together share a batch, which the broker refuses whole
        assert over <= cut and any(d.reason.startswith("commands record") for d in dead)
        assert all(c.requires_approval for c in got if c.id in cut)
    finally:
        if first is not None and first.alive():
            first.stop()
        delete_namespace_topics(conf, ns)
