"""FileFollower on a real file: appends, rotation, truncation, restarts -- no line twice, none lost."""

from __future__ import annotations

import os
from pathlib import Path

from producers.node.follow import FileFollower


class Log:
    """A log file written the way syslog daemons and logrotate do it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.n = 0

    def write(self, count: int, end: str = "\n") -> list[str]:
        lines = [f"line {self.n + i}" for i in range(count)]
        self.n += count
        with self.path.open("a") as fh:
            fh.write("".join(line + end for line in lines))
        return lines

    def rotate(self, suffix: str = ".1") -> None:
        os.replace(self.path, self.path.with_name(self.path.name + suffix))
        self.path.touch()


def _follower(tmp_path: Path, log: Log) -> FileFollower:
    return FileFollower(log.path, tmp_path / "state" / "pos.json")


def test_first_start_skips_history_then_returns_appended_lines(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    log = Log(tmp_path / "kern.log")
    log.write(5)
    f = _follower(tmp_path, log)
    assert f.read_lines() == []
    new = log.write(3)
    assert f.read_lines() == new
    assert f.read_lines() == []


def test_a_partial_line_waits_for_its_newline(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    log = Log(tmp_path / "kern.log")
    log.path.touch()
    f = _follower(tmp_path, log)
    f.read_lines()
    with log.path.open("a") as fh:
        fh.write("NVRM: Xid (PCI:0000:c1:00): 79, pid=")
    assert f.read_lines() == []
    with log.path.open("a") as fh:
        fh.write("'<unknown>'\r\nnext\n")
    assert f.read_lines() == ["NVRM: Xid (PCI:0000:c1:00): 79, pid='<unknown>'", "next"]


def test_rotation_by_rename_reads_the_old_file_to_its_end_then_the_new_one(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    log = Log(tmp_path / "kern.log")
    log.path.touch()
    f = _follower(tmp_path, log)
    f.read_lines()
    first = log.write(2)
    assert f.read_lines() == first
    late = log.write(2)  # written just before the rotation, not yet read
    log.rotate()
    fresh = log.write(3)
    assert f.read_lines() == late + fresh
    assert f.read_lines() == []


def test_truncation_starts_over(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    log = Log(tmp_path / "kern.log")
    log.path.touch()
    f = _follower(tmp_path, log)
    f.read_lines()
    assert f.read_lines() == [] and log.write(4) == f.read_lines()
    log.path.write_text("")
    after = log.write(2)
    assert f.read_lines() == after


def test_rewrite_in_place_to_a_longer_file_is_noticed(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    log = Log(tmp_path / "kern.log")
    log.path.touch()
    f = _follower(tmp_path, log)
    f.read_lines()
    log.write(2)
    f.read_lines()
    log.path.write_text("")  # copytruncate, then a burst longer than the old file before we look
    after = log.write(6)
    assert f.read_lines() == after


def test_restart_goes_on_where_it_stopped(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    log = Log(tmp_path / "kern.log")
    log.write(3)
    f = _follower(tmp_path, log)
    assert f.read_lines() == []
    first = log.write(2)
    assert f.read_lines() == first
    f.close()

    while_down = log.write(3)
    again = _follower(tmp_path, log)
    assert again.read_lines() == while_down, "a restart neither resends nor skips"
    more = log.write(1)
    assert again.read_lines() == more


def test_rotation_while_stopped_finishes_the_old_file_first(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    log = Log(tmp_path / "kern.log")
    log.path.touch()
    f = _follower(tmp_path, log)
    f.read_lines()
    assert f.read_lines() == [] and (seen := log.write(2)) == f.read_lines()
    f.close()

    unread_old = log.write(2)
    log.rotate()
    new = log.write(2)
    again = _follower(tmp_path, log)
    lines = again.read_lines()
    assert lines == unread_old + new
    assert not set(seen) & set(lines)


def test_everything_together_exactly_once(tmp_path: Path) -> None:
    """Appends, rotations, a truncation and restarts in a row: every line written after the first
    start is returned exactly once, in order."""
    (tmp_path / "state").mkdir()
    log = Log(tmp_path / "kern.log")
    log.write(10)  # history
    written: list[str] = []
    got: list[str] = []
    f = _follower(tmp_path, log)
    got += f.read_lines()
    for step in range(12):
        written += log.write(step % 4 + 1)
        if step % 3 == 0:
            got += f.read_lines()
        if step % 4 == 1:
            log.rotate(f".{step}")
            written += log.write(2)
        if step % 5 == 2:
            got += f.read_lines()
            f.close()
            f = _follower(tmp_path, log)
        if step == 7:
            got += f.read_lines()
            log.path.write_text("")
            written += log.write(1)
    got += f.read_lines()
    assert got == written


def test_a_file_that_appears_later_is_read_from_its_start(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    log = Log(tmp_path / "kern.log")
    f = _follower(tmp_path, log)
    assert f.read_lines() == []
    lines = log.write(3)
    assert f.read_lines() == lines
