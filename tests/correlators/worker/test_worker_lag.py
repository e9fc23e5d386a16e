"""The lag a correlator worker measures itself: what `faultline worker`'s heartbeat carries to `status`."""

from __future__ import annotations


def test_the_worker_measures_the_lag_its_heartbeat_carries() -> None:
    """Per assigned partition, the records past the last one judged (all of them where it holds no state yet);
    a partition the consumer has not fetched yet is unknown, not caught up. `faultline worker`'s heartbeat
    reads the total (common.metrics.stage_lag)."""
    from common import metrics
    from correlators.partitions import PartitionState, WorkerState
    from correlators.worker.assembly import Worker

    worker = Worker.__new__(Worker)  # only what set_gauges reads: no broker behind it
    worker.held, worker.events_topic = WorkerState(), "ns.events"
    state = PartitionState(0, lambda: None, "cell")  # type: ignore[arg-type,return-value]
    state.position = 9
    worker.held.install(state)
    worker._assigned = {0, 1, 2, 3}

    def highwater(part: int) -> int:
        if part == 3:  # revoked between the assignment and this round: aiokafka asserts
            raise AssertionError("Partition is not assigned")
        return {0: 15, 1: 4, 2: -1}[part]

    worker.set_gauges(highwater)  # a gauge round never raises into Faust's timer (it would crash the worker)
    assert metrics.stage_lag("correlator") == (15 - 10) + 4
    assert metrics.CONSUMER_LAG.labels("correlator", "ns.events", "0")._value.get() == 5
