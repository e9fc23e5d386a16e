"""Render every Kustomize overlay and schema-check every object with kubeconform, offline.

    python -m deploy.kubernetes.validate                 # all overlays, Kubernetes 1.32
    python -m deploy.kubernetes.validate --kubernetes-version 1.30.0 overlays/production

Tools: ``kustomize`` and ``kubeconform`` from ``.tools/bin`` (``deploy/local/setup.sh`` builds
them from the Go module proxy) or ``$PATH``; ``kubectl kustomize`` stands in for a missing
``kustomize``.

Schemas: kubeconform downloads JSON schemas from GitHub by default, which an offline machine
cannot reach. The PyPI package ``kubernetes-validate`` (a dev dependency) ships the Kubernetes
OpenAPI schemas as JSON Schema for every minor release from 1.25 on; each file has an ``$id``
under ``https://kubernetes.io/api/`` and refers to ``/api/_definitions.json``, which a validator
resolves against that ``$id`` -- on the network. :func:`ensure_schemas` copies one release's
strict set into ``.tools/kubernetes-json-schema/v<version>-standalone-strict/`` without the
``$id`` and with the references relative to the file, which kubeconform then resolves on disk
(the layout its ``-schema-location`` template expects).
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

__all__ = ["KUBERNETES_VERSION", "ROOT", "Tools", "ensure_schemas", "find_tools", "overlays", "render",
           "validate", "main"]

KUBERNETES_VERSION = "1.32.0"
"""The release the manifests are checked against by default (any from 1.25 works)."""

ROOT = Path(__file__).resolve().parent
"""deploy/kubernetes."""

_REPO = ROOT.parents[1]
_TOOLS = _REPO / ".tools"
_ABSOLUTE_REF = '"/api/_definitions.json#'
_RELATIVE_REF = '"_definitions.json#'


@dataclass(frozen=True)
class Tools:
    """How to render (a command prefix taking the overlay dir) and the kubeconform binary."""

    kustomize: tuple[str, ...]
    kubeconform: str


def find_tools() -> Tools | None:
    """The tools, preferring the project's ``.tools/bin``; None when one is missing."""
    def which(name: str) -> str | None:
        local = _TOOLS / "bin" / name
        return str(local) if local.is_file() else shutil.which(name)

    kubeconform = which("kubeconform")
    kustomize = which("kustomize")
    kubectl = shutil.which("kubectl")
    if kubeconform is None or (kustomize is None and kubectl is None):
        return None
    return Tools((kustomize, "build") if kustomize else (str(kubectl), "kustomize"), kubeconform)


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


def overlays() -> list[Path]:
    """Every overlay directory (each has a kustomization.yaml)."""
    return sorted(p.parent for p in (ROOT / "overlays").glob("*/kustomization.yaml"))


def render(tools: Tools, overlay: Path) -> str:
    """The overlay's objects as one YAML stream."""
    done = subprocess.run([*tools.kustomize, str(overlay)], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"rendering {overlay} failed: {done.stderr.strip()}")
    return done.stdout


def validate(tools: Tools, manifests: str, schema_root: Path, version: str = KUBERNETES_VERSION) -> str:
    """kubeconform's summary of ``manifests``; raises RuntimeError with its report if any object fails."""
    location = f"{schema_root}/{{{{ .NormalizedKubernetesVersion }}}}-standalone{{{{ .StrictSuffix }}}}/" \
               "{{ .ResourceKind }}{{ .KindSuffix }}.json"
    done = subprocess.run(
        [tools.kubeconform, "-strict", "-summary", "-kubernetes-version", version,
         "-schema-location", location, "-"],
        input=manifests, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"kubeconform: {done.stdout.strip()} {done.stderr.strip()}")
    return done.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    """Render and check the given overlays (default: all); 0 when every object is valid."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("overlay", nargs="*", type=Path, help="overlay dirs (default: every overlay)")
    p.add_argument("--kubernetes-version", default=KUBERNETES_VERSION)
    args = p.parse_args(argv)
    tools = find_tools()
    if tools is None:
        print("kustomize (or kubectl) and kubeconform are needed: bash deploy/local/setup.sh", file=sys.stderr)
        return 2
    schemas = ensure_schemas(args.kubernetes_version)
    failed = 0
    for overlay in args.overlay or overlays():
        try:
            print(f"{overlay}: {validate(tools, render(tools, overlay), schemas, args.kubernetes_version)}")
        except RuntimeError as exc:
            failed += 1
            print(f"{overlay}: {exc}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
