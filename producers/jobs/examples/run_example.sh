#!/usr/bin/env bash
# Run examples/train.py under torchrun (2 CPU workers, gloo) with faultline's job-side sources in mind:
#   trainer lines  -> $OUT/trainer.jsonl              (trainer_file source)
#   worker output  -> $OUT/logs/<run>/attempt_0/<local_rank>/stderr.log   (framework_log source)
#   error files    -> $OUT/logs/<run>/attempt_0/<local_rank>/error.json   (torchelastic source)
# Usage: run_example.sh [OUT_DIR] [train.py flags...], e.g.
#   producers/jobs/examples/run_example.sh /tmp/fl-example --crash-rank 1 --crash-step 5 --crash cuda_error
# Needs torch: pip install -e '.[torch]'. Exits with torchrun's status (non-zero when a worker failed).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
out="${1:-$(mktemp -d -t faultline-example.XXXXXX)}"
shift || true
mkdir -p "$out/logs"
py="${PYTHON:-$root/.venv/bin/python}"
export FAULTLINE_TRAINER_LOG="$out/trainer.jsonl"
export FAULTLINE_JOB="${FAULTLINE_JOB:-example}"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
echo "example: writing to $out" >&2
exec "$py" -m torch.distributed.run \
  --standalone --nnodes 1 --nproc-per-node 2 --max-restarts 0 --monitor-interval 0.5 \
  --log-dir "$out/logs" --redirects 3 --tee 3 \
  "$here/train.py" --checkpoint-dir "$out/checkpoints" "$@"
