"""Report training progress to faultline from inside the training loop (standard library only).

::

    from producers.jobs.reporter import Reporter

    rep = Reporter(job="llama-70b", rank=int(os.environ["RANK"]))
    for step in ...:
        ...
        rep.step(step, loss.item(), samples_per_s)
        if step % 500 == 0:
            t0 = time.monotonic(); torch.save(state, path)
            rep.checkpoint_saved(step, path, os.path.getsize(path), time.monotonic() - t0)
    rep.close()

Each call writes one ``trainer`` observation (contract, section 1) as a JSON
line to a file that the node agent follows (its ``trainer_file`` source,
:mod:`producers.jobs.trainer_file`) and sends on. A NaN or infinite loss is
written the way Python's ``json`` writes it (``NaN``, ``Infinity``): a loss
that went wrong is news.

Why a file, not Kafka or a socket: the training process needs no broker
address, credentials or client library; lines written while the agent is
restarting are not lost (it resumes where it stopped); and the events topic
carries parsed, validated events, which is the agent's job. Every rank of a
node may share one file: each batch of lines is one ``write`` to a file
opened with ``O_APPEND``, so lines of different processes never interleave.

The path is ``path``, else ``$FAULTLINE_TRAINER_LOG``, else
``./faultline-trainer.jsonl``.

The training loop is never slowed down or broken by reporting: a call only
puts the line on a bounded queue (a full queue drops the line and counts it
in :attr:`Reporter.dropped`), a background thread writes, and no method
raises (a failed write is counted in :attr:`Reporter.errors` and logged
once). :meth:`Reporter.close` (also run at interpreter exit) writes what is
queued, within a deadline.

**Asked to checkpoint now** (issue 29): :meth:`Reporter.checkpoint_requested`,
polled by the loop at a step boundary, says True once per request that
faultline's ``checkpoint_now`` command made (:class:`CheckpointRequests`).
The control path is a file, watched by its modification time: one ``stat``
per poll, no thread, no port, no broker -- it works under every scheduler (Slurm's batch trap
``touch``-es it, a webhook hook writes it, a person can too) and survives the job's restart. On
Kubernetes it is the pod's downward-API ``annotations`` file (:class:`CheckpointRequests`). HTTP would need
a listening port per rank and a way to reach it through the scheduler's
network; Kafka, a client library and credentials inside the training image.

This module imports nothing outside the standard library, so it can also be
copied as a single file into a training image that does not have faultline.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import queue
import re
import socket
import threading
import time
import weakref
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["CHECKPOINT_ANNOTATION", "CONTROL_ENV", "DEFAULT_CONTROL", "DEFAULT_PATH", "PATH_ENV",
           "CheckpointRequests", "Reporter", "parse_annotations", "request_checkpoint"]

PATH_ENV = "FAULTLINE_TRAINER_LOG"
DEFAULT_PATH = "faultline-trainer.jsonl"
CONTROL_ENV = "FAULTLINE_CHECKPOINT_NOW"
DEFAULT_CONTROL = "faultline-checkpoint-now"
_MAX_REQUEST = 4096  # bytes of a request file read (its JSON: the command id and why); the rest is ignored
CHECKPOINT_ANNOTATION = "faultline.io/checkpoint-now"  # its value: the id of the command that asks
_REASON_ANNOTATION = "faultline.io/checkpoint-reason"
_MAX_ANNOTATIONS = 1 << 20  # bytes of a downward-API annotations file read (the API allows 256 KiB, quoted)
_GO_ESCAPE = re.compile(r'\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-7]{3}|.)', re.S)
_GO_CHARS = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92, '"': 34, "'": 39}

log = logging.getLogger("faultline.reporter")

_STOP = object()
_BATCH = 256  # lines written with one write()


def _number(value: Any) -> float | None:
    """A float for JSON (NaN and infinities kept: ``json`` writes them as ``NaN``, ``Infinity``),
    or None. Accepts anything ``float()`` takes, such as a one-element tensor."""
    return None if value is None else float(value)


def _node() -> str:
    return os.environ.get("FAULTLINE_NODE") or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


class CheckpointRequests:
    """Requests to save a checkpoint now, as a file under the job's directory, watched by its mtime.

    The rule: a request is the file's modification time moving past the last one seen; :meth:`poll`
    returns it once (its JSON content, ``{}`` if it is not JSON -- a bare ``touch`` is a request), then
    None until the next. A file already there when the listener starts is an old request: not one.
    Every rank may poll: in a synchronous job rank 0 should decide and tell the others (the example
    all-reduces the answer) so that all ranks save at the same step. :meth:`poll` never raises.
    The path is ``path``, else ``$FAULTLINE_CHECKPOINT_NOW``, else ``./faultline-checkpoint-now``.

    **A Kubernetes downward-API file**: a path named ``annotations`` is read as the pod's
    ``metadata.annotations`` projected by the kubelet (lines ``key="value"``, Go-quoted), which the kubelet
    rewrites (a symlink swap: a new inode) whenever *any* annotation changes. There a request is a change
    of the ``faultline.io/checkpoint-now`` annotation's value to a new one (the executor sets it to the
    command's id); :meth:`poll` returns ``{"command": <id>, "reason": <faultline.io/checkpoint-reason>}``.
    Other annotation changes, the annotation's removal, and its value when the listener starts are not requests.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path or os.environ.get(CONTROL_ENV) or DEFAULT_CONTROL)
        self.downward = self.path.name == "annotations"
        self.seen = self._mtime()  # before the read: a change between the two is seen at the next poll
        self.value: str | None = None  # the annotation's value last read
        with contextlib.suppress(OSError):
            self.value = self._annotations().get(CHECKPOINT_ANNOTATION) if self.downward else None

    def _mtime(self) -> tuple[int, int] | None:
        """Its modification time, with its inode: a request written by renaming is new even within one tick
        of a coarse clock (a file system keeping whole seconds)."""
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_ino

    def poll(self) -> dict[str, Any] | None:
        """The request made since the last poll, or None."""
        mtime = self._mtime()
        if mtime is None or mtime == self.seen:
            return None
        last, self.seen = self.seen, mtime
        if self.downward:
            try:
                annotations = self._annotations()
            except OSError:  # read again at the next poll
                self.seen = last
                return None
            value, before = annotations.get(CHECKPOINT_ANNOTATION), self.value
            self.value = value
            if value is None or value == before:
                return None
            return {"command": value, "reason": annotations.get(_REASON_ANNOTATION, "")}
        try:
            with open(self.path, "rb") as f:
                body = json.loads(f.read(_MAX_REQUEST) or b"{}")
        except (OSError, ValueError):
            body = {}
        return body if isinstance(body, dict) else {}

    def _annotations(self) -> dict[str, str]:
        """The downward-API file's annotations (OSError when it cannot be read)."""
        with open(self.path, "rb") as f:
            return parse_annotations(f.read(_MAX_ANNOTATIONS).decode("utf-8", "replace"))


def parse_annotations(text: str) -> dict[str, str]:
    """A downward-API ``metadata.annotations`` (or ``labels``) file: one ``key="value"`` a line, the value
    quoted as Go's ``%q`` does (the kubelet's ``fieldpath.FormatMap``). Lines that are not so are skipped."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, quoted = line.partition("=")
        value = _go_unquote(quoted) if sep else None
        if key and value is not None:
            found[key] = value
    return found


def _go_unquote(quoted: str) -> str | None:
    """The string a Go double-quoted literal stands for (escapes \\n, \\", \\xNN, \\uNNNN...), or None."""
    if len(quoted) < 2 or quoted[0] != '"' or quoted[-1] != '"':
        return None
    body, out, pos = quoted[1:-1], bytearray(), 0
    try:
        for m in _GO_ESCAPE.finditer(body):
            out += body[pos:m.start()].encode("utf-8", "surrogatepass")
            code, pos = m.group(1), m.end()
            if code[0] in "xuU" and len(code) > 1:
                out += bytes([int(code[1:], 16)]) if code[0] == "x" else chr(int(code[1:], 16)).encode("utf-8")
            elif len(code) == 3:
                out.append(int(code, 8) & 0xFF)
            else:
                out.append(_GO_CHARS[code])
    except (KeyError, ValueError, UnicodeEncodeError):
        return None
    out += body[pos:].encode("utf-8", "surrogatepass")
    return out.decode("utf-8", "replace")


def request_checkpoint(path: str | os.PathLike[str], command: str = "", reason: str = "") -> None:
    """Ask the job whose control file is ``path`` to checkpoint now (what an executor's hook runs):
    the request is written whole (a temporary file renamed over it), so a poll never reads half of it."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"command": command, "reason": reason, "ts": datetime.now(UTC).isoformat()}),
                   encoding="utf-8")
    os.replace(tmp, target)


class Reporter:
    """``trainer`` observations of one rank of one job, written in the background.

    ``job`` and ``rank`` name the process (as the scheduler and torchrun name
    them); ``node`` defaults to ``$FAULTLINE_NODE``, ``$SLURMD_NODENAME`` or
    the short host name. ``max_queue`` bounds the lines waiting to be written.
    """

    def __init__(
        self,
        job: str,
        rank: int,
        node: str | None = None,
        *,
        path: str | os.PathLike[str] | None = None,
        max_queue: int = 10_000,
    ) -> None:
        self.job = str(job)
        self.rank = int(rank)
        self.node = node or _node()
        self.path = Path(path or os.environ.get(PATH_ENV) or DEFAULT_PATH)
        self.dropped = 0
        self.errors = 0
        self._queue: queue.Queue[object] = queue.Queue(maxsize=max_queue)
        self._done = threading.Condition()
        self._enqueued = 0
        self._written = 0  # lines handled by the writer (written or failed)
        self._closed = False
        self._fd: int | None = None
        self._inode: int | None = None
        self._requests: CheckpointRequests | None = None
        self._thread = threading.Thread(target=self._run, name="faultline-reporter", daemon=True)
        self._thread.start()
        atexit.register(_close_at_exit, weakref.ref(self))

    # --- what the training loop calls -----------------------------------------------------

    def step(self, step: int, loss: Any = None, samples_per_s: Any = None) -> None:
        """One training step done: its ``loss`` (NaN/inf allowed) and throughput."""
        self._emit("step", lambda: {"step": int(step), "loss": _number(loss), "samples_per_s": _number(samples_per_s)})

    def checkpoint_saved(self, step: int, path: str | os.PathLike[str], bytes: int | None = None,
                         seconds: float | None = None) -> None:
        """A checkpoint of ``step`` written to ``path``: its size and how long it took."""
        self._emit("checkpoint_saved", lambda: {
            "step": int(step), "path": os.fspath(path),
            "bytes": int(bytes) if bytes is not None else None, "seconds": _number(seconds),
        })

    def checkpoint_failed(self, step: int | None, path: str | os.PathLike[str] | None, error: object) -> None:
        """Writing the checkpoint of ``step`` to ``path`` failed with ``error`` (an exception or text)."""
        self._emit("checkpoint_failed", lambda: {
            "step": int(step) if step is not None else None,
            "path": os.fspath(path) if path is not None else None,
            "error": f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else str(error),
        })

    def checkpoint_loaded(self, step: int | None, path: str | os.PathLike[str] | None) -> None:
        """Training resumed from the checkpoint of ``step`` at ``path``."""
        self._emit("checkpoint_loaded", lambda: {
            "step": int(step) if step is not None else None,
            "path": os.fspath(path) if path is not None else None,
        })

    def checkpoint_requested(self, control: str | os.PathLike[str] | None = None) -> bool:
        """Whether faultline asked for a checkpoint since the last call (poll it at a step boundary; the
        first call starts listening, on ``control`` or :class:`CheckpointRequests`'s default). Never raises."""
        try:
            if self._requests is None:
                self._requests = CheckpointRequests(control)
                return False
            return self._requests.poll() is not None
        except Exception:  # never into the training loop
            self.errors += 1
            return False

    def heartbeat(self) -> None:
        """The loop is alive (between steps that take long)."""
        self._emit("heartbeat", dict)

    # --- lifecycle -----------------------------------------------------------------------

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every line reported so far is written; False if ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        with self._done:
            target = self._enqueued
            while self._written < target:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._done.wait(left)
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued (within ``timeout``) and stop; later calls are ignored."""
        if self._closed:
            return
        self._closed = True
        self.flush(timeout)
        try:
            self._queue.put(_STOP, timeout=max(0.0, timeout))
        except queue.Full:
            return
        self._thread.join(timeout)

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- internals -------------------------------------------------------------------------

    def _emit(self, event: str, fields: Any) -> None:
        try:
            if self._closed:
                return
            line = {
                "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
                "source": "trainer", "job": self.job, "rank": self.rank, "node": self.node,
                "event": event, **{k: v for k, v in fields().items() if v is not None},
            }
            data = (json.dumps(line) + "\n").encode("utf-8")
            with self._done:
                self._queue.put_nowait(data)
                self._enqueued += 1
        except queue.Full:
            self.dropped += 1
        except Exception:  # never into the training loop
            self.errors += 1
            if self.errors == 1:
                log.exception("faultline reporter: cannot report %s", event)

    def _run(self) -> None:
        stopping = False
        while not stopping:
            batch: list[bytes] = []
            item = self._queue.get()
            while True:
                if item is _STOP:
                    stopping = True
                    break
                if isinstance(item, bytes):
                    batch.append(item)
                if len(batch) >= _BATCH:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if batch:
                self._write(b"".join(batch))
            with self._done:
                self._written += len(batch)
                self._done.notify_all()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _write(self, data: bytes) -> None:
        try:
            fd = self._open()
            os.write(fd, data)
        except Exception:
            self.errors += 1
            if self.errors == 1:
                log.exception("faultline reporter: cannot write %s", self.path)
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _open(self) -> int:
        """The file, reopened when the agent rotated or removed it."""
        try:
            inode: int | None = os.stat(self.path).st_ino
        except FileNotFoundError:
            inode = None
        if self._fd is not None and inode == self._inode:
            return self._fd
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._inode = os.fstat(self._fd).st_ino
        return self._fd


def _close_at_exit(ref: weakref.ref[Reporter]) -> None:
    reporter = ref()
    if reporter is not None:
        reporter.close(timeout=2.0)
