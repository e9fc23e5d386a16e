"""The parsers' fuzz corpus: every entry point, its documented outcomes, and how to grow the corpus.

Every file in ``fuzz_corpus/`` is one input. Its name says what
:func:`~producers.capture.parse_capture_line` must make of it:
``events--NAME`` (one event or more), ``none--NAME`` (a good line that says
nothing), ``KIND--NAME`` (refused as that kind of bad input, one of
``producers.capture.BAD_KINDS``) or ``any--NAME`` (found by fuzzing: any
documented outcome). ``tests/producers/test_fuzz_corpus.py`` runs every file
through every entry point (:data:`ENTRY_POINTS`) and checks the outcome is a
documented one: events or :class:`~producers.capture.BadInput` from the
capture parser, a body or ``None`` from the per-source parsers, ``ValueError``
where a parser documents it; never another exception.

Grow the corpus (hypothesis, mutating the files already there)::

    .venv/bin/python -m tests.producers.fuzz --grow --examples 5000

It keeps an input when it gives an outcome no file gives yet (a new BadInput
kind and reason, a new set of event kinds, a new per-source result), as
``any--<hash>``, and stops with the input (saved as ``crash--<hash>``, shrunk)
at the first undocumented exception: fix the parser, rename the file to what
it should give, commit both. ``--seed`` rewrites the seed files from the
public scenarios and ``faultline.bench.bad_input``. Inputs are at most
:data:`MAX_INPUT_BYTES`; keep the corpus under 1 MB.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import logging
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from producers.bmc.sel import parse_sel_line
from producers.capture import BAD_KINDS, BadInput, parse_capture_line
from producers.capture.reader import OversizedLine, read_capture_lines
from producers.capture.screen import Accepted, CaptureScreen, Refused
from producers.framework.torch_lines import parse_framework_line
from producers.framework.torchelastic import parse_worker_failure
from producers.jobs.trainer_file import parse_trainer_line
from producers.kernel import parse_kernel_line, strip_prefix
from producers.scheduler.hostlist import expand_hostlist
from producers.scheduler.scontrol_text import parse_records
from streams.events import Event
from tests.harness.shared import SCENARIOS

__all__ = ["CORPUS", "ENTRY_POINTS", "MAX_INPUT_BYTES", "corpus_files", "expected", "outcomes"]

CORPUS = Path(__file__).resolve().parent / "fuzz_corpus"
MAX_INPUT_BYTES = 16_384


class Undocumented(AssertionError):
    """An entry point gave an outcome its documentation does not allow."""


def _body(value: object, *types: type) -> str:
    """The outcome of a per-source parser: ``None`` or a body that can go on the bus."""
    if value is None:
        return "none"
    if not isinstance(value, BaseModel) or (types and not isinstance(value, types)):
        raise Undocumented(f"not a body: {value!r:.200}")
    value.model_dump_json()
    return type(value).__name__


def _texts(data: bytes) -> Iterator[str]:
    """The input as text, and the string fields of its JSON object (what a capture line hands each parser)."""
    text = data.decode("utf-8", "replace")
    yield text
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return
    if isinstance(obj, dict):
        for key in ("line", "sel", "error_file", "event"):
            if isinstance(obj.get(key), str):
                yield obj[key]


def _capture(data: bytes) -> str:
    try:
        events = parse_capture_line(data)
    except BadInput as exc:
        if exc.kind not in BAD_KINDS or not exc.reason or str(exc) != exc.reason:
            raise Undocumented(f"BadInput without a reason or kind: {exc.kind!r} {exc.reason!r}") from None
        return f"bad:{exc.kind}:{_template(exc.reason)}"
    if not isinstance(events, list) or not all(isinstance(e, Event) for e in events):
        raise Undocumented(f"not a list of events: {events!r:.200}")
    for e in events:  # every event goes on the bus and comes back the same
        if Event.model_validate_json(e.model_dump_json()).id != e.id:
            raise Undocumented("an event does not survive JSON")
    return "events:" + ",".join(e.kind for e in events) if events else "none"


def _screen(data: bytes) -> str:
    lines = list(read_capture_lines(io.BytesIO(data), max_bytes=256))
    if not all(isinstance(x, bytes | OversizedLine) for x in lines):
        raise Undocumented("the reader gave something else than lines")
    if b"".join(x for x in lines if isinstance(x, bytes)) != data and not any(
            isinstance(x, OversizedLine) for x in lines):
        raise Undocumented("the reader lost bytes")
    verdicts = list(CaptureScreen().screen(lines))
    if [v.line for v in verdicts] != list(range(1, len(lines) + 1)):
        raise Undocumented("the screen did not give one verdict per line, in order")
    if not all(isinstance(v, Accepted | Refused) for v in verdicts):
        raise Undocumented("a verdict is neither accepted nor refused")
    return f"lines:{len(lines)}"


def _worker_failure(data: bytes) -> str:
    out = []
    for text in _texts(data):
        for error_file in (text, _json_or_none(text)):
            exit_, cause = parse_worker_failure(1, error_file)
            out.append(_body(exit_) + "+" + _body(cause))
    return "|".join(sorted(set(out)))


def _json_or_none(text: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _per_text(parse: Callable[[str], object], *types: type) -> Callable[[bytes], str]:
    def run(data: bytes) -> str:
        return "|".join(sorted({_body(parse(text), *types) for text in _texts(data)}))
    return run


def _trainer(data: bytes) -> str:
    out = parse_trainer_line(data.decode("utf-8", "replace"))
    if out is not None and not (isinstance(out, dict) and out.get("source") == "trainer"):
        raise Undocumented(f"not a trainer observation: {out!r:.200}")
    return "none" if out is None else "observation"


def _hostlist(data: bytes) -> str:
    try:
        hosts = expand_hostlist(data.decode("utf-8", "replace")[:200])
    except ValueError:
        return "ValueError"  # documented: a malformed host list
    if not all(isinstance(h, str) for h in hosts):
        raise Undocumented("a host that is not a string")
    return "hosts" if hosts else "empty"


def _scontrol(data: bytes) -> str:
    records = parse_records(data.decode("utf-8", "replace"), "JobId")
    return f"records:{min(len(records), 3)}"


def _prefix(data: bytes) -> str:
    text = data.decode("utf-8", "replace")
    if not isinstance(strip_prefix(text), str):
        raise Undocumented("strip_prefix gave no text")
    return "text"


#: Every parser entry point with its documented-outcome check; each returns a short outcome signature.
ENTRY_POINTS: dict[str, Callable[[bytes], str]] = {
    "parse_capture_line": _capture,
    "capture_screen": _screen,
    "parse_kernel_line": _per_text(parse_kernel_line),
    "parse_framework_line": _per_text(parse_framework_line),
    "parse_sel_line": _per_text(parse_sel_line),
    "parse_worker_failure": _worker_failure,
    "parse_trainer_line": _trainer,
    "expand_hostlist": _hostlist,
    "parse_records": _scontrol,
    "strip_prefix": _prefix,
}


def _template(reason: str) -> str:
    """A reason without its particulars (quoted values, numbers), to tell outcomes apart."""
    return re.sub(r"\d+", "N", re.sub(r"'[^']*'|\"[^\"]*\"", "Q", reason))[:60]


def outcomes(data: bytes) -> dict[str, str]:
    """The outcome signature of every entry point; raises :class:`Undocumented` (or anything else) on a bug."""
    return {name: run(data) for name, run in ENTRY_POINTS.items()}


def corpus_files() -> list[Path]:
    return sorted(p for p in CORPUS.iterdir() if p.is_file() and "--" in p.name)


def expected(path: Path) -> str:
    """What the file's name says parse_capture_line must make of it."""
    return path.name.split("--", 1)[0]


# --- growing ----------------------------------------------------------------------------------


def _save(prefix: str, data: bytes) -> Path:
    path = CORPUS / f"{prefix}--{hashlib.sha256(data).hexdigest()[:12]}"
    path.write_bytes(data)
    return path


def grow(examples: int) -> int:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    seeds = [p.read_bytes() for p in corpus_files()]
    known = {json.dumps(outcomes(s), sort_keys=True) for s in seeds}
    added: list[Path] = []
    crash: list[bytes] = []

    def mutate(draw: Any, data: bytes) -> bytes:
        for _ in range(draw(st.integers(1, 4))):
            op = draw(st.sampled_from(["flip", "insert", "delete", "splice", "json"]))
            pos = draw(st.integers(0, len(data)))
            if op == "flip" and data:
                i = min(pos, len(data) - 1)
                data = data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1:]
            elif op == "insert":
                data = data[:pos] + draw(st.binary(max_size=8)) + data[pos:]
            elif op == "delete":
                data = data[:pos] + data[pos + draw(st.integers(1, 16)):]
            elif op == "splice":
                other = draw(st.sampled_from(seeds))
                data = data[:pos] + other[draw(st.integers(0, len(other))):]
            else:
                data = _json_mutation(draw, data)
        return data[:MAX_INPUT_BYTES]

    def _json_mutation(draw: Any, data: bytes) -> bytes:
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError):
            return data
        if not isinstance(obj, dict) or not obj:
            return data
        key = draw(st.sampled_from(sorted(obj)))
        value = draw(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
                     | st.sampled_from(["", "2026-04-22T03:00:00Z", "2099-01-01T00:00:00Z", [], {}]))
        return json.dumps({**obj, key: value}).encode()

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def explore(data: Any) -> None:
        raw = mutate(data.draw, data.draw(st.sampled_from(seeds)))
        try:
            signature = json.dumps(outcomes(raw), sort_keys=True)
        except Exception:
            crash[:] = [raw]  # hypothesis shrinks, and replays the smallest failing input last
            raise
        if signature not in known:
            known.add(signature)
            added.append(_save("any", raw))

    try:
        explore()
    except Exception as exc:  # noqa: BLE001 - reported with the input that caused it
        path = _save("crash", crash[0]) if crash else None
        print(f"undocumented outcome: {exc!r}\ninput saved as {path}", file=sys.stderr)
        return 1
    size = sum(p.stat().st_size for p in corpus_files())
    print(f"{len(added)} inputs added; corpus {len(corpus_files())} files, {size:,} bytes", file=sys.stderr)
    return 0


_TS = '{"ts": "2026-04-22T03:00:00Z", '
#: Hand-made inputs for corners the scenarios do not reach: (expected, name, bytes).
_CORNERS: list[tuple[str, str, bytes]] = [
    ("not_json", "deep_nesting", b"[" * 5000 + b"]" * 5000),
    ("not_json", "huge_integer", (_TS + '"source": "trainer", "job": "j", "event": "step", "step": ').encode()
     + b"9" * 5000 + b"}"),
    ("not_json", "bom_prefixed", b"\xef\xbb\xbf" + (_TS + '"source": "node_agent", "node": "n", "alive": true}').encode()),
    ("not_json", "nul_byte", (_TS + '"source": "node_agent", "node": "n", "alive": true}').encode() + b"\x00"),
    ("events", "crlf_ending", (_TS + '"source": "node_agent", "node": "n", "alive": true}\r\n').encode()),
    ("events", "nan_loss", (_TS + '"source": "trainer", "job": "j", "event": "step", "step": 3, "loss": NaN}').encode()),
    ("events", "infinity_loss",
     (_TS + '"source": "trainer", "job": "j", "event": "step", "step": 3, "loss": -Infinity}').encode()),
    ("events", "unicode_node", (_TS + r'"source": "node_agent", "node": "n\u00e9\ud83d\ude00", "alive": true}').encode()),
    ("events", "kmsg_xid", json.dumps({"ts": "2026-04-22T03:00:00Z", "source": "kernel", "node": "n",
                                       "line": "4,1234,567890,-;NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE"}).encode()),
    ("events", "syslog_gpu_lost", json.dumps({
        "ts": "2026-04-22T03:00:00Z", "source": "kernel", "node": "n",
        "line": "Apr 22 03:14:17 n01 kernel: NVRM: GPU at PCI:0000:c1:00: GPU has fallen off the bus."}).encode()),
    ("none", "long_kernel_line", json.dumps({"ts": "2026-04-22T03:00:00Z", "source": "kernel", "node": "n",
                                             "line": "NVRM: " + "x" * 12_000}).encode()),
    ("events", "error_file_as_json_text", json.dumps({
        "ts": "2026-04-22T03:00:00Z", "source": "torchelastic", "job": "j", "exitcode": 1,
        "error_file": json.dumps({"message": {"message": "RuntimeError: CUDA error: an illegal memory access"}})}).encode()),
    ("events", "error_file_lone_surrogate", json.dumps({
        "ts": "2026-04-22T03:00:00Z", "source": "torchelastic", "job": "j", "exitcode": 1,
        "error_file": '{"message": "ValueError: \\ud800"}'}).encode()),
    ("wrong_type", "hostlist_as_node", json.dumps({"ts": "2026-04-22T03:00:00Z", "source": "scheduler",
                                                   "event": "job_started", "job": "j",
                                                   "allocation": "n[01-99999999]"}).encode()),
    ("not_json", "scontrol_text", b"JobId=12 JobName=train\n   UserId=a(1) GroupId=a(1)\n   NodeList=n[01-04]\n"),
]


def write_seeds() -> int:
    """One file per bad kind (``faultline.bench.bad_input``) and per kind of real line (the public scenarios)."""
    from datetime import UTC, datetime

    from faultline.bench.bad_input import _bad_lines

    CORPUS.mkdir(exist_ok=True)
    sample = {"ts": "2026-04-22T03:00:00Z", "source": "node_agent", "node": "n1", "alive": True}
    for i, (raw, kind) in enumerate(_bad_lines(sample, datetime(2026, 4, 22, 3, tzinfo=UTC))):
        if kind not in ("clock_outlier", "duplicate"):  # judged among other lines, not alone
            (CORPUS / f"{kind}--{i:02d}").write_bytes(raw)
    for kind, name, raw in _CORNERS:
        (CORPUS / f"{kind}--{name}").write_bytes(raw)
    seen: set[str] = set()
    for path in sorted(SCENARIOS.glob("*.jsonl")):
        for raw in path.read_bytes().splitlines():
            events = parse_capture_line(raw)
            key = json.loads(raw)["source"] + ":" + ",".join(e.kind for e in events)
            if key not in seen:
                seen.add(key)
                name = re.sub(r"[^a-z0-9_,:]", "_", key).replace(":", "-").replace(",", "+")
                (CORPUS / f"{'events' if events else 'none'}--{name}").write_bytes(raw)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The parsers' fuzz corpus (tests/producers/fuzz_corpus).")
    parser.add_argument("--grow", action="store_true", help="add inputs with new outcomes (hypothesis)")
    parser.add_argument("--examples", type=int, default=2000, help="inputs to try when growing")
    parser.add_argument("--seed", action="store_true", help="(re)write the seed files")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # parse_trainer_line logs every line it drops
    if args.seed:
        write_seeds()
    if args.grow:
        return grow(args.examples)
    if not (args.seed or args.grow):
        for path in corpus_files():
            print(f"{path.name}: {outcomes(path.read_bytes())['parse_capture_line']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
