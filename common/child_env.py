"""The environment of a tool we run (``scontrol``, ``ipmitool``): what it needs, not what we hold.

A stage's environment holds its secrets (signing keys, Kafka and archive
passwords); a child process inherits all of it by default, and anything it
prints, logs or crashes with may carry them further. So the tools a stage runs
get :func:`minimal_env`: ``PATH``, the locale, ``HOME``, ``TZ`` and the
variables the tool itself reads (by prefix, e.g. ``SLURM_``), plus what the
caller passes explicitly (``IPMI_PASSWORD`` for ``ipmitool -E``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

__all__ = ["minimal_env", "PASSED_ON"]

PASSED_ON: tuple[str, ...] = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "HOME")


def minimal_env(prefixes: Iterable[str] = (), extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """:data:`PASSED_ON` and the variables starting with one of ``prefixes`` from this process, plus ``extra``."""
    wanted = tuple(prefixes)
    env = {k: v for k, v in os.environ.items() if k in PASSED_ON or (wanted and k.startswith(wanted))}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return {**env, **(extra or {})}
