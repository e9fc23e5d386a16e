"""librdkafka's lines go through logging, and a reconnect loop's repeats are collapsed."""

from __future__ import annotations

import logging

import pytest

from common.kafka_admin import BrokerUnreachable, check_broker
from common.kafka_logging import KAFKA_LOG, CollapseRepeats, with_logger


def _record(msg: str, *args: object, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord("faultline.kafka", level, __file__, 1, msg, args or None, None)


def test_the_same_line_again_within_the_window_is_swallowed_then_counted() -> None:
    now = [0.0]
    f = CollapseRepeats(window_s=60, clock=lambda: now[0])
    line = ("FAIL", "rdkafka#producer-1", "Connect to ipv4#127.0.0.1:1 failed (after 0ms in state CONNECT)")
    assert f.filter(_record("%s [%s] %s", *line))
    for n in range(1, 50):  # other clients, other timings: the same failure
        now[0] = n
        again = (line[0], f"rdkafka#producer-{n}", line[2].replace("0ms", f"{n}ms"))
        assert not f.filter(_record("%s [%s] %s", *again))
    now[0] = 61.0
    after = _record("%s [%s] %s", *line)
    assert f.filter(after)
    assert "(and 49 more like it in 60 s)" in after.getMessage()


def test_different_lines_and_levels_pass() -> None:
    f = CollapseRepeats(clock=lambda: 0.0)
    assert f.filter(_record("broker down"))
    assert f.filter(_record("disk full"))
    assert f.filter(_record("broker down", level=logging.WARNING))
    assert not f.filter(_record("broker down"))


def test_clients_get_the_logger_unless_they_name_one() -> None:
    assert with_logger({"bootstrap.servers": "x"})["logger"] is KAFKA_LOG
    own = logging.getLogger("mine")
    assert with_logger({"logger": own})["logger"] is own


def test_an_unreachable_broker_logs_a_line_or_two_not_hundreds(caplog: pytest.LogCaptureFixture,
                                                               capfd: pytest.CaptureFixture[str]) -> None:
    with caplog.at_level(logging.DEBUG, logger="faultline.kafka"), pytest.raises(BrokerUnreachable) as err:
        check_broker({"bootstrap.servers": "127.0.0.1:1"}, timeout=3)
    fails = [r for r in caplog.records if r.name == "faultline.kafka" and "FAIL" in r.getMessage()]
    assert 1 <= len(fails) <= 2, [r.getMessage() for r in fails]  # librdkafka retries ~20 times a second
    assert "%3|" not in capfd.readouterr().err  # nothing written around logging
    assert "faultline broker start" in str(err.value) and "FAULTLINE_KAFKA" in str(err.value)
