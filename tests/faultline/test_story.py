"""An incident's entries as sentences, and repeats folded into groups."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from faultline.story import Entry, describe_command, describe_signal, group

T = datetime(2026, 4, 22, 3, 33, 20, tzinfo=UTC)


def test_signals_read_as_sentences_not_json() -> None:
    assert describe_signal("xid", '{"kind":"xid","code":79,"gpu":{"pci":"3a:00"},"message":"GPU has fallen off '
                                  'the bus."}') == "XID 79: GPU has fallen off the bus. (GPU 3a:00)"
    assert describe_signal("nccl_timeout", {"seq": 842, "op_type": "ALLREDUCE", "timeout_ms": 600000,
                                            "ran_ms": 600201}) == "NCCL watchdog timeout (ALLREDUCE #842, timeout 600 s)"
    assert describe_signal("job_ended", {"status": "failed"}) == "job failed"
    assert describe_signal("worker_exit", {"exitcode": -6, "signal": "SIGABRT"}) == "worker exited (signal SIGABRT)"
    assert describe_signal("something_new", {"kind": "something_new", "a": 1, "b": None}) == "something_new: a=1"
    assert describe_signal("xid", "not json") == "XID None: no message (GPU ?)"  # never raises


def test_a_restart_says_from_where_on_what_and_avoiding_what() -> None:
    text = describe_command("restart_job", {"checkpoint": {"path": "/ck/1210", "step": 1210}, "gpus": 32,
                                            "exclude": {"nodes": ["n03"], "gpus": ["GPU-e406"]}}, "gpu_off_bus")
    assert text == "from step 1210 (/ck/1210) on 32 GPUs, excluding node n03, GPU GPU-e406; gpu_off_bus"
    assert describe_command("restart_job", {"checkpoint": None, "gpus": 8}).startswith("from the start")


def test_the_same_signal_from_every_rank_within_a_minute_is_one_group() -> None:
    timeouts = [Entry(T + timedelta(milliseconds=10 * r), "signal", "nccl_timeout", "NCCL watchdog timeout",
                      nodes=(f"n0{1 + r // 8}",), ranks=(r,)) for r in range(31)]
    later = Entry(T + timedelta(minutes=5), "signal", "nccl_timeout", "NCCL watchdog timeout", ranks=(0,))
    other = Entry(T, "command", "notify", "NCCL watchdog timeout")  # another lane is another thing
    [first, cmd, second] = group([*timeouts, later, other])
    assert (first.count, first.label) == (31, "31 × NCCL watchdog timeout")
    assert first.origin == "ranks 0-30 on n01, n02, n03, n04" and first.last_ts == T + timedelta(milliseconds=300)
    assert cmd.lane == "command" and second.count == 1
