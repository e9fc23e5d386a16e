"""A culprit the evidence pins to one node is fenced and left out, whatever the category (issue #25).

A zombie node -- its agent alive, its ranks stopped -- is named by every other rank's collective
timeout: the ranks that never arrived are *every* rank the job has on that node, and only those.
That is the node's doing, not a link's or one process's, even though no hardware detector spoke:
the node is cordoned (fenced first) and the restart excludes it, as it would for a hardware
category. One rank missing among its node's reporting ranks names a link or a process, not the
node: nothing is fenced for it, but what the evidence blames is still left out of the restart
(:func:`blamed_unfenced`: the rank's GPU -- excluded, not quarantined), and a repeat on that node
excludes the node then.

:func:`pinned_node` decides; the lifecycle fences before anything else the incident issues, and
the incident's text says which rule decided ("ranks 16–23 on zb03 never arrived; zb03 cordoned and
excluded").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from correlators.findings import HARDWARE_CATEGORIES
from correlators.incident_state import OpenIncident

if TYPE_CHECKING:
    from correlators.state import EngineState

__all__ = ["PINNED", "UNFENCED_BLAME", "blamed_unfenced", "pinned_node", "pinned_text", "rank_ranges"]

PINNED = "the evidence pins the culprit to one node"
#: Categories whose culprit is blamed but not fenced (a link or a process): the restart leaves it out.
UNFENCED_BLAME = frozenset({"network_timeout"})


def blamed_unfenced(inc: OpenIncident) -> tuple[list[str], list[tuple[str, int]]]:
    """(nodes, (node, GPU)s) a restart of ``inc`` leaves out because the evidence blames them, though no fence
    holds them: the GPUs of the ranks behind in a collective, or the node when no GPU is named."""
    if inc.category not in UNFENCED_BLAME:
        return [], []
    nodes = [n for n, gpus in inc.hardware() if not gpus]
    return nodes, [(n, g) for n, gpus in inc.hardware() for g in sorted(gpus)]


def pinned_node(state: EngineState, inc: OpenIncident) -> str | None:
    """The node every missing rank of the job's collective sits on, when they are all its ranks there
    (a job on more than one node, every other node's ranks reporting); None otherwise."""
    if inc.job is None or inc.category in HARDWARE_CATEGORIES or inc.node is None or not inc.reports.reporting:
        return None
    job = state.topology.jobs.get(inc.job)
    if job is None or len(job.nodes) < 2:
        return None
    missing = inc.reports.culprit_ranks(job)
    if not missing or any(job.place_of.get(r, ("", 0))[0] != inc.node for r in missing):
        return None
    on_node = [r for r, (n, _) in job.place_of.items() if n == inc.node]
    return inc.node if len(missing) == len(on_node) else None


def rank_ranges(ranks: list[int]) -> str:
    """``[16, 17, ..., 23, 30]`` as ``16–23, 30``."""
    out: list[str] = []
    for r in sorted(ranks):
        if out and r == int(out[-1].split("–")[-1]) + 1:
            out[-1] = f"{out[-1].split('–')[0]}–{r}"
        else:
            out.append(str(r))
    return ", ".join(out)


def pinned_text(state: EngineState, inc: OpenIncident, node: str) -> str:
    job = state.topology.jobs.get(inc.job or "")
    ranks = inc.reports.culprit_ranks(job) if job is not None else []
    return f"ranks {rank_ranges(ranks)} on {node} never arrived; {node} cordoned and excluded ({PINNED})"
