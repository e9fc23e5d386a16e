"""Which install extra a module comes with: what to say when a command's role is not installed.

The package installs by role (``pyproject.toml``): the core is the node agent's, and each other
role is an extra. A command of a role that is not installed fails on its first import of that
role's dependencies; :func:`install_hint` turns that into the ``pip install`` line that fixes it.
The rule: the line names **every** extra the command needs that is missing, not only the one whose
module failed first (``replay`` runs a correlator and writes the archive: an agent-only install
is told ``faultline[correlator,sink]`` at once, not ``[sink]`` and then ``[correlator]``).
"""

from __future__ import annotations

import importlib.util

__all__ = ["EXTRAS_OF_COMMAND", "EXTRA_OF_MODULE", "install_hint", "missing_extras"]

EXTRA_OF_MODULE = {
    "chdb": "sink",
    "clickhouse_connect": "sink",
    "rich": "sink",
    "msgspec": "sink",
    "faust": "correlator",
    "mode": "correlator",
    "aiokafka": "correlator",
    "kubernetes": "executor",
}
"""Top-level module -> the extra that installs it (``kubernetes`` also comes with ``scheduler``)."""

EXTRAS_OF_COMMAND = {
    "replay": ("correlator", "sink"),
    "demo": ("correlator", "sink"),
    "worker": ("correlator",),
    **{view: ("sink",) for view in ("sink", "status", "incident", "timeline", "report", "deadletters", "approvals",
                                    "archive")},
}
"""The extras a command needs whatever it is given (pyproject.toml's comments say which role runs what)."""


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a finder that refuses it, or a module half-imported without a spec
        return False


def missing_extras(command: str | None) -> list[str]:
    """The extras ``command`` needs of which a module is not installed, in name order."""
    needed = EXTRAS_OF_COMMAND.get(command or "", ())
    return sorted({extra for module, extra in EXTRA_OF_MODULE.items() if extra in needed and not _installed(module)})


def install_hint(exc: ModuleNotFoundError, command: str | None = None) -> str | None:
    """The message for a missing role dependency of ``command``, or None when ``exc`` is about something else."""
    module = (exc.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(module)
    if extra is None:
        return None
    extras = sorted({extra, *missing_extras(command)})
    modules = sorted({module} | {m for m, e in EXTRA_OF_MODULE.items() if e in extras and not _installed(m)})
    roles = " and ".join(repr(e) for e in extras)
    return (f"this command needs {', '.join(modules)}, which this installation left out: install the {roles} "
            f"role{'s' if len(extras) > 1 else ''} with `pip install 'faultline[{','.join(extras)}]'` "
            "(or 'faultline[all]' for every role)")
