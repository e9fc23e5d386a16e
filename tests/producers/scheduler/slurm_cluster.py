"""A real, throw-away Slurm cluster for tests: munged, slurmctld and slurmd on this machine.

:func:`start_slurm` brings up one node (this host, ``gpus`` GPUs backed by
placeholder device files, so ``scontrol show job -d`` shows real GPU
indices) from a test ``slurm.conf`` in ``tmp_dir``, with its own munge key
and socket and free ports, so it touches nothing of the machine's own Slurm
or munge and can run beside another test cluster. Every wait has a deadline;
leaving the context cancels the jobs and stops the three daemons.

It needs the Debian packages ``slurm-wlm`` and ``munge``
(``deploy/local/apt-packages.txt``) and root (``SlurmUser=root``);
:func:`missing_slurm` says what is missing, for a skip reason::

    with start_slurm(tmp_path) as cluster:
        job = cluster.sbatch("--gres=gpu:2", "--wrap", "sleep 30")
        print(cluster.run("scontrol", "show", "job", "-d", job))
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.servers import free_port, wait_until

__all__ = ["SlurmCluster", "missing_slurm", "start_slurm"]

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo", "scancel")
COMMAND_TIMEOUT_S = 20.0


def missing_slurm() -> str | None:
    """Why a test cluster cannot start here, or ``None`` when it can."""
    absent = [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]
    if absent:
        return (f"Slurm/munge not installed ({', '.join(absent)} missing): apt-get install slurm-wlm munge "
                "(deploy/local/apt-packages.txt; deploy/local/setup.sh does it as root)")
    if os.geteuid() != 0:
        return "the test Slurm cluster runs slurmd as root (SlurmUser=root): run the tests as root"
    return None


def _binary(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))




@dataclass
class SlurmCluster:
    """A running test cluster: its config, its one node, and helpers to drive it."""

    root: Path
    conf: Path
    node: str
    gpus: int
    env: dict[str, str]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def run(self, *argv: str, check: bool = True) -> str:
        """Run a Slurm command against this cluster; its standard output."""
        done = subprocess.run([_binary(argv[0]), *argv[1:]], env=self.env, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def runner(self) -> Callable[[Sequence[str]], str]:
        """A ``run(argv) -> stdout`` seam for :class:`producers.scheduler.slurm.SlurmSource`."""
        return lambda argv: self.run(*argv)

    def sbatch(self, *args: str) -> str:
        """Submit a batch job; its id."""
        return self.run("sbatch", "--parsable", f"--chdir={self.root}", f"--output={self.root}/job-%j.out",
                        *args).strip().split(";")[0]

    def logs(self) -> str:
        """The tail of each daemon's log (for a failure message)."""
        parts = []
        for log in sorted((self.root / "log").glob("*.log")):
            parts.append(f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(parts)


_CONF = """\
ClusterName=faultline-test
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MpiDefault=none
SwitchType=switch/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
SchedulerType=sched/backfill
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 Gres=gpu:{gpus} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def _start_munge(run_dir: Path, log_dir: Path) -> subprocess.Popen[bytes]:
    key = run_dir / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    return subprocess.Popen(
        [_binary("munged"), "--foreground", f"--socket={run_dir}/munge.sock", f"--key-file={key}",
         f"--pid-file={run_dir}/munged.pid", f"--seed-file={run_dir}/munged.seed", f"--log-file={log_dir}/munged.log"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _node_idle(cluster: SlurmCluster) -> bool:
    try:
        return cluster.run("sinfo", "-h", "-N", "-o", "%T").strip() == "idle"
    except (RuntimeError, subprocess.TimeoutExpired):
        return False


def _no_jobs(cluster: SlurmCluster) -> bool:
    return not cluster.run("squeue", "-h", "-t", "PD,R,CG,CF,S", check=False).strip()


@contextlib.contextmanager
def start_slurm(tmp_dir: Path, gpus: int = 4, start_timeout_s: float = 30.0) -> Iterator[SlurmCluster]:
    """A running one-node cluster configured in ``tmp_dir``; stopped when the context ends."""
    reason = missing_slurm()
    if reason:
        raise RuntimeError(reason)
    root = Path(tmp_dir)
    for sub in ("state", "spool", "log", "dev"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for i in range(gpus):
        (root / "dev" / f"nvidia{i}").touch()
    # munged wants every folder above its socket searchable by all; pytest's tmp folders are not.
    munge_dir = Path(tempfile.mkdtemp(prefix="faultline-munge-"))
    munge_dir.chmod(0o755)
    host = socket.gethostname().split(".", 1)[0]
    conf = root / "slurm.conf"
    conf.write_text(_CONF.format(host=host, munge_socket=munge_dir / "munge.sock", ctld_port=free_port(),
                                 slurmd_port=free_port(), root=root, cpus=os.cpu_count() or 1, gpus=gpus))
    last = gpus - 1
    (root / "gres.conf").write_text(f"Name=gpu File={root}/dev/nvidia[0-{last}]\n" if gpus > 1 else
                                    f"Name=gpu File={root}/dev/nvidia0\n")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    cluster = SlurmCluster(root=root, conf=conf, node=host, gpus=gpus, env=env)
    try:
        cluster.procs["munged"] = _start_munge(munge_dir, root / "log")
        wait_until(lambda: (munge_dir / "munge.sock").exists(), 10, "munged socket")
        for daemon in ("slurmctld", "slurmd"):
            argv = [_binary(daemon), "-D", "-f", str(conf)] + (["-i"] if daemon == "slurmctld" else [])
            cluster.procs[daemon] = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                                     start_new_session=True)
        try:
            wait_until(lambda: _node_idle(cluster), start_timeout_s, "Slurm node idle", interval_s=0.2)
        except TimeoutError as exc:
            raise RuntimeError(f"{exc}\n{cluster.logs()}") from None
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            if "slurmctld" in cluster.procs:
                cluster.run("scancel", "--user=root", check=False)
                wait_until(lambda: _no_jobs(cluster), 10, "jobs cancelled", interval_s=0.2)
        for name in ("slurmd", "slurmctld", "munged"):
            if name in cluster.procs:
                _stop(cluster.procs[name])
        shutil.rmtree(munge_dir, ignore_errors=True)
