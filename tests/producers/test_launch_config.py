"""torchelastic's launch configuration, in the forms the launcher writes it."""

from __future__ import annotations

import pytest

from producers.framework import parse_framework_line
from producers.framework.launch_config import parse_launch_config
from streams.events import CudaError, LaunchConfig

BLOCK = ("Starting elastic_operator with launch configs:\n  entrypoint       : train.py\n  min_nodes        : 2\n"
         "  max_nodes        : 4\n  nproc_per_node   : 8\n  run_id           : pt\n  rdzv_backend     : c10d\n")


@pytest.mark.parametrize(("text", "want"), [
    (BLOCK, (2, 4, 8)),
    ("  min_nodes        : 2", (2, None, None)),
    ("  nproc_per_node   : 4", (None, None, 4)),
    ("[default0]:LaunchConfig(min_nodes=1, max_nodes=16, nproc_per_node=8, run_id='x', role='default')", (1, 16, 8)),
    ("[torchelastic] launching: min_nodes=3, max_nodes=3, nproc_per_node=4", (3, 3, 4)),
    ("+ torchrun --nnodes=2:8 --nproc-per-node=8 train.py", (2, 8, 8)),
    ("python -m torch.distributed.run --nnodes 4 --nproc_per_node 2 train.py", (4, 4, 2)),
])
def test_each_form_the_launcher_writes(text: str, want: tuple[int | None, int | None, int | None]) -> None:
    body = parse_framework_line(text)
    assert isinstance(body, LaunchConfig)
    assert (body.min_nodes, body.max_nodes, body.nproc_per_node) == want


@pytest.mark.parametrize("text", [
    "step 100 loss 2.3 nproc_per_node=8",  # a key=value without the launcher speaking
    "LaunchConfig(min_nodes=0, max_nodes=0)",  # no node count can be 0
    "the min_nodes of this run are many",
])
def test_lines_that_are_not_a_launch_configuration(text: str) -> None:
    assert parse_launch_config(text) is None


def test_min_above_max_is_dropped_not_guessed() -> None:
    body = parse_launch_config("LaunchConfig(min_nodes=8, max_nodes=4, nproc_per_node=8)")
    assert body is not None and (body.min_nodes, body.max_nodes, body.nproc_per_node) == (None, None, 8)


def test_an_error_on_the_same_line_wins() -> None:
    assert isinstance(parse_framework_line("torchrun --nnodes=2 RuntimeError: CUDA error: unknown error"), CudaError)
