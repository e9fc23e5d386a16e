"""The correlator's rules, one rule set per concern, composed by :mod:`correlators.engine`.

- :mod:`~correlators.rules.scheduler` -- inventory and the scheduler: topology, job starts and ends;
- :mod:`~correlators.rules.liveness` -- node agents' heartbeats, silence, the BMC's view, not-ready nodes;
- :mod:`~correlators.rules.hardware` -- XIDs, NVML (GPUs gone from it), kernel faults, fence debounce,
  power grouping;
- :mod:`~correlators.rules.training` -- collectives, crashes, load failures, steps, hangs, checkpoints;
- :mod:`~correlators.rules.recovery` -- settle, the restart gate (:mod:`correlators.restart_gate`), restart;
- :mod:`~correlators.rules.verification` -- a restarted job proving it recovered (throughput held);
- :mod:`~correlators.rules.placement` -- runs the scheduler started on fenced hardware;
- :mod:`~correlators.rules.operator` -- people's quarantines and releases.

What a rule set is and shares: :mod:`~correlators.rules.base`. The incident
lifecycle they all use: :mod:`correlators.lifecycle`.
"""
