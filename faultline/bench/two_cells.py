"""Two cells at once: a namespace each on a 3-broker cluster, two workers each, one storm in each at one moment.

Where users outgrow one worker, faultline grows on Kafka, not on a scheduler of its own: every cell
is a namespace (its topics, its consumer group), every namespace's events topic has a partition per
worker, and the workers of a namespace share its partitions as one consumer group. This section
runs :func:`faultline.bench.storm.storm` for ``cells`` namespaces at once on one replicated cluster
(:class:`deploy.local.cluster.LocalKafkaCluster`, three KRaft nodes, replication factor 3, unless
``FAULTLINE_KAFKA`` names a cluster already): every cell's load starts at the same instant (the
same monotonic and wall time), so the storms hit the brokers together, and every cell's figures
come from the same run. The cell's records are keyed by the cell, so one worker of its group judges
it and the other holds the other partition; which partitions each member held is reported.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from common.kafka_admin import create_namespace_topics, delete_namespace_topics
from common.settings import Settings
from faultline.bench.storm import StormSizes, storm, storm_settings
from faultline.pipeline import CorrelatorWorker
from streams.topics import correlator_app_id, topic_name

__all__ = ["Together", "run_cells"]


def _say(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


class Together:
    """One start for ``parties`` storms: each says how much lead it needs to make its records; once all are
    ready, all start at the same monotonic and wall instant, after the sum of their leads (every cell's
    records are made at once, in threads of one process, so the leads add up)."""

    def __init__(self, parties: int, timeout: float = 300) -> None:
        self.parties, self.timeout = parties, timeout
        self._lock = threading.Lock()
        self._leads: list[float] = []
        self._barrier = threading.Barrier(parties, action=self._stamp)
        self._at: tuple[float, datetime] = (0.0, datetime.now(UTC))

    def _stamp(self) -> None:
        lead = sum(self._leads)
        self._at = (time.monotonic() + lead, datetime.now(UTC) + timedelta(seconds=lead))

    def abort(self) -> None:
        """A cell failed before it was ready: the others stop waiting for it."""
        self._barrier.abort()

    def __call__(self, lead: float) -> tuple[float, datetime]:
        with self._lock:
            self._leads.append(lead)
        self._barrier.wait(self.timeout)
        return self._at


@contextmanager
def _cluster(settings: Settings) -> Iterator[str]:
    """``FAULTLINE_KAFKA``'s cluster where set; else three local KRaft nodes for this run."""
    if settings.kafka:
        yield settings.kafka
        return
    from deploy.local.cluster import LocalKafkaCluster

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=settings.data_dir, prefix="bench-cluster-") as d:
        _say("starting a 3-broker cluster")
        with LocalKafkaCluster(Path(d), size=3) as cluster:
            yield cluster.bootstrap


def _members(conf: dict[str, Any], ns: str) -> list[list[int]]:
    """The events partitions each member of the namespace's worker group holds now."""
    group = correlator_app_id(ns)
    admin = AdminClient(conf)  # held until the answer: a dropped client never answers its futures
    desc = admin.describe_consumer_groups([group])[group].result(timeout=30)
    events = topic_name(ns, "events")
    return sorted(sorted(tp.partition for tp in m.assignment.topic_partitions if tp.topic == events)
                  for m in desc.members)


def _cell(settings: Settings, bootstrap: str, conf: dict[str, Any], ns: str, sizes: StormSizes, workers: int,
          start: Together) -> dict[str, Any]:
    """One cell: its namespace's ``workers`` workers (one consumer group), its storm, who held what."""
    pool = [CorrelatorWorker(storm_settings(settings), bootstrap, ns, name=f"w{k + 1}") for k in range(workers)]
    try:
        out = storm(settings, bootstrap, conf, ns, sizes, pool=pool, start=start)
        out["group_events_partitions"] = _members(conf, ns)
        out["workers_alive"] = sum(w.alive() and not w.crashed() for w in pool)
        return out
    finally:
        for w in pool:
            w.stop()


def run_cells(settings: Settings, quick: bool = False, cells: int = 2, workers: int = 2) -> dict[str, Any]:
    """``cells`` storms at one moment, a namespace each, ``workers`` workers per namespace; every cell's figures."""
    sizes = StormSizes(quick)
    started = time.monotonic()
    out: dict[str, Any] = {"quick": quick, "cells": cells, "workers_per_cell": workers,
                           "started_at": datetime.now(UTC).isoformat(), "machine": {
                               "cpus": os.cpu_count(), "load_average_before": _load()}}
    with _cluster(settings) as bootstrap:
        settings = settings.model_copy(update={"kafka": bootstrap})
        conf = settings.kafka_config(bootstrap)
        out["brokers"] = len(AdminClient(conf).list_topics(timeout=30).brokers)
        spaces = [f"{settings.namespace}.bench-cell{k + 1}-{uuid.uuid4().hex[:6]}" for k in range(cells)]
        results: list[dict[str, Any]] = [{} for _ in spaces]
        errors: list[BaseException] = []
        start = Together(cells)

        def one(k: int) -> None:
            try:
                results[k] = _cell(settings, bootstrap, conf, spaces[k], sizes, workers, start)
            except BaseException as exc:  # re-raised in the caller's thread
                errors.append(exc)
                start.abort()

        try:
            for ns in spaces:
                create_namespace_topics(conf, ns, partitions=workers)
            _say(f"{cells} cells of {sizes.nodes:,} nodes, {workers} workers each, one storm in each at once")
            threads = [threading.Thread(target=one, args=(k,), name=f"cell-{k + 1}") for k in range(cells)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            for ns in spaces:
                delete_namespace_topics(conf, ns)
        if errors:
            raise errors[0]
    out["per_cell"] = [{"namespace": ns, **r} for ns, r in zip(spaces, results, strict=True)]
    out["seconds"] = round(time.monotonic() - started, 1)
    out["machine"]["load_average_after"] = _load()
    return out


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]
