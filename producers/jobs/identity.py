"""Who a training process is: job, node, global rank, local rank.

The agent's config wins; what it leaves out comes from the environment that
the launchers set for a worker:

=============  ======================================================================
field          environment, first one set wins
=============  ======================================================================
job            ``FAULTLINE_JOB``, ``SLURM_JOB_ID``, ``TORCHELASTIC_RUN_ID``
node           ``FAULTLINE_NODE``, ``SLURMD_NODENAME``, then the short host name
rank           ``RANK`` (torchrun), ``SLURM_PROCID``
local_rank     ``LOCAL_RANK`` (torchrun), ``SLURM_LOCALID``
=============  ======================================================================
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["JobIdentity", "short_hostname"]

_JOB_ENV = ("FAULTLINE_JOB", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")
_NODE_ENV = ("FAULTLINE_NODE", "SLURMD_NODENAME")
_RANK_ENV = ("RANK", "SLURM_PROCID")
_LOCAL_RANK_ENV = ("LOCAL_RANK", "SLURM_LOCALID")


def short_hostname() -> str:
    """This machine's host name without its domain (as schedulers name nodes)."""
    return socket.gethostname().split(".", 1)[0]


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = env.get(name, "").strip()
        if value:
            return value
    return None


def _int(value: str | None, what: str) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{what} must be an integer, got {value!r}") from None


@dataclass(frozen=True)
class JobIdentity:
    """The fields that place a training process's observations."""

    job: str
    node: str
    rank: int | None = None
    local_rank: int | None = None

    @classmethod
    def resolve(
        cls,
        job: str | None = None,
        node: str | None = None,
        rank: int | None = None,
        local_rank: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> JobIdentity:
        """The given fields, the rest from ``env`` (default ``os.environ``); ``ValueError`` without a job."""
        env = os.environ if env is None else env
        job = job or _first(env, _JOB_ENV)
        if not job:
            raise ValueError("no job name: configure 'job' or set FAULTLINE_JOB / SLURM_JOB_ID / TORCHELASTIC_RUN_ID")
        return cls(
            job=job,
            node=node or _first(env, _NODE_ENV) or short_hostname(),
            rank=rank if rank is not None else _int(_first(env, _RANK_ENV), "RANK"),
            local_rank=local_rank if local_rank is not None else _int(_first(env, _LOCAL_RANK_ENV), "LOCAL_RANK"),
        )

    def fields(self) -> dict[str, str | int]:
        """``job``, ``node`` and the ranks that are known, for an observation."""
        out: dict[str, str | int] = {"job": self.job, "node": self.node}
        if self.rank is not None:
            out["rank"] = self.rank
        if self.local_rank is not None:
            out["local_rank"] = self.local_rank
        return out
