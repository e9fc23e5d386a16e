#!/bin/bash
# PrologSlurmctld hook: report the job's start (job_started with its allocation) to faultline at once.
#   slurm.conf:  PrologSlurmctld=/etc/faultline/prolog-slurmctld.sh
# slurmctld runs it as SlurmUser on the controller, once per job, with SLURM_JOB_ID (and, in the
# epilog, SLURM_JOB_EXIT_CODE2) set. The job waits in CONFIGURING while this runs: at most ~10 s when Kafka is away.
# It must never fail: a failing PrologSlurmctld holds or requeues the job, so every path exits 0 and
# errors go to slurmctld's log. The scheduler agent's next poll reports the job anyway.
FAULTLINE_PYTHON=${FAULTLINE_PYTHON:-/opt/faultline/bin/python}
FAULTLINE_ENV_FILE=${FAULTLINE_ENV_FILE:-/etc/faultline/faultline.env}
FAULTLINE_SCHEDULER_CONFIG=${FAULTLINE_SCHEDULER_CONFIG:-/etc/faultline/scheduler.yaml}
if [ -r "$FAULTLINE_ENV_FILE" ]; then
  set -a; . "$FAULTLINE_ENV_FILE"; set +a     # FAULTLINE_KAFKA, SASL user and password
fi
timeout 10 "$FAULTLINE_PYTHON" -m producers.scheduler.slurm_hook started --config "$FAULTLINE_SCHEDULER_CONFIG" || true
exit 0
