"""The Slurm executor SIGKILLed at seeded fault points on a real slurmctld: no command is carried out twice.

Signed fencing commands (``quarantine_gpu`` and ``drain_node`` of several incidents, all on the
test cluster's node) go through a real executor process (:mod:`.executor_child`: the runner,
core, SQLite ledger and Slurm backend of ``faultline executor run``). Drawn from the seed, it
dies on one of the commands at one of four points -- before acting, **after acting and before
recording the result**, after recording and before publishing, after publishing and before
committing the offset -- and a second executor of the same name takes over. Counted per command
id, from the ``scontrol update`` calls that really ran and from the node's drain reason on
slurmctld:

- no command was carried out twice (the backend started on each id at most once), and none
  changed Slurm twice (at most one ``scontrol update`` per id; each incident's entry at most once
  in the node's reason -- a drain repeated would be a no-op, but at most once is the promise);
- every command has exactly one final result (copies on the topic are byte-identical);
- a command the dead executor was in the middle of is reported ``failed: interrupted`` -- not
  retried (at most once means a retry is a new decision) -- whether or not it had acted; every
  other command is ``done``, once; a command re-delivered after the crash is ``skipped_duplicate``.
"""

from __future__ import annotations

import os
import random
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Producer

from common.kafka_admin import create_namespace_topics, delete_namespace_topics
from common.kafka_reader import read_topic
from sinks.executors.ledger import FINAL_STATUSES
from sinks.executors.slurm import CommandLine, SlurmBackend
from streams.decisions import Command, CommandResult
from streams.signing import SigningKeys, sign
from streams.topics import topic_name
from tests.harness.copies import Copies
from tests.harness.seeds import seed_params
from tests.producers.scheduler.slurm_cluster import SlurmCluster

from .commands import command
from .executor_child import POINTS

pytestmark = [pytest.mark.broker, pytest.mark.reliability]

REPO = Path(__file__).resolve().parents[3]
COMMANDS = 6
DEADLINE_S = 90.0


def _commands(node: str, keys: SigningKeys) -> list[Command]:
    out = []
    for i in range(COMMANDS):
        cmd = (command(f"cmd-q{i}", "quarantine_gpu", node=node, gpu=f"GPU-{i:04d}", incident=f"inc-{i}")
               if i % 2 == 0 else command(f"cmd-d{i}", "drain_node", node=node, incident=f"inc-{i}"))
        out.append(sign(cmd, keys, datetime.now(UTC), timedelta(hours=1)))
    return out


def _start(bootstrap: str, ns: str, state: Path, calls: Path, point: str, cid: str, env: dict[str, str],
           log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.sinks.executors.executor_child", bootstrap, ns, str(state), str(calls),
             point, cid], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)


def _results(conf: dict[str, str], ns: str) -> list[bytes]:
    return list(read_topic(conf, topic_name(ns, "command-results"), timeout=30))


@pytest.mark.parametrize("point", [p for p in POINTS if p != "none"])
@pytest.mark.parametrize("seed", seed_params(default=(11,), soak=tuple(range(1000, 1010))))
def test_executor_killed_around_acting_never_carries_a_command_out_twice(
        slurm: SlurmCluster, kafka_bootstrap: str, unique_name: str, tmp_path: Path, seed: int, point: str) -> None:
    rng = random.Random(f"{seed}-{point}")
    keys = SigningKeys.parse(f"k1:{secrets.token_hex(16)}")
    cmds = _commands(slurm.node, keys)
    victim = rng.choice(cmds).id
    ctx = f"[seed={seed} killed {point} on {victim}] "
    conf = {"bootstrap.servers": kafka_bootstrap}
    create_namespace_topics(conf, unique_name, partitions=1)
    env = {**os.environ, "PYTHONPATH": str(REPO), "SLURM_CONF": str(slurm.conf),
           "FAULTLINE_SIGNING_KEYS": ",".join(f"{k}:{keys.secret(k).decode()}" for k in [keys.active])}
    state, calls, log = tmp_path / "executor", tmp_path / "calls.log", tmp_path / "executor.log"
    try:
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
        for cmd in cmds:
            producer.produce(topic_name(unique_name, "commands"), key=cmd.id.encode(),
                             value=cmd.model_dump_json().encode())
        assert producer.flush(30) == 0

        first = _start(kafka_bootstrap, unique_name, state, calls, point, victim, env, log)
        try:
            first.wait(DEADLINE_S)
        except subprocess.TimeoutExpired:
            first.kill()
            first.wait(30)
            raise AssertionError(f"{ctx}the fault point was never reached:\n{log.read_text()[-3000:]}") from None
        assert first.returncode == -signal.SIGKILL, ctx + log.read_text()[-3000:]

        second = _start(kafka_bootstrap, unique_name, state, calls, "none", "-", env, log)
        try:
            deadline = time.monotonic() + DEADLINE_S
            while {c.id for c in cmds} - {r.command for r in map(CommandResult.model_validate_json,
                                                                  _results(conf, unique_name))
                                          if r.status in FINAL_STATUSES}:
                assert second.poll() is None and time.monotonic() < deadline, ctx + log.read_text()[-3000:]
                time.sleep(0.3)
            time.sleep(1.0)  # a re-delivered command's skipped_duplicate, if any, follows its final result
        finally:
            second.send_signal(signal.SIGKILL)
            second.wait(30)
        raw_results = _results(conf, unique_name)
    finally:
        delete_namespace_topics(conf, unique_name)

    # What really ran: each command carried out at most once, at most one `scontrol update` each, each entry
    # once in the node's reason on slurmctld.
    lines = [line.split(" ", 2) for line in calls.read_text().splitlines()]
    ran = Counter(cid for kind, cid, *_ in lines if kind == "exec")
    updates = Counter(cid for kind, cid, *_ in lines if kind == "update")
    Copies.counted("executions", ran).assert_at_most_once(ctx)
    Copies.counted("scontrol updates", updates).assert_at_most_once(ctx)
    state_, reason = SlurmBackend(CommandLine(timeout_s=20, env={"SLURM_CONF": str(slurm.conf)})).node_state(
        slurm.node)
    entries = [e.strip() for e in reason.removeprefix("faultline:").split(";") if e.strip()]
    assert "DRAIN" in state_ and len(entries) == len(set(entries)), f"{ctx}reason {reason!r}"
    assert len(entries) == len(updates), f"{ctx}{len(updates)} commands acted, {len(entries)} entries in {reason!r}"

    results = [CommandResult.model_validate_json(v) for v in raw_results]
    final = Copies.of("final results", [v for v, r in zip(raw_results, results, strict=True)
                                         if r.status in FINAL_STATUSES],
                      lambda v: CommandResult.model_validate_json(v).command)
    final.assert_at_least_once_identical({c.id for c in cmds}, ctx)
    outcome = {CommandResult.model_validate_json(next(iter(final.contents[c.id]))).command:
               CommandResult.model_validate_json(next(iter(final.contents[c.id]))) for c in cmds}
    for cmd in cmds:
        r = outcome[cmd.id]
        if cmd.id == victim and point in ("before-act", "after-act"):
            assert r.status == "failed" and "interrupted" in r.detail, f"{ctx}{cmd.id}: {r.status} {r.detail}"
            assert ran[cmd.id] == (1 if point == "after-act" else 0), f"{ctx}{cmd.id} ran {ran[cmd.id]} times"
        else:
            assert r.status == "done" and ran[cmd.id] == 1, f"{ctx}{cmd.id}: {r.status} {r.detail}, ran {ran[cmd.id]}"
    duplicates = sum(1 for r in results if r.status == "skipped_duplicate")
    print(f"\nexecutor crash {ctx}: commands={len(cmds)} executions={sum(ran.values())} "
          f"scontrol_updates={sum(updates.values())} max_per_command={max(ran.values(), default=0)} "
          f"reason_entries={len(entries)} "
          f"victim_result={outcome[victim].status} final_result_copies={final.extra_copies} "
          f"skipped_duplicate={duplicates} executed_twice=0")
