"""Small JSON state files that survive an agent restart (read positions, last ids).

Writes are atomic (a temporary file renamed over the old one), so a crash
leaves either the old or the new state, never half of one; and durable (the
file synced before the rename, the directory after it), so a power cut right
after a save does not bring back the state from before it.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

__all__ = ["load_state", "save_state"]

log = logging.getLogger("faultline.agent.state")


def load_state(path: Path) -> dict[str, Any] | None:
    """The object saved at ``path``, or ``None`` when there is none (or it is unreadable)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable state file %s: %s", path, exc)
        return None
    return data if isinstance(data, dict) else None


def save_state(path: Path, data: dict[str, Any]) -> None:
    """Replace the state at ``path`` with ``data`` atomically and durably."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(data))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
