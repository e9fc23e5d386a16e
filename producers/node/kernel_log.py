"""The kernel log as ``kernel`` observations: only the lines the kernel parsers recognise.

Three ways in, chosen by ``mode``:

- ``kmsg``: ``/dev/kmsg``, read-only and non-blocking, one record per read.
  The first start skips to the end of the ring buffer; later starts go on
  after the last sequence number seen in the same boot (a new boot is read
  from the start of its buffer: all of it is new).
- ``journal``: ``journalctl -k -f -o short-iso`` as a subprocess; its
  ``--cursor-file`` in the state dir makes a restart go on where the last
  ``journalctl`` stopped (the first start shows no history).
- ``file``: a plain log file (``/var/log/kern.log``...), followed across
  rotation and truncation by :class:`~producers.node.follow.FileFollower`.

Each line whose message :func:`producers.kernel.parse_kernel_line` recognises
(XID, fallen off the bus, PCIe AER, machine check, host OOM) becomes one
observation with the line verbatim, transport prefix included; the rest of
the kernel's chatter is not sent.
"""

from __future__ import annotations

import errno
import logging
import os
import subprocess
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import Field, model_validator

from producers.kernel import parse_kernel_line
from producers.node.follow import FileFollower
from producers.node.state import load_state, save_state
from producers.registry import SourceContext, SourceSettings
from producers.source import Observation, observation

__all__ = ["JournalReader", "KernelLog", "KernelLogSettings", "KmsgReader", "LineReader", "create"]

log = logging.getLogger("faultline.agent.kernel_log")

_KMSG_RECORD_BYTES = 8192  # a /dev/kmsg read returns one record, at most this long
_HISTORY_POLLS = 200  # bounds the skip over the ring buffer at the first start
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


class LineReader(Protocol):
    """A kernel log transport: the lines that arrived since the last call."""

    def read_lines(self) -> list[str]: ...

    def close(self) -> None: ...


class KernelLogSettings(SourceSettings):
    mode: Literal["kmsg", "journal", "file"] = Field("kmsg", description="Where the kernel log is read.")
    path: Path | None = Field(None, description="file mode: the log file; kmsg mode: default /dev/kmsg.")
    interval_s: float = Field(1.0, gt=0, description="Seconds between two reads.")
    journalctl: str = Field("journalctl", description="journal mode: the journalctl executable.")
    max_records: int = Field(5000, gt=0, description="kmsg mode: most records read per poll.")

    @model_validator(mode="after")
    def _file_needs_path(self) -> KernelLogSettings:
        if self.mode == "file" and self.path is None:
            raise ValueError("kernel_log: mode 'file' needs 'path'")
        return self


class KmsgReader:
    """``/dev/kmsg`` records (the first line of each, header included), resumable by sequence number.

    The first start skips the records already in the ring buffer (remembering
    the last one's sequence number); a restart in the same boot goes on after
    the last record read; after a reboot the whole new buffer is news.
    """

    def __init__(self, state_path: Path, path: Path = Path("/dev/kmsg"), max_records: int = 5000) -> None:
        self.state_path = state_path
        self.max_records = max_records
        self._boot = _boot_id()
        self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        saved = load_state(state_path)
        self._seq = int(saved.get("seq", -1)) if saved and saved.get("boot_id") == self._boot else -1
        if saved is None:
            for _ in range(_HISTORY_POLLS):
                if not self._records():
                    break
            self._save()

    def read_lines(self) -> list[str]:
        lines = self._records()
        if lines:
            self._save()
        return lines

    def _records(self) -> list[str]:
        """The first lines of up to ``max_records`` records newer than the last one read."""
        lines: list[str] = []
        for _ in range(self.max_records):
            try:
                record = os.read(self._fd, _KMSG_RECORD_BYTES)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno != errno.EPIPE:
                    raise
                log.warning("/dev/kmsg: records were overwritten before they could be read")
                continue
            if not record:
                break
            seq, line = _kmsg_record(record)
            if seq is not None and seq > self._seq:
                self._seq = seq
                lines.append(line)
        return lines

    def _save(self) -> None:
        save_state(self.state_path, {"boot_id": self._boot, "seq": self._seq})

    def close(self) -> None:
        os.close(self._fd)


def _kmsg_record(record: bytes) -> tuple[int | None, str]:
    """``(sequence number, first line)`` of one ``/dev/kmsg`` record."""
    line = record.decode("utf-8", errors="replace").split("\n", 1)[0]
    fields = line.split(";", 1)[0].split(",")
    try:
        return int(fields[1]), line
    except (IndexError, ValueError):
        return None, line


def _boot_id() -> str:
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return ""


class JournalReader:
    """``journalctl -k -f -o short-iso`` in a subprocess, read without blocking."""

    def __init__(self, cursor_path: Path, journalctl: str = "journalctl") -> None:
        self.cursor_path = cursor_path
        self.journalctl = journalctl
        self._proc: subprocess.Popen[bytes] | None = None
        self._partial = b""

    def _start(self) -> subprocess.Popen[bytes]:
        args = [self.journalctl, "-k", "-f", "-o", "short-iso", "--no-pager", f"--cursor-file={self.cursor_path}"]
        if not self.cursor_path.exists():
            args += ["-n", "0"]  # first start: no history
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        return proc

    def read_lines(self) -> list[str]:
        if self._proc is None:
            self._proc = self._start()
        assert self._proc.stdout is not None
        try:
            data = os.read(self._proc.stdout.fileno(), 1 << 20)
        except BlockingIOError:
            data = b""
        *complete, self._partial = (self._partial + data).split(b"\n")
        if not data and self._proc.poll() is not None:
            rc, self._proc = self._proc.returncode, None
            raise RuntimeError(f"{self.journalctl} exited with status {rc}")
        return [raw.decode("utf-8", errors="replace") for raw in complete]

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.terminate()  # journalctl writes its cursor file on the way out
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()


class _FileReader:
    """A plain log file through :class:`FileFollower` (at most 1 MiB a poll)."""

    def __init__(self, path: Path, state_path: Path) -> None:
        self._follower = FileFollower(path, state_path)

    def read_lines(self) -> list[str]:
        return self._follower.read_lines()

    def close(self) -> None:
        self._follower.close()


class KernelLog:
    """The ``kernel_log`` source: recognised kernel lines from ``reader`` as observations."""

    name = "kernel_log"

    def __init__(self, node: str, reader: LineReader, interval_s: float = 1.0) -> None:
        self.node = node
        self.reader = reader
        self.interval_s = interval_s

    def poll(self, now: datetime) -> list[Observation]:
        return [
            observation("kernel", now, node=self.node, line=line)
            for line in self.reader.read_lines()
            if parse_kernel_line(line) is not None
        ]

    def close(self) -> None:
        self.reader.close()


def create(ctx: SourceContext, settings: Mapping[str, Any]) -> KernelLog | None:
    """The ``kernel_log`` section's factory; ``None`` (logged) when the kernel log cannot be read."""
    cfg = KernelLogSettings.model_validate(settings)
    reader: LineReader
    if cfg.mode == "file":
        assert cfg.path is not None
        reader = _FileReader(cfg.path, ctx.state_path("kernel_log.file.json"))
    elif cfg.mode == "journal":
        reader = JournalReader(ctx.state_path("kernel_log.journal.cursor"), cfg.journalctl)
    else:
        path = cfg.path or Path("/dev/kmsg")
        try:
            reader = KmsgReader(ctx.state_path("kernel_log.kmsg.json"), path, cfg.max_records)
        except OSError as exc:
            log.error("cannot read %s (%s): kernel log off; set kernel_log.mode to journal or file", path, exc)
            return None
    return KernelLog(ctx.node, reader, cfg.interval_s)
