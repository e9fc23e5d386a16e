"""The BMC poller on recorded ipmitool outputs: power changes, new SEL records once, outages once."""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import SecretStr

from producers.capture import parse_capture_line
from producers.node import bmc
from producers.node.bmc import BmcPoller, IpmiError, Ipmitool, new_sel_lines
from producers.registry import SourceContext
from streams.events import BmcPower, BmcSel, BmcUnreachable

FIXTURES = Path(__file__).parents[1] / "fixtures"
NOW = datetime(2026, 4, 22, 3, 25, 30, tzinfo=UTC)


def _out(name: str) -> str:
    return (FIXTURES / f"ipmitool_{name}.txt").read_text()


class RecordedBmc:
    """Answers ipmitool calls from recorded outputs; ``None`` for a BMC that does not answer."""

    def __init__(self) -> None:
        self.power: str | None = _out("power_on")
        self.sel: str | None = _out("sel_elist_before")
        self.calls: list[list[str]] = []

    def __call__(self, args: list[str]) -> str:
        self.calls.append(args)
        answer = self.power if args[0] == "chassis" else self.sel
        if answer is None:
            raise IpmiError("ipmitool: Unable to establish IPMI v2 / RMCP+ session")
        return answer


def _events(found: list[dict[str, object]]) -> list[object]:
    return [e.body for obs in found for e in parse_capture_line(json.dumps(obs))]


def test_first_poll_sends_power_but_not_old_sel_history(tmp_path: Path) -> None:
    run = RecordedBmc()
    poller = BmcPoller("n17", run, tmp_path / "bmc.json")
    assert poller.poll(NOW) == [{"ts": "2026-04-22T03:25:30.000+00:00", "source": "bmc", "node": "n17", "power": "on"}]
    assert poller.poll(NOW) == [], "nothing changed"
    assert run.calls[:2] == [["chassis", "power", "status"], ["sel", "elist"]]


def test_each_new_sel_record_once_across_polls_and_restarts(tmp_path: Path) -> None:
    run = RecordedBmc()
    BmcPoller("n17", run, tmp_path / "bmc.json").poll(NOW)
    run.sel = _out("sel_elist_after")
    poller = BmcPoller("n17", run, tmp_path / "bmc.json")  # a restart in between
    found = poller.poll(NOW)
    bodies = _events(found)

    assert isinstance(bodies[0], BmcPower) and bodies[0].on
    sels = [b for b in bodies if isinstance(b, BmcSel)]
    assert [(s.component, s.hardware_fault) for s in sels] == [
        ("memory", True), ("power_supply", True), ("power_supply", True)
    ]
    assert poller.poll(NOW) == []
    assert BmcPoller("n17", run, tmp_path / "bmc.json").poll(NOW) == [found[0]], "only power after a restart"


def test_a_cleared_log_makes_every_record_new(tmp_path: Path) -> None:
    run = RecordedBmc()
    poller = BmcPoller("n17", run, tmp_path / "bmc.json")
    poller.poll(NOW)
    run.sel = _out("sel_elist_cleared")
    sels = [b for b in _events(poller.poll(NOW)) if isinstance(b, BmcSel)]
    assert [s.description for s in sels] == ["Log area reset/cleared", "Failure detected"]
    assert not any(s.hardware_fault for s in sels), "a cleared log and a deasserted failure are benign"


def test_power_changes_are_sent(tmp_path: Path) -> None:
    run = RecordedBmc()
    poller = BmcPoller("n17", run, tmp_path / "bmc.json")
    poller.poll(NOW)
    run.power = _out("power_off")
    assert [b.on for b in _events(poller.poll(NOW)) if isinstance(b, BmcPower)] == [False]
    assert poller.poll(NOW) == []


def test_unreachable_once_per_outage_and_power_again_after_recovery(tmp_path: Path) -> None:
    run = RecordedBmc()
    poller = BmcPoller("n17", run, tmp_path / "bmc.json")
    poller.poll(NOW)
    run.power = None
    first = poller.poll(NOW)
    assert [type(b) for b in _events(first)] == [BmcUnreachable]
    assert first[0]["reachable"] is False
    assert poller.poll(NOW) == [] and poller.poll(NOW) == [], "one line per outage"
    run.power = _out("power_on")
    assert [type(b) for b in _events(poller.poll(NOW))] == [BmcPower], "power is restated after recovery"
    run.sel = None
    assert [type(b) for b in _events(poller.poll(NOW))] == [BmcUnreachable], "a new outage is news again"


def test_new_sel_lines_rules() -> None:
    after = _out("sel_elist_after")
    last = after.splitlines()[6].strip()
    assert [line.split("|")[0].strip() for line in new_sel_lines(after, 7, last)] == ["8", "9", "a"]
    assert len(new_sel_lines(after, 7, "something else")) == 10, "the last record seen is gone: all are new"
    assert len(new_sel_lines(after, -1, "")) == 10


def _fake_ipmitool(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "ipmitool"
    script.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/args\necho "pw=$IPMI_PASSWORD" >> {tmp_path}/args\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_ipmitool_lanplus_takes_the_password_from_the_environment_never_the_command_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script = _fake_ipmitool(tmp_path, "echo 'Chassis Power is on'")
    run = Ipmitool(str(script), host="10.1.0.17", user="admin", password=SecretStr("s3cret"))
    assert run(["chassis", "power", "status"]).strip() == "Chassis Power is on"
    args, password = (tmp_path / "args").read_text().splitlines()
    assert args == "-I lanplus -H 10.1.0.17 -U admin -E chassis power status"
    assert password == "pw=s3cret"
    assert "s3cret" not in caplog.text


def test_ipmitool_failures_and_timeouts_are_ipmi_errors(tmp_path: Path) -> None:
    failing = Ipmitool(str(_fake_ipmitool(tmp_path, "echo 'Error: Unable to establish IPMI v2' >&2; exit 1")))
    with pytest.raises(IpmiError, match="exit 1: Error: Unable to establish IPMI v2"):
        failing(["sel", "elist"])
    slow = Ipmitool(str(_fake_ipmitool(tmp_path, "exec sleep 5")), timeout_s=0.2)
    with pytest.raises(IpmiError, match="no answer within 0.2s"):
        slow(["sel", "elist"])
    with pytest.raises(IpmiError, match="not found"):
        Ipmitool(str(tmp_path / "missing"))(["sel", "elist"])


def test_factory_reads_the_password_from_the_named_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = _fake_ipmitool(tmp_path, "echo 'Chassis Power is off'")
    monkeypatch.setenv("MY_BMC_PW", "from-env")
    ctx = SourceContext(node="n17", state_dir=tmp_path / "state")
    poller = bmc.create(ctx, {"host": "bmc-n17", "user": "ops", "password_env": "MY_BMC_PW",
                              "ipmitool": str(script), "interval_s": 5})
    assert poller.interval_s == 5
    assert poller.poll(NOW)[0]["power"] == "off"
    assert (tmp_path / "args").read_text().splitlines()[-1] == "pw=from-env"


def test_ipmitool_gets_a_minimal_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 15, finding 7: ipmitool inherited the whole environment (the agent's Kafka password with it)."""
    monkeypatch.setenv("FAULTLINE_KAFKA_PASSWORD", "kafka-password-the-bmc-tool-must-not-see")
    fake = tmp_path / "ipmitool"
    fake.write_text("#!/bin/sh\nenv\n")
    fake.chmod(0o755)
    local = Ipmitool(executable=str(fake))([])
    remote = Ipmitool(executable=str(fake), host="bmc-n17", user="ops", password=SecretStr("bmc-pw-0123"))([])
    for env in (local, remote):
        assert "kafka-password-the-bmc-tool-must-not-see" not in env and "FAULTLINE_" not in env
        assert any(line.startswith("PATH=") for line in env.splitlines())
    assert "IPMI_PASSWORD=bmc-pw-0123" in remote.splitlines() and "IPMI_PASSWORD" not in local
