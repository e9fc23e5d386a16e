"""The ``faultline`` subcommands, one module per group; :mod:`faultline.cli` puts them together.

Each module has a ``register(add)`` that declares its subcommands with ``add(name, help,
example)`` (an :class:`argparse.ArgumentParser` comes back) and sets ``run`` on each to the
function that carries it out: ``run(args, settings) -> exit status``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Protocol

from common.settings import Settings

__all__ = ["Add", "Run"]

Run = Callable[[argparse.Namespace, Settings], int]


class Add(Protocol):
    def __call__(self, name: str, help_: str, example: str) -> argparse.ArgumentParser: ...
