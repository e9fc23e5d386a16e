"""The kernel log source: only recognised lines, verbatim, from a file, journalctl or /dev/kmsg."""

from __future__ import annotations

import json
import os
import stat
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from producers.capture import parse_capture_line
from producers.node import kernel_log
from producers.node.kernel_log import JournalReader, KernelLog, KmsgReader
from producers.node.state import load_state, save_state
from producers.registry import SourceContext
from streams.events import GpuLost, KernelFault, Xid

NOW = datetime(2026, 4, 22, 3, 14, 20, tzinfo=UTC)
XID = ("Apr 22 03:14:17 n17 kernel: [81234.567890] NVRM: Xid (PCI:0000:5d:00): 48, pid='<unknown>', "
       "name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
       "at partition 6, subpartition 0.")
OFF_BUS = "Apr 22 03:14:18 n17 kernel: [81235.1] NVRM: GPU at PCI:0000:db:00: GPU has fallen off the bus."
AER = ("Apr 22 03:14:19 n17 kernel: [81236.2] pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error "
       "received: 0000:5d:00.0")
OOM = "Apr 22 03:14:20 n17 kernel: [81237.3] Out of memory: Killed process 4242 (python) total-vm:123kB"
NOISE = [
    "Apr 22 03:14:17 n17 kernel: [81234.5] eth0: Link is Up - 100Gbps/Full",
    "Apr 22 03:14:18 n17 kernel: [81235.0] audit: type=1400 audit(1713755658.123:42): apparmor=\"DENIED\"",
    "Apr 22 03:14:19 n17 kernel: [81236.0] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15",
]


def _ctx(tmp_path: Path) -> SourceContext:
    return SourceContext(node="n17", state_dir=tmp_path / "state")


def test_file_mode_emits_only_recognised_lines_verbatim(tmp_path: Path) -> None:
    log_file = tmp_path / "kern.log"
    log_file.write_text(XID + "\n")  # history: not sent
    source = kernel_log.create(_ctx(tmp_path), {"mode": "file", "path": str(log_file)})
    assert source is not None and source.poll(NOW) == []
    with log_file.open("a") as fh:
        fh.write("\n".join([NOISE[0], XID, NOISE[1], OFF_BUS, AER, NOISE[2], OOM]) + "\n")

    found = source.poll(NOW)
    assert [obs["line"] for obs in found] == [XID, OFF_BUS, AER, OOM]
    assert all(obs["source"] == "kernel" and obs["node"] == "n17" for obs in found)
    bodies = [parse_capture_line(json.dumps(obs))[0].body for obs in found]
    assert [type(b) for b in bodies] == [Xid, GpuLost, KernelFault, KernelFault]
    source.close()


def test_settings_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs 'path'"):
        kernel_log.create(_ctx(tmp_path), {"mode": "file"})
    with pytest.raises(ValueError, match="Extra inputs"):
        kernel_log.create(_ctx(tmp_path), {"mode": "file", "path": "/x", "pth": "/y"})


def _fake_journalctl(tmp_path: Path, lines: list[str], then: str = "exec sleep 30") -> Path:
    """A stand-in journalctl that records its arguments, prints ``lines``, then runs ``then``."""
    (tmp_path / "lines").write_text("".join(line + "\n" for line in lines))
    script = tmp_path / "journalctl"
    script.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/args\ncat {tmp_path}/lines\n{then}\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def _poll_until(source: KernelLog, count: int, timeout_s: float = 5.0) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while len(lines) < count and time.monotonic() < deadline:
        lines += [obs["line"] for obs in source.poll(NOW)]
        time.sleep(0.05)
    return lines


def test_journal_mode_runs_journalctl_with_a_cursor_file(tmp_path: Path) -> None:
    journal = [f"2026-04-22T03:14:17+0000 n17 kernel: {line.split('] ', 1)[1]}" for line in [XID, NOISE[0], OFF_BUS]]
    script = _fake_journalctl(tmp_path, journal)
    source = KernelLog("n17", JournalReader(tmp_path / "journal.cursor", str(script)))
    try:
        assert _poll_until(source, 2) == [journal[0], journal[2]]
    finally:
        source.close()
    args = (tmp_path / "args").read_text().split()
    assert args[:5] == ["-k", "-f", "-o", "short-iso", "--no-pager"]
    assert f"--cursor-file={tmp_path / 'journal.cursor'}" in args
    assert args[-2:] == ["-n", "0"], "the first start shows no history"


def test_journal_mode_reports_a_dead_journalctl(tmp_path: Path) -> None:
    script = _fake_journalctl(tmp_path, [], then="exit 3")
    reader = JournalReader(tmp_path / "journal.cursor", str(script))
    deadline = time.monotonic() + 5
    with pytest.raises(RuntimeError, match="exited with status 3"):
        while time.monotonic() < deadline:
            reader.read_lines()
            time.sleep(0.05)
    reader.close()


def _readable_kmsg() -> bool:
    try:
        os.close(os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _readable_kmsg(), reason="/dev/kmsg is not readable here")
def test_kmsg_skips_history_at_first_start_and_resumes_by_sequence_number(tmp_path: Path) -> None:
    state = tmp_path / "kmsg.json"
    KmsgReader(state).close()
    saved = load_state(state)
    assert saved is not None and saved["seq"] >= 4

    save_state(state, {**saved, "seq": saved["seq"] - 3})  # as if the last three were not read yet
    again = KmsgReader(state)
    lines = again.read_lines()
    again.close()
    assert [int(line.split(",")[1]) for line in lines[:3]] == [saved["seq"] - 2, saved["seq"] - 1, saved["seq"]]

    save_state(state, {**saved, "boot_id": "another boot"})
    after_reboot = KmsgReader(state, max_records=10)
    assert len(after_reboot.read_lines()) == 10, "a new boot's buffer is all news"
    after_reboot.close()
