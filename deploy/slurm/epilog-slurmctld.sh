#!/bin/bash
# EpilogSlurmctld hook: report the job's end (job_finished / job_failed / job_cancelled) to faultline at once.
#   slurm.conf:  EpilogSlurmctld=/etc/faultline/epilog-slurmctld.sh
# slurmctld runs it as SlurmUser on the controller, once per job, with SLURM_JOB_ID (and, in the
# epilog, SLURM_JOB_EXIT_CODE2) set. Runs after the job; nothing waits for it.
# It must never fail: a failing EpilogSlurmctld holds or requeues the job, so every path exits 0 and
# errors go to slurmctld's log. The scheduler agent's next poll reports the job anyway.
FAULTLINE_PYTHON=${FAULTLINE_PYTHON:-/opt/faultline/bin/python}
FAULTLINE_ENV_FILE=${FAULTLINE_ENV_FILE:-/etc/faultline/faultline.env}
FAULTLINE_SCHEDULER_CONFIG=${FAULTLINE_SCHEDULER_CONFIG:-/etc/faultline/scheduler.yaml}
if [ -r "$FAULTLINE_ENV_FILE" ]; then
  set -a; . "$FAULTLINE_ENV_FILE"; set +a     # FAULTLINE_KAFKA, SASL user and password
fi
timeout 10 "$FAULTLINE_PYTHON" -m producers.scheduler.slurm_hook ended --config "$FAULTLINE_SCHEDULER_CONFIG" || true
exit 0
