"""Lint the Helm chart, render it with every value set, and schema-check every object, offline.

    python -m deploy.helm.validate                       # every ci/*-values.yaml, Kubernetes 1.32
    python -m deploy.helm.validate --kubernetes-version 1.30.0 deploy/helm/faultline/ci/dev-values.yaml

Tools: ``helm`` and ``kubeconform`` from ``.tools/bin`` (``deploy/local/setup.sh --test`` builds
them from the Go module proxy) or ``$PATH``.

Schemas: kubeconform downloads JSON schemas from GitHub by default, which an offline machine
cannot reach. The PyPI package ``kubernetes-validate`` (a dev dependency) ships the Kubernetes
OpenAPI schemas as JSON Schema for every minor release from 1.25 on; each file has an ``$id``
under ``https://kubernetes.io/api/`` and refers to ``/api/_definitions.json``, which a validator
resolves against that ``$id`` -- on the network. :func:`ensure_schemas` copies one release's
strict set into ``.tools/kubernetes-json-schema/v<version>-standalone-strict/`` without the
``$id`` and with the references relative to the file, which kubeconform then resolves on disk
(the layout its ``-schema-location`` template expects).

The Prometheus Operator's kinds (``ServiceMonitor``, ``PrometheusRule``) have no schema in any
registry package, so kubeconform skips exactly those two (:data:`NO_SCHEMA`); the tests check
them instead (the rules against ``deploy/prometheus/alerts.yml`` and with ``promtool``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

__all__ = ["CHART", "KUBERNETES_VERSION", "NO_SCHEMA", "Tools", "ensure_schemas", "find_tools", "lint", "render",
           "validate", "value_sets", "main"]

KUBERNETES_VERSION = "1.32.0"
"""The release the manifests are checked against by default (any from 1.25 works)."""

CHART = Path(__file__).resolve().parent / "faultline"
NO_SCHEMA = ("ServiceMonitor", "PrometheusRule")
RELEASE, NAMESPACE = "faultline", "faultline"

_REPO = CHART.parents[2]
_TOOLS = _REPO / ".tools"
_ABSOLUTE_REF = '"/api/_definitions.json#'
_RELATIVE_REF = '"_definitions.json#'


@dataclass(frozen=True)
class Tools:
    helm: str
    kubeconform: str


def find_tools() -> Tools | None:
    """The tools, preferring the project's ``.tools/bin``; None when one is missing."""
    def which(name: str) -> str | None:
        local = _TOOLS / "bin" / name
        return str(local) if local.is_file() else shutil.which(name)

    helm, kubeconform = which("helm"), which("kubeconform")
    return Tools(helm, kubeconform) if helm and kubeconform else None


def ensure_schemas(version: str = KUBERNETES_VERSION, dest: Path | None = None) -> Path:
    """The kubeconform schema root for ``version`` (made from kubernetes-validate's data if needed)."""
    root = dest or _TOOLS / "kubernetes-json-schema"
    target = root / f"v{version}-standalone-strict"
    if (target / "_definitions.json").is_file():
        return root
    source = resources.files("kubernetes_validate") / "kubernetes-json-schema" / f"v{version}-local-strict"
    if not source.is_dir():
        raise FileNotFoundError(f"kubernetes-validate has no schemas for Kubernetes {version}")
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for item in source.iterdir():
        if item.name.endswith(".json"):
            schema = json.loads(item.read_text().replace(_ABSOLUTE_REF, _RELATIVE_REF))
            schema.pop("$id", None)  # refs then resolve against the file, not https://kubernetes.io/
            (partial / item.name).write_text(json.dumps(schema))
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return root


def value_sets() -> list[Path]:
    """The value files CI renders the chart with (``ci/*-values.yaml``)."""
    return sorted((CHART / "ci").glob("*-values.yaml"))


def _helm(tools: Tools, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tools.helm, *args], capture_output=True, text=True, timeout=120)


def lint(tools: Tools, values: Path | None = None) -> str:
    """``helm lint --strict`` of the chart (with ``values``); raises RuntimeError with its report."""
    done = _helm(tools, "lint", "--strict", str(CHART), *(["-f", str(values)] if values else []))
    if done.returncode != 0:
        raise RuntimeError(f"helm lint {values or ''}: {done.stdout.strip()} {done.stderr.strip()}")
    return done.stdout.strip()


def render(tools: Tools, values: Path | None = None, *sets: str, release: str = RELEASE) -> str:
    """The chart's objects as one YAML stream (release ``release``, ``faultline`` unless said, in namespace
    ``faultline``)."""
    args = ["template", release, str(CHART), "--namespace", NAMESPACE]
    args += ["-f", str(values)] if values else []
    for s in sets:
        args += ["--set", s]
    done = _helm(tools, *args)
    if done.returncode != 0:
        raise RuntimeError(f"helm template {values or ''}: {done.stderr.strip()}")
    return done.stdout


def validate(tools: Tools, manifests: str, schema_root: Path, version: str = KUBERNETES_VERSION) -> str:
    """kubeconform's summary of ``manifests``; raises RuntimeError with its report if any object fails."""
    location = f"{schema_root}/{{{{ .NormalizedKubernetesVersion }}}}-standalone{{{{ .StrictSuffix }}}}/" \
               "{{ .ResourceKind }}{{ .KindSuffix }}.json"
    done = subprocess.run(
        [tools.kubeconform, "-strict", "-summary", "-kubernetes-version", version,
         "-schema-location", location, "-skip", ",".join(NO_SCHEMA), "-"],
        input=manifests, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"kubeconform: {done.stdout.strip()} {done.stderr.strip()}")
    return done.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    """Lint, render and check with the given value files (default: every ci/ one); 0 when all pass."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("values", nargs="*", type=Path, help="value files (default: deploy/helm/faultline/ci/*)")
    p.add_argument("--kubernetes-version", default=KUBERNETES_VERSION)
    args = p.parse_args(argv)
    tools = find_tools()
    if tools is None:
        print("helm and kubeconform are needed: bash deploy/local/setup.sh --test", file=sys.stderr)
        return 2
    schemas = ensure_schemas(args.kubernetes_version)
    failed = 0
    for values in args.values or value_sets():
        try:
            lint(tools, values)
            print(f"{values.name}: {validate(tools, render(tools, values), schemas, args.kubernetes_version)}")
        except RuntimeError as exc:
            failed += 1
            print(f"{values.name}: {exc}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
