"""A real, throw-away Kubernetes API server for tests: etcd and kube-apiserver on loopback.

:func:`start_apiserver` runs ``etcd`` and ``kube-apiserver`` (built from the Go
module proxy into ``.tools/bin`` by ``deploy/local/setup.sh --test``, see
``deploy/local/kube-apiserver/go.mod``) on free 127.0.0.1 ports, in a
directory of their own. The API server writes itself a self-signed serving
certificate (``--cert-dir``), authenticates bearer tokens from a static token
file (an admin in ``system:masters``, and one user per test client that RBAC
then restricts) and authorises with RBAC, as a cluster does: :func:`apply_chart_rbac`
binds the users ``faultline-executor`` and ``faultline-jobsource`` to the
ClusterRoles the Helm chart renders, so the tests prove those grants are enough. There is no
scheduler, controller manager or kubelet: tests create Nodes and Pods with
``nodeName`` set, and play the controllers' part themselves. So nothing
recreates a deleted pod and no garbage collector runs; what the executor
*asked* for is what the tests check.

Kubernetes 1.37 serves Dynamic Resource Allocation (``resource.k8s.io/v1``) and
``DeviceTaintRule`` (the ``DRADeviceTaints``/``DRADeviceTaintRules`` gates are
on by default there), so no feature gate is needed; ``feature_gates`` is for
an older build. The watch cache is off (``--watch-cache=false``), so watches
read etcd and :meth:`KubeApiServer.compact_etcd` gives a stale watch its
``410 Gone``, as a compaction does in a cluster.

Every wait has a deadline; leaving the context stops both processes.
:func:`missing_apiserver` says why the servers cannot run here, for a skip.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from ssl import create_default_context
from typing import Any

from tests.servers import free_port, wait_until

__all__ = ["KubeApiServer", "apply_chart_rbac", "missing_apiserver", "start_apiserver", "wait_until"]

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".tools" / "bin"
START_TIMEOUT_S = 120.0
USERS = ("faultline-executor", "faultline-jobsource")


def _binary(name: str) -> Path | None:
    local = BIN / name
    if local.is_file():
        return local
    found = shutil.which(name)
    return Path(found) if found else None


def missing_apiserver() -> str | None:
    """Why a test API server cannot start here, or ``None`` when it can."""
    absent = [b for b in ("etcd", "kube-apiserver", "helm") if _binary(b) is None]
    if absent:
        return (f"{' and '.join(absent)} not built: bash deploy/local/setup.sh --test builds them from the Go "
                "module proxy into .tools/bin (deploy/local/kube-apiserver/go.mod; helm renders the RBAC "
                "the test clients run under)")
    if shutil.which("openssl") is None:
        return "openssl is needed to make the API server's service-account key"
    return None




@dataclass
class KubeApiServer:
    """A running API server: where it is, who may call it, and clients for the tests."""

    url: str
    ca_file: Path
    tokens: dict[str, str]  # user -> bearer token ("admin" is in system:masters)
    root: Path
    etcd_url: str = ""
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def client(self, user: str = "admin") -> Any:
        """A ``kubernetes.client.ApiClient`` authenticated as ``user``."""
        from kubernetes import client

        conf = client.Configuration(host=self.url)
        conf.ssl_ca_cert = str(self.ca_file)
        conf.api_key = {"authorization": "Bearer " + self.tokens[user]}
        return client.ApiClient(conf)

    def compact_etcd(self) -> int:
        """Compact etcd's history up to now (what the API server does every 5 minutes): a watch from an
        older resourceVersion then gets ``410 Gone``. The revision compacted to."""
        import json

        def post(path: str, body: dict[str, Any]) -> Any:
            request = urllib.request.Request(self.etcd_url + path, data=json.dumps(body).encode(), method="POST")
            with urllib.request.urlopen(request, timeout=10) as answer:
                return json.loads(answer.read())

        revision = int(post("/v3/kv/range", {"key": "AA=="})["header"]["revision"])
        post("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.is_file() else ""


def _get(url: str, ca: Path | None, token: str | None, timeout: float = 2.0) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    context = create_default_context(cafile=str(ca)) if ca else None
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as answer:
            return int(answer.status)
    except Exception:
        return 0


def _spawn(root: Path, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
    log = (root / f"{name}.log").open("wb")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=root, start_new_session=True)


def _alive(proc: subprocess.Popen[bytes], name: str, root: Path) -> None:
    if proc.poll() is not None:
        tail = (root / f"{name}.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{name} exited with {proc.returncode}:\n{tail}")


@contextlib.contextmanager
def start_apiserver(root: Path, feature_gates: str = "") -> Iterator[KubeApiServer]:
    """etcd and kube-apiserver in ``root``; stopped on exit (see the module docstring)."""
    etcd, apiserver = _binary("etcd"), _binary("kube-apiserver")
    if etcd is None or apiserver is None:
        raise RuntimeError(missing_apiserver() or "etcd/kube-apiserver missing")
    root.mkdir(parents=True, exist_ok=True)
    key = root / "sa.key"
    subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True, timeout=60)
    tokens = {"admin": secrets.token_hex(16), **{u: secrets.token_hex(16) for u in USERS}}
    lines = [f'{tokens["admin"]},admin,uid-admin,"system:masters"']
    lines += [f"{tokens[u]},{u},uid-{u}" for u in USERS]
    (root / "tokens.csv").write_text("\n".join(lines) + "\n")
    client_port, peer_port, api_port = free_port(), free_port(), free_port()
    server = KubeApiServer(f"https://127.0.0.1:{api_port}", root / "certs" / "apiserver.crt", tokens, root,
                           etcd_url=f"http://127.0.0.1:{client_port}")
    try:
        server.procs["etcd"] = _spawn(root, "etcd", [
            str(etcd), "--data-dir", str(root / "etcd"), "--name", "test",
            "--listen-client-urls", f"http://127.0.0.1:{client_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{client_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-cluster", f"test=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync", "--log-level", "warn"])

        def etcd_up() -> bool:
            _alive(server.procs["etcd"], "etcd", root)
            return _get(f"http://127.0.0.1:{client_port}/health", None, None) == 200

        wait_until(etcd_up, START_TIMEOUT_S, "etcd healthy")
        argv = [
            str(apiserver), "--etcd-servers", f"http://127.0.0.1:{client_port}",
            "--bind-address", "127.0.0.1", "--secure-port", str(api_port), "--advertise-address", "127.0.0.1",
            "--cert-dir", str(root / "certs"), "--token-auth-file", str(root / "tokens.csv"),
            "--authorization-mode", "RBAC",
            "--service-account-issuer", "https://kubernetes.default.svc",
            "--service-account-key-file", str(key), "--service-account-signing-key-file", str(key),
            "--service-cluster-ip-range", "10.96.0.0/24",
            # no controller manager makes the namespaces' default service accounts
            "--disable-admission-plugins", "ServiceAccount",
            "--endpoint-reconciler-type", "none", "--enable-priority-and-fairness=false",
            # watches straight from etcd: an etcd compaction then gives a stale watch its 410 Gone
            "--watch-cache=false",
            "--profiling=false", "--v", "1",
        ]
        if feature_gates:
            argv += ["--feature-gates", feature_gates]
        server.procs["kube-apiserver"] = _spawn(root, "kube-apiserver", argv)

        def api_ready() -> bool:
            _alive(server.procs["kube-apiserver"], "kube-apiserver", root)
            ca = server.ca_file if server.ca_file.is_file() else None
            return ca is not None and _get(f"{server.url}/readyz", ca, tokens["admin"]) == 200

        wait_until(api_ready, START_TIMEOUT_S, "kube-apiserver ready", interval_s=0.5)
        yield server
    finally:
        for proc in reversed(list(server.procs.values())):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)


def apply_chart_rbac(server: KubeApiServer) -> list[str]:
    """Create the chart's ClusterRoles (helm template) and bind each to the test user of its stage; and the
    executor's ValidatingAdmissionPolicy on pod writes, matching the test user instead of the service account."""
    import yaml
    from kubernetes import client

    chart = ROOT / "deploy" / "helm" / "faultline"
    done = subprocess.run([str(_binary("helm")), "template", "faultline", str(chart), "--namespace", "faultline",
                           "--set", "kafka.securityProtocol=PLAINTEXT", "--set", "clickhouse.password=x",
                           "--show-only", "templates/executor-rbac.yaml", "--show-only",
                           "templates/jobsource-rbac.yaml"], capture_output=True, text=True, timeout=60, check=True)
    rbac = client.RbacAuthorizationV1Api(server.client())
    admission = client.AdmissionregistrationV1Api(server.client())
    made = []
    for obj in yaml.safe_load_all(done.stdout.replace("system:serviceaccount:faultline:faultline-executor",
                                                      "faultline-executor")):
        if obj and obj["kind"] == "ValidatingAdmissionPolicy":
            admission.create_validating_admission_policy(obj)
        elif obj and obj["kind"] == "ValidatingAdmissionPolicyBinding":
            admission.create_validating_admission_policy_binding(obj)
        if not obj or obj["kind"] != "ClusterRole":
            continue
        name = obj["metadata"]["name"]  # faultline-executor, faultline-jobsource: the test users' names
        rbac.create_cluster_role(obj)
        rbac.create_cluster_role_binding({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "User", "name": name, "apiGroup": "rbac.authorization.k8s.io"}]})
        made.append(name)
    if sorted(made) != sorted(USERS):
        raise RuntimeError(f"the chart renders ClusterRoles {made}, the tests expect {USERS}")
    return made
