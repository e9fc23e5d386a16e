#!/usr/bin/env bash
# The project's test command: set up, lint, type-check, then every test.
# Tests that need Kafka start a real local broker themselves (or use FAULTLINE_KAFKA).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/local/setup.sh --test
echo "== ruff"; .venv/bin/ruff check .
echo "== mypy"; .venv/bin/mypy
echo "== pytest"; .venv/bin/pytest -q --durations=30 "$@"
