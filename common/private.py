"""Private at rest: what faultline keeps on disk is this user's alone, from creation.

The archive (every event, incident and command), the spool, the executors' ledger, the worker's
local state and the endpoint files hold what another local user must not read (issue 27: a copy of a
0755 chDB directory opened as ``nobody`` returned every row). The rule:

* **the process creates nothing others can read**: :func:`private_umask` (``umask 077``) at the start
  of the ``faultline`` command and of the worker, so chDB's, SQLite's and the spool's files are
  0600 and their directories 0700 whoever creates them;
* **every data directory is checked at start** (:func:`private_dir`): created 0700 when missing; an
  existing one that group or others may enter is made 0700 (said in the log), and when that is not
  possible (another user's directory) the stage refuses to start, saying which path and what to run.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

__all__ = ["NotPrivate", "PRIVATE_UMASK", "private_dir", "private_umask"]

log = logging.getLogger("faultline.private")

PRIVATE_UMASK = 0o077


class NotPrivate(PermissionError):
    """A data directory other users can read, that this process cannot make private."""


def private_umask() -> int:
    """Set the process's umask to 077 (files 0600, directories 0700); the previous one."""
    return os.umask(PRIVATE_UMASK)


def private_dir(path: str | os.PathLike[str]) -> Path:
    """``path`` as a directory only its owner (this user) may enter: created 0700, or made so, or refused."""
    p = Path(path)
    p.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = p.stat()
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid != os.geteuid():
        raise NotPrivate(f"{p} belongs to uid {st.st_uid}, not this user ({os.geteuid()}): faultline keeps its "
                         "data in a directory of its own user only; point the setting at one (or chown it)")
    if mode & 0o077:
        try:
            p.chmod(0o700)
        except OSError as exc:
            raise NotPrivate(f"{p} has mode {mode:04o} (other users may read it) and could not be made 0700 "
                             f"({exc}): run `chmod 700 {p}`") from None
        log.warning("%s had mode %04o (other local users could read it): made 0700", p, mode)
    return p
