"""torchelastic worker failures as ``torchelastic`` observations.

torchrun gives each worker a ``TORCHELASTIC_ERROR_FILE``; a worker whose main
is wrapped in ``@record`` writes its exception there as JSON before it exits.
With ``torchrun --log-dir DIR`` the files sit at
``DIR/<run_id>_<random>/attempt_<n>/<local_rank>/error.json``.
:class:`TorchelasticWatch` scans a directory for such files and reports each
new one once, the JSON object as-is in ``error_file``, with:

- ``rank`` = ``rank_base`` + the local rank (the name of the file's folder,
  when it is a number); ``rank_base`` is the global rank of local rank 0 on
  this node (``node_rank x nproc_per_node``);
- ``exitcode`` = ``exitcode`` from the config (default 1: what a worker exits
  with after ``@record`` re-raised its exception);
- ``ts`` = the ``timestamp`` torchelastic wrote in the file (else the file's
  modification time), never later than now.

Which files were reported is kept in the agent's state dir, so a restart
reports exactly the files that appeared meanwhile; the very first start
takes the files already there as history (``report_existing`` says
otherwise). A file that is not valid JSON yet is given ``settle_s`` to be
finished, then reported as its raw text.

A worker that died without an error file (a signal, ``os._exit``) is
reported with :func:`worker_exit`, e.g. by whatever saw its exit status.
"""

from __future__ import annotations

import json
import logging
import signal as signals
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import Field

from producers.jobs.identity import JobIdentity
from producers.node.state import load_state, save_state
from producers.registry import SourceContext, SourceSettings
from producers.source import Observation, observation

__all__ = ["TorchelasticWatch", "TorchelasticWatchSettings", "create", "worker_exit"]

log = logging.getLogger("faultline.agent.torchelastic")

_MAX_FILE_BYTES = 1 << 20


def worker_exit(
    job: str,
    node: str,
    rank: int | None,
    now: datetime,
    exitcode: int | None = None,
    signal: int | str | None = None,
    error_file: object = None,
    local_rank: int | None = None,
) -> Observation:
    """A ``torchelastic`` observation of one worker's exit: its ``exitcode``, or the ``signal``
    that killed it (``9``, ``"SIGKILL"``; written as ``exitcode = -9``), ``error_file`` or null."""
    if signal is not None:
        number = signals.Signals[signal].value if isinstance(signal, str) else int(signal)
        exitcode = -abs(number)
    if exitcode is None:
        raise ValueError("worker_exit needs an exitcode or a signal")
    fields: dict[str, Any] = {"job": job, "node": node}
    if rank is not None:
        fields["rank"] = rank
    if local_rank is not None:
        fields["local_rank"] = local_rank
    return observation("torchelastic", now, **fields, exitcode=exitcode, error_file=error_file)


class TorchelasticWatchSettings(SourceSettings):
    directory: Path = Field(description="Where the workers' error files are written (torchrun --log-dir).")
    pattern: str = Field("**/error.json", description="Glob of error files under the directory.")
    job: str | None = Field(None, description="The job; else from the environment (see identity).")
    node: str | None = Field(None, description="The node; else the agent's node name.")
    rank_base: int = Field(0, ge=0, description="Global rank of local rank 0 on this node.")
    exitcode: int = Field(1, description="Exit code reported with an error file.")
    report_existing: bool = Field(False, description="First start: report files already there too.")
    settle_s: float = Field(5.0, ge=0, description="How long a file may stay invalid JSON (being written).")
    interval_s: float = Field(2.0, gt=0, description="Seconds between two scans.")
    max_files: int = Field(100, gt=0, description="Most new files reported per scan.")


def _key(path: Path, mtime_ns: int, inode: int) -> str:
    return f"{path}|{inode}|{mtime_ns}"


def _local_rank(path: Path) -> int | None:
    name = path.parent.name
    return int(name) if name.isdigit() else None


def _when(error_file: object, mtime: float, now: datetime) -> datetime:
    """The failure's time: the file's own ``timestamp``, else its mtime; never after ``now``."""
    ts: float = mtime
    message = error_file.get("message") if isinstance(error_file, dict) else None
    extra = message.get("extraInfo") if isinstance(message, dict) else None
    stamp = extra.get("timestamp") if isinstance(extra, dict) else None
    try:
        ts = float(stamp) if stamp is not None else mtime
    except (TypeError, ValueError):
        pass
    try:
        when = datetime.fromtimestamp(ts, UTC)
    except (OverflowError, OSError, ValueError):
        return now
    return min(when, now)


class TorchelasticWatch:
    """The ``torchelastic`` source: each new error file under ``directory``, reported once."""

    def __init__(
        self,
        identity: JobIdentity,
        directory: Path,
        *,
        pattern: str = "**/error.json",
        rank_base: int = 0,
        exitcode: int = 1,
        settle_s: float = 5.0,
        state_path: Path | None = None,
        report_existing: bool = False,
        interval_s: float = 2.0,
        max_files: int = 100,
        name: str = "torchelastic",
    ) -> None:
        self.identity = identity
        self.directory = Path(directory)
        self.pattern = pattern
        self.rank_base = rank_base
        self.exitcode = exitcode
        self.settle_s = settle_s
        self.state_path = state_path
        self.interval_s = interval_s
        self.max_files = max_files
        self.name = name
        saved = load_state(state_path) if state_path is not None else None
        if saved is not None:
            self._seen = {str(k) for k in saved.get("reported", [])}
        else:
            self._seen = set() if report_existing else {key for key, _ in self._scan()}
            self._save()

    def _scan(self) -> list[tuple[str, Path]]:
        found: list[tuple[str, Path]] = []
        if not self.directory.is_dir():
            return found
        for path in sorted(self.directory.glob(self.pattern)):
            try:
                st = path.stat()
            except OSError:
                continue  # removed meanwhile
            if path.is_file():
                found.append((_key(path, st.st_mtime_ns, st.st_ino), path))
        return found

    def poll(self, now: datetime) -> list[Observation]:
        out: list[Observation] = []
        present: set[str] = set()
        for key, path in self._scan():
            present.add(key)
            if key in self._seen or len(out) >= self.max_files:
                continue
            obs = self._report(path, now)
            if obs is not None:
                out.append(obs)
                self._seen.add(key)
        if out or not self._seen <= present:
            self._seen &= present  # forget files that are gone: the state stays small
            self._save()
        return out

    def _report(self, path: Path, now: datetime) -> Observation | None:
        try:
            mtime = path.stat().st_mtime
            with path.open("rb") as fh:
                raw = fh.read(_MAX_FILE_BYTES)
        except OSError as exc:
            log.warning("cannot read %s: %s", path, exc)
            return None
        text = raw.decode("utf-8", errors="replace")
        try:
            error_file: object = json.loads(text)
        except ValueError:
            if now.timestamp() - mtime < self.settle_s:
                return None  # still being written: look again next scan
            error_file = text
        local_rank = _local_rank(path)
        return worker_exit(
            self.identity.job,
            self.identity.node,
            self.rank_base + local_rank if local_rank is not None else self.identity.rank,
            _when(error_file, mtime, now),
            exitcode=self.exitcode,
            error_file=error_file,
            local_rank=local_rank,
        )

    def _save(self) -> None:
        if self.state_path is not None:
            save_state(self.state_path, {"reported": sorted(self._seen)})

    def close(self) -> None:
        """Nothing held open between scans."""


def create(ctx: SourceContext, settings: Mapping[str, Any]) -> TorchelasticWatch:
    """The ``torchelastic`` section's factory."""
    cfg = TorchelasticWatchSettings.model_validate(settings)
    return TorchelasticWatch(
        JobIdentity.resolve(job=cfg.job, node=cfg.node or ctx.node),
        cfg.directory,
        pattern=cfg.pattern,
        rank_base=cfg.rank_base,
        exitcode=cfg.exitcode,
        settle_s=cfg.settle_s,
        state_path=ctx.state_path("torchelastic.json"),
        report_existing=cfg.report_existing,
        interval_s=cfg.interval_s,
        max_files=cfg.max_files,
    )
