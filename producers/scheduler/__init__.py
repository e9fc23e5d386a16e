"""Scheduler producers: what the cluster's scheduler says about jobs and nodes, as ``scheduler`` observations.

- :mod:`producers.scheduler.tracking` -- successive snapshots of jobs and
  nodes turned into ``job_started`` / ``job_finished`` / ``job_failed`` /
  ``job_cancelled`` / ``node_not_ready`` / ``node_ready`` (shared by both).
- :mod:`producers.scheduler.slurm` -- Slurm (``squeue --json`` or
  ``scontrol show job -d``; ``sinfo --json`` or ``scontrol show node``), with
  :mod:`~producers.scheduler.slurm_jobs`, :mod:`~producers.scheduler.slurm_nodes`,
  :mod:`~producers.scheduler.scontrol_text` and :mod:`~producers.scheduler.hostlist`.
- :mod:`producers.scheduler.kubernetes` -- Kubernetes pods that request GPUs,
  and node conditions, through the official client.
"""
