#!/usr/bin/env bash
# Set up faultline on a fresh machine: Python venv with every dependency, Java and
# Maven for the local Kafka broker, and the broker's jars (fetched once with Maven).
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/../.."

# --test: also what the tests need (deploy/local/apt-packages-test.txt, the Go check tools below).
with_tests=false
[ "${1:-}" = "--test" ] && with_tests=true
lists=(deploy/local/apt-packages.txt)
$with_tests && lists+=(deploy/local/apt-packages-test.txt)

# Debian packages: the lists say why each is there.
need_apt=()
while read -r pkg; do
  [ -n "$pkg" ] || continue
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$pkg")
done < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "${lists[@]}")
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
if ! $with_tests; then
  echo "setup: done. Try: .venv/bin/faultline demo"
  exit 0
fi

# ---------------------------------------------------------------------------------------------
# Deployment check tools (tests/deploy/test_kubernetes.py, test_compose.py), built from the Go
# module proxy into the project-local .tools/bin (git-ignored). Not needed to run faultline: a
# tool that fails to build only makes its tests skip, with the reason. A fresh machine spends a
# few minutes here (docker compose has many modules); later runs reuse Go's caches.
#   kubeconform  schema-checks the rendered Kubernetes manifests (schemas: kubernetes-validate)
#   helm         lints and renders the chart deploy/helm/faultline (tests/deploy/test_helm_chart.py)
#   kube-apiserver, etcd  a real API server for the executor and job source tests (tests/kube_apiserver.py);
#                built in the module deploy/local/kube-apiserver (its go.mod says why), rebuilt when
#                that go.mod changes. Cold: ~4 min on 2 cores; warm (Go's build cache): seconds
#   compose      `docker compose config` for deploy/compose, where the docker CLI has no plugin;
#                found by the CLI through DOCKER_CONFIG=.tools/docker (cliPluginsExtraDirs)
tools_bin="$PWD/.tools/bin"
mkdir -p "$tools_bin"
go_tool() {  # go_tool NAME MODULE/PATH@VERSION
  [ -x "$tools_bin/$1" ] && return 0
  echo "setup: building $1 ($2)"
  GOBIN="$tools_bin" GOTOOLCHAIN=local GOFLAGS=-buildvcs=false go install "$2" \
    || echo "setup: WARNING: could not build $1; its deployment tests will skip" >&2
}
if command -v go >/dev/null 2>&1; then
  go_tool kubeconform github.com/yannh/kubeconform/cmd/kubeconform@v0.8.0
  go_tool helm helm.sh/helm/v3/cmd/helm@v3.22.0
  kube_mod=deploy/local/kube-apiserver
  kube_stamp="$tools_bin/.kube-apiserver.$(sha256sum "$kube_mod/go.mod" | cut -c1-16)"
  if [ ! -f "$kube_stamp" ]; then
    echo "setup: building kube-apiserver and etcd ($kube_mod/go.mod)"
    if ( cd "$kube_mod" && export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false \
         && go build -trimpath -o "$tools_bin/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver \
         && go build -trimpath -o "$tools_bin/etcd" go.etcd.io/etcd/server/v3 ); then
      rm -f "$tools_bin"/.kube-apiserver.* && touch "$kube_stamp"
    else
      echo "setup: WARNING: could not build kube-apiserver/etcd; the real-API-server tests will skip" >&2
    fi
  fi
  if command -v docker >/dev/null 2>&1 && ! docker compose version >/dev/null 2>&1 \
      && [ ! -x "$tools_bin/docker-compose" ]; then
    # compose's go.mod has replace/exclude directives, so `go install pkg@version` refuses it:
    # build its command inside the downloaded module instead.
    echo "setup: building docker-compose (github.com/docker/compose/v2@v2.40.3)"
    ( export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
      dir=$(go mod download -json github.com/docker/compose/v2@v2.40.3 \
            | .venv/bin/python -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
      cd "$dir" && go build -trimpath -o "$tools_bin/docker-compose" ./cmd
    ) || echo "setup: WARNING: could not build docker-compose; tests/deploy/test_compose.py will skip" >&2
  fi
else
  echo "setup: WARNING: no Go toolchain; the Kubernetes, Helm and Compose checks will skip" >&2
fi
mkdir -p .tools/docker
printf '{"cliPluginsExtraDirs": ["%s"]}\n' "$tools_bin" > .tools/docker/config.json
# Only kubernetes-validate being absent is a warning; any other failure here is a bug of ours: setup stops.
if ! .venv/bin/python -c 'import kubernetes_validate' 2>/dev/null; then
  echo "setup: WARNING: kubernetes-validate is not installed: no offline Kubernetes schemas" >&2
else
  .venv/bin/python -c 'from deploy.helm.validate import ensure_schemas; print("setup: Kubernetes schemas in", ensure_schemas())'
fi
# torch, for the torchrun example test (tests/producers/jobs/test_torchrun_example.py). PyPI's wheel
# brings ~5 GB of CUDA libraries (the CPU-only index is not reachable), so it lives in a cache outside
# the clone, shared by every checkout, and the venv sees it through a .pth file (after its own packages).
torch_dir="${FAULTLINE_CACHE:-$HOME/.cache/faultline}/torch-2.15.0"
if [ ! -f "$torch_dir/.complete" ]; then
  echo "setup: installing torch 2.15.0 into $torch_dir (large: the wheel brings CUDA libraries)"
  rm -rf "$torch_dir.partial"
  if .venv/bin/python -m pip install -q --target "$torch_dir.partial" torch==2.15.0; then
    rm -rf "$torch_dir" && mv "$torch_dir.partial" "$torch_dir" && touch "$torch_dir/.complete"
  else
    rm -rf "$torch_dir.partial"
    echo "setup: WARNING: torch did not install; the torchrun example test will skip" >&2
  fi
fi
if [ -f "$torch_dir/.complete" ]; then
  echo "$torch_dir" > "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/faultline-torch.pth"
fi
echo "setup: done (with test tools)."
