"""A simulated power cut: after a kill -9, lose exactly what a real one may lose -- what was never synced.

A kill -9 keeps the page cache; a power cut does not. To know what a power cut may take, the
process under test records every sync it completes (:func:`journal_syncs`, installed in that
process before it starts): ``fsync``/``fdatasync`` of a file records the file's size at that
moment (everything up to it is on disk), ``fsync`` of a directory records its entries and the
contents of its small state files (the names, and the renames, that are on disk). After the
kill, :func:`cut_power` applies the loss, drawn from a seeded ``random.Random``:

* a file created after its directory's last sync vanishes (its entry was never on disk);
* a small state file (``*.json``) goes back to its content at its directory's last sync;
* in every other file, the bytes past its last synced size are cut at a random point, and
  what is left there is kept, zeroed or replaced by random bytes (newlines included): a torn
  write, unwritten blocks, or garbage.

Nothing that was synced is touched, so a process that synced before saying "stored" loses
nothing it said it stored -- and one that did not is caught.
"""

from __future__ import annotations

import json
import os
import random
import signal
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PowerCut", "cut_power", "journal_syncs"]

_STATE_FILE_MAX = 4096


def journal_syncs(journal: Path, crash_before_datasync: int = 0) -> None:
    """In the process under test: record every completed ``os.fsync``/``os.fdatasync`` in ``journal``.

    ``crash_before_datasync=N`` (N > 0): the process SIGKILLs itself in its N-th ``fdatasync``,
    before syncing -- the fault point where written data is in the page cache only.
    """
    out = open(journal, "a", buffering=1, encoding="utf-8")  # one write per line: a kill keeps whole lines
    real: dict[str, Callable[[int], None]] = {"fsync": os.fsync, "fdatasync": os.fdatasync}
    datasyncs = [0]

    def record(fd: int, kind: str) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        st = os.fstat(fd)
        entry: dict[str, Any] = {"kind": kind, "path": path}
        if stat.S_ISDIR(st.st_mode):
            names = sorted(os.listdir(path))
            entry["entries"] = names
            entry["files"] = {n: (Path(path) / n).read_text() for n in names if n.endswith(".json")
                              and (Path(path) / n).stat().st_size <= _STATE_FILE_MAX}
        else:
            entry["size"] = st.st_size
        out.write(json.dumps(entry) + "\n")

    def fsync(fd: int) -> None:
        real["fsync"](fd)
        record(fd, "fsync")

    def fdatasync(fd: int) -> None:
        datasyncs[0] += 1
        if datasyncs[0] == crash_before_datasync:
            os.kill(os.getpid(), signal.SIGKILL)
        real["fdatasync"](fd)
        record(fd, "fdatasync")

    os.fsync = fsync
    os.fdatasync = fdatasync


@dataclass
class PowerCut:
    """What :func:`cut_power` took."""

    vanished: list[str] = field(default_factory=list)
    reverted: list[str] = field(default_factory=list)
    cut: dict[str, tuple[int, int, str]] = field(default_factory=dict)  # name -> (kept, of, how)

    @property
    def bytes_lost(self) -> int:
        return sum(size - kept for kept, size, _ in self.cut.values())

    def __str__(self) -> str:
        cuts = ", ".join(f"{n}: kept {k}/{s} ({how})" for n, (k, s, how) in sorted(self.cut.items()))
        return (f"power cut: {self.bytes_lost} unsynced bytes lost [{cuts or 'nothing unsynced'}]"
                f"{'; vanished ' + str(self.vanished) if self.vanished else ''}"
                f"{'; reverted ' + str(self.reverted) if self.reverted else ''}")


def _journal(path: Path) -> list[dict[str, Any]]:
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
        try:
            entries.append(json.loads(line))
        except ValueError:
            pass  # the kill cut the last line short
    return entries


def cut_power(directory: Path, journal: Path, rng: random.Random) -> PowerCut:
    """Apply a power cut's losses to the files of ``directory`` (see the module docstring)."""
    directory = directory.resolve()
    entries = _journal(journal)
    synced: dict[str, int] = {}
    listing: dict[str, Any] | None = None
    for e in entries:
        if "size" in e:
            synced[e["path"]] = max(synced.get(e["path"], 0), int(e["size"]))
        elif Path(e["path"]) == directory:
            listing = e
    result = PowerCut()
    for f in sorted(p for p in directory.iterdir() if p.is_file()):
        if listing is None or f.name not in listing["entries"]:
            f.unlink()
            result.vanished.append(f.name)
            continue
        if f.name in listing["files"]:
            if f.read_text() != listing["files"][f.name]:
                f.write_text(listing["files"][f.name])
                result.reverted.append(f.name)
            continue
        durable, size = synced.get(str(f), 0), f.stat().st_size
        if size <= durable:
            continue
        keep = rng.randint(durable, size)
        how = rng.choice(["torn", "zeros", "garbage"])
        data = bytearray(f.read_bytes()[:size])
        if how == "torn":
            data = data[:keep]
        elif how == "zeros":
            data[keep:] = bytes(size - keep)
        else:
            data[keep:] = bytes(rng.choice(b"\n{}\":,ab01 \x00\xff") for _ in range(size - keep))
        f.write_bytes(bytes(data))
        result.cut[f.name] = (keep, size, how)
    return result
