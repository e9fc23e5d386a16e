"""Issue 27 item 4: terminal escapes in training logs, paths and names never reach a terminal.

The public xid79_multi_node capture, with an attacker's payload (retitle, clear the screen, move home,
fake text, hide the rest, a right-to-left override) in its kernel, framework and torchelastic lines, its
checkpoint paths and its rack names, replayed through the real pipeline; then `faultline incident`,
`timeline` and `status` print through a pipe. Not one ESC, BEL or override comes out; the escapes are
written out where the text was; `--json` keeps the original, escaped the JSON way.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.settings import Settings
from faultline.cli import main as cli
from faultline.pipeline import replay
from tests.harness.shared import needs_shared, scenario

SCENARIO = scenario("xid79_multi_node")
pytestmark = [pytest.mark.broker, needs_shared(SCENARIO)]

PAYLOAD = "\x1b]0;pwned\x07\x1b[2J\x1b[H all clear, nothing to see \x1b[8m\u202e"
UNSAFE = ("\x1b", "\x07", "\u202e")


def _hostile(line: str) -> str:
    d = json.loads(line)
    if isinstance(d.get("line"), str):  # kernel, framework: the payload after what the parser reads
        d["line"] += PAYLOAD
    if isinstance(d.get("path"), str):
        d["path"] += PAYLOAD
    if isinstance(d.get("rack"), str):
        d["rack"] += PAYLOAD
    message = (d.get("error_file") or {}).get("message")
    if isinstance(message, dict) and isinstance(message.get("message"), str):
        message["message"] += PAYLOAD
    return json.dumps(d)


def test_escapes_from_logs_paths_and_names_never_reach_the_terminal(
        kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    capture = tmp_path / "hostile.jsonl"
    capture.write_text("\n".join(_hostile(x) for x in SCENARIO.read_text().splitlines() if x.strip()) + "\n")
    settings = Settings(kafka=kafka_bootstrap, data_dir=tmp_path, namespace=f"esc-{tmp_path.name}",
                        archive=f"chdb://{tmp_path}/archive")
    run = replay(capture, settings)
    monkeypatch.setenv("FAULTLINE_ARCHIVE", settings.archive_url)
    incident = run.contract()["incidents"][0]
    ns = ["--namespace", run.archive_namespace]
    shown = ""
    for argv in (["incident", incident["id"], *ns], ["timeline", str(incident["job"]), *ns], ["status", *ns]):
        assert cli(argv) == 0, argv
        out, err = capsys.readouterr()
        assert not [c for c in UNSAFE if c in out + err], (argv, out[:2000])
        shown += out
    assert "\\x1b[2J" in shown and "\\u202e" in shown  # written out where the text was: a person sees it
    assert cli(["incident", incident["id"], *ns, "--json"]) == 0
    raw = capsys.readouterr().out
    assert not [c for c in UNSAFE if c in raw] and "\\u001b" in raw
    assert any(PAYLOAD in text for text in _strings(json.loads(raw)))  # the escaped original, whole


def _strings(value: object) -> list[str]:
    """Every string in a JSON document, and in the JSON documents its strings hold (an entry's detail)."""
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    if not isinstance(value, str):
        return []
    try:
        inner = json.loads(value)
    except ValueError:
        return [value]
    return [value, *_strings(inner)]
