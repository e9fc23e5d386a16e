"""Correlator workers SIGKILLed at fault points inside them, while decisions are in flight; successors finish.

Every worker here runs as deployed (tests/faultline/killed_workers.py): commands signed, the
snapshot key set, development mode off, the live clock on. The capture has its decisions spread
through it (:func:`tests.harness.captures.spread_capture`: 4 jobs, 7 incidents, 15 commands from
event 683 to 2,954), dated a while ahead of the wall clock, so the live tick runs all along but no
timer falls due before the stream's own events pass it: the uninterrupted run is the offline one.
It is published whole, with its end marker; then a worker armed with a fault point
(tests/faultline/fault_worker.py) at a seeded record that decides something:

* ``acked`` -- killed between the broker's acknowledgement of the record's decisions and the
  ``emitted`` write: its successor must publish them again (and may: same ids, same content);
* ``between`` -- killed between the record's first decision (acknowledged) and its second (never
  handed to the producer): the successor must publish the second, and the first again;
* ``catch-up`` -- killed at ``acked``, then its successor killed too, inside its takeover: in the
  middle of folding the log (a seeded number of records in) or with its state installed, before it
  judged anything; a third worker finishes.

Then, per id (:func:`tests.faultline.killed_workers.check_decisions`): every incident version and
command of the uninterrupted run published at least once, nothing else, one content per id -- for
a command, one content but for its ``expires_at`` and signature, which a successor's re-signing
sets anew (every copy's signature is checked); and the kill must have landed in flight: the
decisions of the killed record are on the topic twice (the victim published them before it
died, the successor again). Seeds are in the test ids; figures are printed (``-s``).
"""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from common.kafka_admin import create_namespace_topics, delete_namespace_topics
from faultline.pipeline import end_marker, publish_capture, wait_for_end
from producers.delivery import EventPublisher
from streams.decisions import Command
from tests.faultline.fault_worker import decision_key
from tests.faultline.killed_workers import Workers, check_decisions, dated, offline, production_settings
from tests.harness.captures import spread_capture
from tests.harness.seeds import seed_params

pytestmark = [pytest.mark.broker, pytest.mark.reliability]

DEADLINE_S = 240.0  # generous, shared two-core machine; nothing asserts on time
#: How far ahead of the wall clock the capture starts: more than the test can take, so no live tick judges a
#: timer before the events that come first in the capture (the uninterrupted run is then the offline one).
LEAD = timedelta(minutes=20)
POINTS = ("acked", "between", "catch-up")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("seed", seed_params(default=(11,), soak=tuple(range(1000, 1010))))
def test_a_worker_killed_while_deciding_loses_nothing_and_repeats_only_what_it_decided(
        kafka_bootstrap: str, tmp_path: Path, unique_name: str, monkeypatch: pytest.MonkeyPatch,
        seed: int, point: str) -> None:
    rng = random.Random(f"{seed}-{point}")
    lines = dated(spread_capture(), datetime.now(UTC) + LEAD)
    want = offline(lines)
    # acked: a record with a command among its decisions, so a re-signed copy is among those compared
    deciding = [k for k, ds in enumerate(want.per_event) if len(ds) >= (2 if point == "between" else 1)
                and (point != "acked" or any(isinstance(d, Command) for d in ds))]
    at = rng.choice(deciding)
    ns = f"{unique_name}.replay-kill"  # a capture ends (end_of_capture) only in a replay namespace
    settings = production_settings(kafka_bootstrap, tmp_path, unique_name)
    conf = settings.kafka_config(kafka_bootstrap)
    specs = [f"{'between' if point == 'between' else 'acked'}:{at}"]
    if point == "catch-up":
        specs.append(rng.choice([f"rebuild:{rng.randint(1, at - 1)}", "installed"]))
    ctx = f"[seed={seed} {point} {' then '.join(specs)}] "
    create_namespace_topics(conf, ns, partitions=1)
    workers = Workers(settings, kafka_bootstrap, ns, monkeypatch)
    try:
        pub = EventPublisher(conf, ns)
        n, events, _, last = publish_capture(pub, lines)
        pub.publish([end_marker(n, last)])
        pub.flush()
        assert events + 1 == len(want.per_event)  # and the end marker, judged last offline too
        landed = [workers.wait_killed(workers.start(spec), ctx, DEADLINE_S) for spec in specs]
        final = workers.start()
        wait_for_end(conf, ns, final, timeout=DEADLINE_S)
        text = final.log_text()
        assert final.alive() and not final.crashed(), final.tail()
        assert "DEVELOPMENT MODE" not in text
        counted = check_decisions(conf, ns, settings, want, ctx)
    finally:
        workers.stop_all()
        delete_namespace_topics(conf, ns)

    # Where each kill landed, and that it landed in flight.
    assert landed[0].startswith(f"{specs[0].replace(':', ' offset ')} decisions "), ctx + landed[0]
    ids = re.search(r"decisions (\S+)", landed[0]).group(1).split(",")  # type: ignore[union-attr]
    assert ids == [decision_key(d) for d in want.per_event[at]], ctx + landed[0]
    copies = counted.copies_of(ids)
    if point == "between":  # the first was on its topic when the victim died, and came again; the rest once
        assert copies[ids[0]] >= 2 and all(c >= 1 for c in copies.values()), f"{ctx}copies {copies}"
    else:  # every decision of the record was acknowledged before the victim died, and came again
        assert all(c >= 2 for c in copies.values()), f"{ctx}copies {copies}"
    if point == "catch-up":
        assert landed[1].startswith("rebuild after" if specs[1].startswith("rebuild") else "installed"), landed
    assert "rebuilt state from" in text, ctx + text[-3000:]
    print(f"\nworker kill {ctx}: events={events} incident_versions={len(counted.versions.ids)} "
          f"commands={len(counted.commands.ids)} kills={len(landed)} ({'; '.join(landed)}) lost=0 "
          f"version_copies={counted.versions.extra_copies} command_copies={counted.commands.extra_copies} "
          f"resigned_differing={counted.resigned} killed_record_copies={copies}")
