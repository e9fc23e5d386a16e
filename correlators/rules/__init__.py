"""The correlator's rules, one rule set per concern, composed by :mod:`correlators.engine`.

- :mod:`~correlators.rules.scheduler` -- inventory and the scheduler: topology, job starts and ends;
- :mod:`~correlators.rules.liveness` -- node agents' heartbeats, silence, the BMC's view;
- :mod:`~correlators.rules.hardware` -- XIDs, NVML, kernel faults, fence debounce, power grouping;
- :mod:`~correlators.rules.training` -- collectives, crashes, steps, hangs, checkpoints, trainer heartbeats;
- :mod:`~correlators.rules.recovery` -- settle, restart, verify;
- :mod:`~correlators.rules.operator` -- people's quarantines and releases.

What a rule set is and shares: :mod:`~correlators.rules.base`. The incident
lifecycle they all use: :mod:`correlators.lifecycle`.
"""
