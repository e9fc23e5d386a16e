"""`faultline replay` end to end: real broker, a real Faust worker process, the embedded archive."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
from confluent_kafka.admin import AdminClient

from common.kafka_admin import delete_namespace_topics
from common.kafka_reader import read_topic
from common.settings import Settings
from faultline.pipeline import replay
from sinks.archive.store import Archive
from streams.decisions import DeadLetter
from streams.topics import topic_name
from tests.harness.shared import CONTRACT, SCENARIOS, needs_shared, scenario

pytestmark = pytest.mark.broker


def _scorer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("score_replay", CONTRACT / "score_replay.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def settings(kafka_bootstrap: str, tmp_path: Path, unique_name: str) -> Settings:
    return Settings(kafka=kafka_bootstrap, data_dir=tmp_path, namespace=unique_name,
                    archive=f"chdb://{tmp_path / 'archive'}")


@needs_shared(scenario("psu_rail_loss"), CONTRACT)
def test_psu_scenario_through_the_broker_scores_full_and_is_archived(settings: Settings) -> None:
    capture = scenario("psu_rail_loss")
    run = replay(capture, settings)
    out = run.contract()
    json.dumps(out)  # valid JSON
    score = _scorer()
    scorer = score.Scorer(score.load_inventory(str(capture)), out)
    passed, total = scorer.score(json.loads((SCENARIOS / "psu_rail_loss.expect.json").read_text()))
    assert passed == total, scorer.failed
    assert run.lines == sum(1 for _ in capture.open()) and run.bad == 0

    with Archive.open(settings.archive_url, run.archive_namespace) as archive:  # the replay's own namespace
        rows = archive.latest_incidents(job="ft-7b")
        assert [r["category"] for r in rows] == ["power_supply_fault"]
        assert rows[0]["id"] == out["incidents"][0]["id"]
        archived = {c["id"] for c in archive.commands(incident=rows[0]["id"])}
        assert archived == {c["id"] for c in out["commands"]}
        assert archive.count("events") == run.events + 1  # plus the end-of-capture marker

    # A replay leaves no topic behind, the correlator's own (changelog, snapshots) included.
    left = AdminClient(settings.kafka_config(settings.kafka or "")).list_topics(timeout=10).topics
    assert not [t for t in left if run.namespace in t]


def test_bad_lines_go_to_dead_letters_and_the_replay_goes_on(settings: Settings, tmp_path: Path) -> None:
    good = [
        {"ts": "2026-04-22T03:00:00+00:00", "source": "inventory", "node": "n1", "rack": "r1",
         "gpus": [{"index": 0, "uuid": "GPU-a", "pci_bus_id": "00000000:3A:00.0"}]},
        {"ts": "2026-04-22T03:00:10+00:00", "source": "kernel", "node": "n1",
         "line": "NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."},
    ]
    bad = [b"this is not json", b'{"source": "kernel", "node": "n1"}', b'{"ts": "2026-04-22T03:00:11+00:00"}',
           b'{"ts": "2026-04-22T03:00:12+00:00", "source": "toaster"}', b"\xff\xfe\x00 broken utf-8"]
    capture = tmp_path / "mixed.jsonl"
    capture.write_bytes(b"\n".join([json.dumps(good[0]).encode(), *bad, json.dumps(good[1]).encode()]) + b"\n")

    run = replay(capture, settings, keep_topics=True)
    try:
        assert (run.lines, run.bad) == (7, 5)
        out = run.contract()
        assert [i["category"] for i in out["incidents"]] == ["gpu_off_bus"]  # the good lines around them count
        conf = settings.kafka_config(settings.kafka or "")
        letters = [DeadLetter.model_validate_json(v)
                   for v in read_topic(conf, topic_name(run.namespace, "deadletters"))]
        assert len(letters) == 5
        assert all(dl.stage == "producer" and dl.reason for dl in letters)
        with Archive.open(settings.archive_url, run.archive_namespace) as archive:
            assert archive.count("deadletters") == 5
    finally:
        delete_namespace_topics(settings.kafka_config(settings.kafka or ""), run.namespace)


@needs_shared(scenario("psu_rail_loss"), CONTRACT)
def test_with_signing_keys_every_command_leaves_the_worker_signed(settings: Settings) -> None:
    from datetime import UTC, datetime

    from pydantic import SecretStr

    from streams.decisions import Command
    from streams.signing import verify

    signed = settings.model_copy(update={"signing_keys": SecretStr("k1:a-secret-of-sixteen-plus")})
    run = replay(scenario("psu_rail_loss"), signed)
    keys = signed.signing()
    assert keys is not None and run.commands
    for cmd in run.commands:
        assert verify(Command.model_validate(cmd.model_dump()), keys, datetime.now(UTC)) is None
        # ... for the namespace and cluster it was judged in (issue 15, finding 5)
        assert verify(cmd, keys, datetime.now(UTC), namespace=run.namespace, cluster=signed.cluster) is None
        assert verify(cmd, keys, datetime.now(UTC), namespace="faultline", cluster=signed.cluster) is not None
