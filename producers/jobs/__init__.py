"""The job side of the node agent: what training processes say, as capture observations.

- :mod:`producers.jobs.identity` -- which job, node and rank a process is
  (agent config first, then the torchrun / Slurm environment).
- :mod:`producers.jobs.framework_log` -- a training log (file or pipe), only
  the lines the framework parser recognises, as ``framework`` observations;
  :mod:`~producers.jobs.error_lines` picks those lines (one per traceback),
  :mod:`~producers.jobs.pipe` reads a pipe without blocking.
- :mod:`producers.jobs.torchelastic_watch` -- torchelastic error files
  (``TORCHELASTIC_ERROR_FILE``) and worker exits as ``torchelastic`` observations.
- :mod:`producers.jobs.reporter` -- the stdlib-only library a training loop
  imports to write ``trainer`` observations to a JSON Lines file.
- :mod:`producers.jobs.trainer_file` -- the agent side of the reporter: that
  file followed and passed on.
- ``examples/`` -- a tiny real torchrun job (CPU, gloo) that reports and can
  be made to crash: ``examples/run_example.sh``.

Nothing is imported here, so ``import producers.jobs.reporter`` stays light.
"""
