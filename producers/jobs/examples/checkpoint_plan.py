"""When the example job saves: every ``every`` steps, and at the first step boundary after faultline asked.

Kept apart from ``train.py`` (which needs torch) so the rule is tested without torch. In the
distributed loop every rank must save at the same step, so the ranks first agree on whether
anyone was asked (``train.py`` all-reduces the answer, MAX over ranks) and then apply this.
"""

from __future__ import annotations

__all__ = ["should_save"]


def should_save(step: int, every: int, requested: bool) -> bool:
    """Save at ``step``: on the regular interval, or because a checkpoint_now request arrived."""
    return requested or (every > 0 and step % every == 0)
