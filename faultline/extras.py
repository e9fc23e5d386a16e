"""Which install extra a module comes with: what to say when a command's role is not installed.

The package installs by role (``pyproject.toml``): the core is the node agent's, and each other
role is an extra. A command of a role that is not installed fails on its first import of that
role's dependencies; :func:`install_hint` turns that into the ``pip install`` line that fixes it.
"""

from __future__ import annotations

__all__ = ["EXTRA_OF_MODULE", "install_hint"]

EXTRA_OF_MODULE = {
    "chdb": "sink",
    "clickhouse_connect": "sink",
    "rich": "sink",
    "faust": "correlator",
    "mode": "correlator",
    "aiokafka": "correlator",
    "kubernetes": "executor",
}
"""Top-level module -> the extra that installs it (``kubernetes`` also comes with ``scheduler``)."""


def install_hint(exc: ModuleNotFoundError) -> str | None:
    """The message for a missing role dependency, or None when ``exc`` is about something else."""
    module = (exc.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(module)
    if extra is None:
        return None
    return (f"this command needs {module}, which this installation left out: install the {extra!r} role with "
            f"`pip install 'faultline[{extra}]'` (or 'faultline[all]' for every role)")
