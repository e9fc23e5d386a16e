"""The node's own sources for the agent (:mod:`producers.agent`), one per module.

- :mod:`~producers.node.gpu_telemetry` -- NVML readings on change plus a slow
  snapshot, lost GPUs and NVML XID events (the ``nvml`` section); its NVML seam
  is :mod:`~producers.node.nvml`, the recorded stand-in
  :mod:`~producers.node.nvml_recorded`, the tolerances
  :mod:`~producers.node.gpu_changes`.
- :mod:`~producers.node.kernel_log` -- recognised kernel lines from /dev/kmsg,
  journalctl or a file (followed by :mod:`~producers.node.follow`).
- :mod:`~producers.node.bmc` -- power, new SEL records and outages via ipmitool.
- :mod:`~producers.node.heartbeat` -- the agent's liveness line.
- :mod:`~producers.node.state` -- small state files that survive restarts.
"""
