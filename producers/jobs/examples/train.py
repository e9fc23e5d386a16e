"""A tiny real training job for ``torchrun`` (CPU, gloo) that reports to faultline.

It fits a linear model with DistributedDataParallel, reports every step
through :class:`producers.jobs.reporter.Reporter`, saves a checkpoint with
``torch.save`` every ``--checkpoint-every`` steps (rank 0) and resumes from
the newest one. ``main`` is wrapped in torchelastic's ``@record``, so a
worker that raises writes its ``TORCHELASTIC_ERROR_FILE``.

To see faultline at work, make one rank fail at one step (flags, or the
``FAULTLINE_CRASH_*`` environment variables)::

    --crash-rank 1 --crash-step 5 --crash cuda_error   # RuntimeError: CUDA error: an illegal memory access ...
    --crash-rank 1 --crash-step 5 --crash oom          # torch.OutOfMemoryError: CUDA out of memory ...
    --crash-rank 1 --crash-step 5 --crash nan          # the loss turns NaN (and training goes on)

Asked to checkpoint now (faultline's ``checkpoint_now``, through the file
``$FAULTLINE_CHECKPOINT_NOW`` that :meth:`Reporter.checkpoint_requested` polls),
the ranks agree at the next step boundary (an all-reduce) and rank 0 saves
then, beside the regular ``--checkpoint-every``.

``run_example.sh`` next to this file runs it under torchrun with two workers.
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel

from producers.jobs.examples.checkpoint_plan import should_save
from producers.jobs.reporter import Reporter

ILLEGAL_ACCESS = (
    "CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, "
    "so the stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1"
)
OUT_OF_MEMORY = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU {gpu} has a total capacity of 79.11 GiB "
    "of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.04 GiB memory in use."
)


def parse_args() -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--job", default=env("FAULTLINE_JOB") or env("TORCHELASTIC_RUN_ID", "example"))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--checkpoint-dir", type=Path, default=Path(env("CHECKPOINT_DIR", "checkpoints")))
    p.add_argument("--checkpoint-every", type=int, default=5)
    p.add_argument("--step-seconds", type=float, default=0.0, help="sleep per step, to look like work")
    p.add_argument("--collective-timeout-s", type=float, default=None,
                   help="how long a collective waits for a silent peer before it fails (the backend's default: "
                        "30 min for gloo); NCCL's watchdog is the GPU analogue")
    p.add_argument("--crash-rank", type=int, default=int(env("FAULTLINE_CRASH_RANK", "-1")))
    p.add_argument("--crash-step", type=int, default=int(env("FAULTLINE_CRASH_STEP", "-1")))
    p.add_argument("--crash", choices=["cuda_error", "oom", "nan"], default=env("FAULTLINE_CRASH", "cuda_error"))
    return p.parse_args()


def fail(kind: str, local_rank: int) -> None:
    """Fail the way a real GPU job does (the messages are PyTorch's own)."""
    if kind == "oom":
        raise torch.OutOfMemoryError(OUT_OF_MEMORY.format(gpu=local_rank))
    raise RuntimeError(ILLEGAL_ACCESS)


def newest_checkpoint(directory: Path) -> Path | None:
    found = sorted(directory.glob("step-*.pt"), key=lambda p: int(p.stem.split("-")[1]))
    return found[-1] if found else None


@record
def main() -> None:
    args = parse_args()
    if args.collective_timeout_s is None:
        dist.init_process_group("gloo")
    else:
        dist.init_process_group("gloo", timeout=timedelta(seconds=args.collective_timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    reporter = Reporter(args.job, rank)
    reporter.checkpoint_requested()  # listen for checkpoint_now from here on

    start = 1
    latest = newest_checkpoint(args.checkpoint_dir)
    if latest is not None:
        state = torch.load(latest)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["step"] + 1
        reporter.checkpoint_loaded(state["step"], latest)

    batch = 32
    for step in range(start, args.steps + 1):
        t0 = time.monotonic()
        x = torch.randn(batch, 8)
        y = x.sum(dim=1, keepdim=True)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(args.step_seconds)
        crashing = rank == args.crash_rank and step == args.crash_step
        if crashing and args.crash == "nan":
            loss = loss * float("nan")
        elif crashing:
            reporter.close()  # what was reported so far is written before the worker dies
            fail(args.crash, local_rank)
        reporter.step(step, loss.item(), batch * world / max(time.monotonic() - t0, 1e-6))
        asked = torch.tensor([1 if reporter.checkpoint_requested() else 0])
        dist.all_reduce(asked, op=dist.ReduceOp.MAX)  # one rank asked: all save at this step
        if rank == 0 and should_save(step, args.checkpoint_every, bool(asked.item())):
            args.checkpoint_dir.mkdir(parents=True, exist_ok=True)
            path = args.checkpoint_dir / f"step-{step}.pt"
            t0 = time.monotonic()
            try:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}, path)
            except OSError as exc:
                reporter.checkpoint_failed(step, path, exc)
            else:
                reporter.checkpoint_saved(step, path, path.stat().st_size, time.monotonic() - t0)
        dist.barrier()

    reporter.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
