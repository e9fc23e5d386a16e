"""Executors: downstream automation that carries commands out, at most once per id, safely.

:mod:`~sinks.executors.core` decides (duplicates, approvals, dry runs, the
:mod:`~sinks.executors.breaker`) over the :mod:`~sinks.executors.ledger` and
the :mod:`~sinks.executors.approvals` view; the backends act
(:mod:`~sinks.executors.slurm`, :mod:`~sinks.executors.kubernetes`,
:mod:`~sinks.executors.webhook`); :mod:`~sinks.executors.runner` connects a core
to Kafka, and :mod:`~sinks.executors.launch` builds one from options.
"""

__all__ = ["approvals", "breaker", "core", "kubernetes", "launch", "ledger", "runner", "slurm", "webhook"]
