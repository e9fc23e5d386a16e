"""The trainer's control path for checkpoint_now: a file watched by mtime (producers.jobs.reporter), no torch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from producers.jobs.reporter import CheckpointRequests, Reporter, request_checkpoint


def test_a_request_is_seen_once_and_an_old_file_is_not_one(tmp_path: Path) -> None:
    control = tmp_path / "faultline-checkpoint-now"
    control.write_text("{}")  # left over from before the job started
    listener = CheckpointRequests(control)
    assert listener.poll() is None
    request_checkpoint(control, "cmd-1", "rising ECC on n3 GPU 2")
    got = listener.poll()
    assert got is not None and (got["command"], got["reason"]) == ("cmd-1", "rising ECC on n3 GPU 2")
    assert listener.poll() is None  # once
    request_checkpoint(control, "cmd-2")  # a second request, even within the same clock tick
    again = listener.poll()
    assert again is not None and again["command"] == "cmd-2"


def test_a_bare_touch_is_a_request_and_a_missing_file_is_none(tmp_path: Path) -> None:
    control = tmp_path / "ctl"
    listener = CheckpointRequests(control)
    assert listener.poll() is None
    control.touch()
    assert listener.poll() == {}
    os.utime(control, ns=(1, 2_000_000_000_000_000_000))
    assert listener.poll() == {}
    control.unlink()
    assert listener.poll() is None


def test_the_reporter_polls_from_the_environment_and_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  ) -> None:
    control = tmp_path / "job" / "faultline-checkpoint-now"
    monkeypatch.setenv("FAULTLINE_CHECKPOINT_NOW", str(control))
    with Reporter("pt", 0, "n1", path=tmp_path / "trainer.jsonl") as rep:
        assert rep.checkpoint_requested() is False  # starts listening
        assert rep.checkpoint_requested() is False  # the job's directory does not even exist yet
        control.parent.mkdir()
        request_checkpoint(control, "cmd-1")
        assert rep.checkpoint_requested() is True
        assert rep.checkpoint_requested() is False
        assert rep.errors == 0


def test_the_example_loop_saves_at_the_step_after_a_request(tmp_path: Path) -> None:
    """The torchrun example's decision, without torch: a request between steps 3 and 4 makes step 4 save,
    beside the regular interval (every 5)."""
    from producers.jobs.examples.checkpoint_plan import should_save

    control = tmp_path / "ctl"
    with Reporter("pt", 0, "n1", path=tmp_path / "trainer.jsonl") as rep:
        rep.checkpoint_requested(control)
        saved = []
        for step in range(1, 11):
            if step == 4:
                request_checkpoint(control, "cmd-1")
            if should_save(step, 5, rep.checkpoint_requested()):
                saved.append(step)
    assert saved == [4, 5, 10]


# --- Kubernetes: the pod's downward-API annotations file ----------------------------------------------------


def test_annotations_are_parsed_as_the_kubelet_quotes_them() -> None:
    from producers.jobs.reporter import parse_annotations
    from tests.downward_api import format_map

    values = {"faultline.io/checkpoint-now": "cmd-7", "kubectl.kubernetes.io/last-applied-configuration":
              '{"a": "b\\\\c"}\n', "note": 'tabs\tbells\a "quotes" é ☃ \x00\x7f \u200b 🦙', "empty": ""}
    text = format_map(values)
    assert text.count("\n") == len(values) - 1  # one line each: newlines inside values are escaped
    assert parse_annotations(text) == values
    # Go's own escapes that Python would not write: \x for a byte, \U, octal; a bad line is skipped
    assert parse_annotations('a="\\x41\\u00e9\\U0001F999\\101"\nbroken\nb="unterminated\nc=unquoted') == {
        "a": "Aé🦙A"}


def test_a_downward_api_file_asks_only_when_the_checkpoint_annotation_changes(tmp_path: Path) -> None:
    from tests.downward_api import DownwardVolume

    volume = DownwardVolume(tmp_path / "podinfo")
    base = {"kubernetes.io/psp": "x", "faultline.io/checkpoint-now": "cmd-old"}
    volume.write(base)  # before the container starts, with a request from before (not one)
    listener = CheckpointRequests(volume.path)
    assert listener.downward and listener.poll() is None
    volume.write({**base, "team.io/owner": "alice"})  # another annotation: the file changes, no request
    assert listener.poll() is None
    asked = {**base, "team.io/owner": "alice", "faultline.io/checkpoint-now": "cmd-1",
             "faultline.io/checkpoint-reason": "gpu_ecc_degradation: rising SBE on n3 GPU 2"}
    volume.write(asked)
    assert listener.poll() == {"command": "cmd-1", "reason": "gpu_ecc_degradation: rising SBE on n3 GPU 2"}
    assert listener.poll() is None  # once
    volume.write({**asked, "team.io/owner": "bob"})  # rewritten, the same id: not again
    assert listener.poll() is None
    volume.write({k: v for k, v in asked.items() if not k.startswith("faultline.io/")})  # removed: not a request
    assert listener.poll() is None
    volume.write({**asked, "faultline.io/checkpoint-now": "cmd-2"})
    got = listener.poll()
    assert got is not None and got["command"] == "cmd-2"


def test_the_reporter_listens_on_the_downward_api_file_from_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.downward_api import DownwardVolume

    volume = DownwardVolume(tmp_path / "etc" / "faultline" / "podinfo")
    volume.write({"app": "llama"})
    monkeypatch.setenv("FAULTLINE_CHECKPOINT_NOW", str(volume.path))
    with Reporter("pt", 0, "n1", path=tmp_path / "trainer.jsonl") as rep:
        assert rep.checkpoint_requested() is False  # starts listening
        volume.write({"app": "llama", "faultline.io/checkpoint-now": "cmd-1"})
        assert rep.checkpoint_requested() is True
        assert rep.checkpoint_requested() is False
        assert rep.errors == 0
