"""Every incident, command and dead letter the correlator builds fits the record cap, whatever it holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import example, given, settings
from hypothesis import strategies as st

from common.deadletters import dead_letter
from correlators.bounded import EXCLUDE_BUDGET, bounded_command, fold_exclusions, middle, minimal
from correlators.gate_round import GateRound, Wait
from correlators.incident_state import OpenIncident, OtherFault
from streams.bounds import MAX_RECORD_BYTES, record_bytes
from streams.decisions import Command, Incident, Target

T0 = datetime(2026, 4, 22, 3, 0, tzinfo=UTC)


def _uuid(node: str, i: int) -> str:
    return f"GPU-{abs(hash((node, i))) % 10**8:08d}-0000-0000-0000-{i:012d}"


def _incident(nodes: int, gpus: int, faults: int, summary: int) -> OpenIncident:
    names = [f"n{k:04d}" for k in range(nodes)]
    gate = GateRound(opened=T0, failure_at=T0, bound=T0 + timedelta(seconds=300),
                     alloc={n: list(range(gpus)) for n in names})
    gate.waiting = [Wait(n, g, "nvml", T0 + timedelta(seconds=60)) for n in names for g in range(gpus)]
    gate.waiting += [Wait(n, None, "heartbeat", T0 + timedelta(seconds=45)) for n in names]
    inc = OpenIncident(id="inc-1", job="pt", category="gpu_off_bus", opened_at=T0, severity="page", node=names[0],
                       gpus={0}, summary="XID 79 on n0000 GPU 0; " + "failed again: collective timeout; " * summary)
    inc.gate = gate
    inc.others = [OtherFault("gpu_thermal", n, {0}, "hot " * 200) for n in names[:faults]]
    inc.evidence = [f"{k:024x}" for k in range(200)]
    return inc


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 2048), st.integers(1, 8), st.integers(0, 2048), st.integers(0, 5000))
@example(2048, 8, 2048, 5000)
@example(1, 1, 0, 0)
def test_an_incident_of_any_size_fits_the_cap(nodes: int, gpus: int, faults: int, summary: int) -> None:
    inc = _incident(nodes, gpus, min(faults, nodes), summary)
    model = inc.to_model([_uuid(inc.node or "", 0)], _uuid)
    assert record_bytes(model) <= MAX_RECORD_BYTES
    assert model.gate is not None
    total = nodes * gpus + nodes
    assert len(model.gate.waiting) + model.gate.waiting_more == total  # nothing lost without a count
    if total > len(model.gate.waiting):
        assert "faultline incident inc-1" in model.cut and f"{total:,} detectors on {nodes:,} nodes" in model.cut
    else:
        assert model.cut == "" or "faults" in model.cut or "summary" in model.cut
    assert model.summary.endswith("collective timeout; ") or summary == 0  # the newest clause stays


def test_a_small_incident_is_unchanged() -> None:
    inc = _incident(2, 2, 0, 0)
    model = inc.to_model([], _uuid)
    assert model.cut == "" and model.gate is not None and len(model.gate.waiting) == 6 and model.gate.waiting_more == 0


def test_command_text_and_gate_explanations_are_cut_but_exclude_stays_exact() -> None:
    nodes = [f"n{k:04d}" for k in range(2048)]
    cmd = Command(id="c", incident="inc-1", type="restart_job", target=Target(job="pt"), issued_at=T0,
                  reason="leaving out " + "; ".join(f"{n} (no verdict by 03:05:00Z, heartbeat due)" for n in nodes),
                  params={"exclude": {"nodes": nodes, "gpus": []}, "gpus": 16384,
                          "gate": {"excluded": [{"node": n, "gpu": None, "verdict": "no_verdict", "why": "w" * 900}
                                                for n in nodes]}})
    assert record_bytes(cmd) > MAX_RECORD_BYTES
    out = bounded_command(cmd)
    assert record_bytes(out) <= MAX_RECORD_BYTES
    assert out.params["exclude"] == cmd.params["exclude"]  # what the executor acts on: exact
    assert len(out.params["gate"]["excluded"]) == 16 and out.params["gate"]["excluded_more"] == 2032
    assert "faultline incident inc-1" in out.params["cut"] and out.reason.endswith("heartbeat due)")
    small = Command(id="c2", incident="i", type="notify", target=Target(job="pt"), issued_at=T0,
                    params={"message": "hello"})
    assert bounded_command(small) is small


def test_exclusions_past_the_budget_become_whole_nodes_never_fewer() -> None:
    gpus = [(f"n{k:04d}", _uuid(f"n{k:04d}", i)) for k in range(2048) for i in range(7)]
    nodes, exact, folded = fold_exclusions(["n9999"], gpus)
    assert folded and exact == [] and set(nodes) == {"n9999"} | {n for n, _ in gpus}
    few = gpus[:40]
    nodes, exact, folded = fold_exclusions(["n9999"], few)
    assert not folded and nodes == ["n9999"] and exact == sorted(g for _, g in few)
    assert sum(len(g) + 3 for _, g in few) < EXCLUDE_BUDGET


def test_a_minimal_record_keeps_identity_and_is_never_carried_out_as_decided() -> None:
    cmd = Command(id="c", incident="inc-1", type="restart_job", target=Target(job="pt"), issued_at=T0,
                  params={"exclude": {"nodes": ["n1"], "gpus": []}, "checkpoint": {"step": 5}})
    small = minimal(cmd, "too_large: 2,124,877 bytes")
    assert isinstance(small, Command) and (small.id, small.type, small.target) == (cmd.id, cmd.type, cmd.target)
    assert small.requires_approval and list(small.params) == ["cut"]
    inc = Incident(id="i", job="pt", category="gpu_off_bus", culprit={"node": "n1"}, opened_at=T0, severity="page",
                   state="open", version=7, summary="s" * 100_000)
    m = minimal(inc, "invalid", T0)
    assert isinstance(m, Incident) and m.version == 7 and record_bytes(m) < 2_000 and "invalid" in m.cut


def test_middle_keeps_the_start_and_the_newest_clause() -> None:
    text = "first; " + "x" * 10_000 + "; newest"
    cut = middle(text, 300)
    assert len(cut) == 300 and cut.startswith("first; ") and cut.endswith("; newest")


@given(st.text(alphabet=st.characters(max_codepoint=0x1F), min_size=0, max_size=30_000))
@example("\x00" * 30_000)
def test_a_dead_letter_of_anything_fits_the_cap(raw: str) -> None:
    dl = dead_letter("correlator", "\x01" * 5000, raw, T0)
    assert record_bytes(dl) <= MAX_RECORD_BYTES
