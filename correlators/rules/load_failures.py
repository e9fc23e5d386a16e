"""A restarted run that dies before its first step because its checkpoint would not load.

The run died with a load error (policy ``checkpoints.load_failure_patterns``), or its trainer said the
checkpoint failed to load: that checkpoint is no longer a restart point, nothing is fenced for it, and the
failure continues the incident whose restart it was (``restarts.load_failures`` such restarts in a row stop
for a person: :mod:`correlators.rules.recovery`).
"""

from __future__ import annotations

import functools
import re
from datetime import datetime

from correlators.findings import Finding
from correlators.lifecycle import IncidentLifecycle
from correlators.policy import Policy
from correlators.state import EngineState

__all__ = ["died_loading"]


@functools.cache
def _load_error(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """The policy's load-failure patterns as one case-insensitive expression (never matching when empty)."""
    return re.compile("|".join(f"(?:{x})" for x in patterns) or r"(?!)", re.IGNORECASE)


def died_loading(state: EngineState, policy: Policy, life: IncidentLifecycle, job: str, ts: datetime, text: str,
                 evidence: str) -> bool:
    """True when ``job``'s crash (``text``: its error) is its run's checkpoint failing to load, and so judged
    here: the checkpoint marked, the job failed as the incident whose restart it was."""
    prog = state.job_progress(job)
    book = prog.checkpoints
    if book.loading is None or prog.run_steps or book.run_started is None or ts < book.run_started:
        return False
    told = any(ck.state == "failed_load" and ck.step == book.loading for ck in book.saved)
    if not told and not _load_error(tuple(policy.checkpoints.load_failure_patterns)).search(text):
        return False
    if book.load_failed:  # the same run's other reports of it (its exit, its error file's text)
        inc = state.failure_of(job)
        if inc is not None:
            inc.add_evidence(evidence)
        return True
    book.load_failed = True
    first = text.strip().splitlines()[0][:200] if text.strip() else "the run died before its first step"
    ck = book.loaded_failed(first)
    step = ck.step if ck is not None else book.loading
    recovering = state.failure_of(job)  # the incident whose restart this run is
    owner = recovering.id if recovering is not None and recovering.restart_attempts and \
        recovering.state in ("verifying", "restarting", "awaiting_approval") else None
    inc = life.failure(job, Finding("software_crash", ts, None, [], f"checkpoint step {step} did not load: {first}",
                                    evidence, belongs_to=owner))
    if inc.id == owner or owner is None:
        inc.load_failures += 1
    return True
