#!/usr/bin/env bash
# Set up faultline on a fresh machine: Python venv with every dependency, Java and
# Maven for the local Kafka broker, and the broker's jars (fetched once with Maven).
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/../.."

# Debian packages: deploy/local/apt-packages.txt lists them with why.
need_apt=()
while read -r pkg; do
  [ -n "$pkg" ] || continue
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$pkg")
done < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' deploy/local/apt-packages.txt)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing ${need_apt[*]} with apt-get"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "setup: please install the Debian packages ${need_apt[*]} (see deploy/local/apt-packages.txt)" >&2
    exit 1
  fi
fi

PY=${PYTHON:-python3}
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || {
  echo "setup: faultline needs Python 3.11 or newer ($PY is $("$PY" --version 2>&1))" >&2; exit 1; }
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
.venv/bin/python -c 'from deploy.local.kafka import ensure_jars; print("setup: Kafka jars in", ensure_jars())'
echo "setup: done. Try: .venv/bin/faultline demo"
