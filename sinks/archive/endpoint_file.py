"""The endpoint file: where the owner of a chDB directory serves it, and how a reader knows it is the owner.

The owner (:class:`~sinks.archive.endpoint.ArchiveEndpoint`) writes ``faultline-endpoint.json``
into the directory it serves: the directory's path, its process id, the loopback port and a
random token, readable by the owner's user only. A reader (:mod:`sinks.archive.connection`)
trusts it only when it names this very directory (a copied directory's file names the original),
its process is alive, and the port answers the reader's nonce with :func:`identity_proof` (a
process that took the port of a dead owner cannot): only then does it send the token, as the
password of every request.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["ENDPOINT_FILE", "ENDPOINT_USER", "IDENTITY_PATH", "EndpointFile", "identity_proof"]

ENDPOINT_FILE = "faultline-endpoint.json"
"""The endpoint file's name, in the chDB data directory it serves."""
ENDPOINT_USER = "faultline"
"""The user name clients present (the token is the password; the name is not checked)."""
IDENTITY_PATH = "/faultline-identity"
"""Where the owner answers a client's nonce (:func:`identity_proof`) before the client trusts it."""


@dataclass(frozen=True)
class EndpointFile:
    """Where the owner of a chDB directory serves it: written by the owner, read by the others."""

    path: str  # the data directory served (a copied directory's file names the original: not ours)
    pid: int
    port: int
    token: str

    @staticmethod
    def location(data_dir: str) -> Path:
        return Path(data_dir) / ENDPOINT_FILE

    @classmethod
    def read(cls, data_dir: str) -> EndpointFile | None:
        """The endpoint file of ``data_dir``, or None (absent, unreadable, malformed, another directory's)."""
        try:
            doc = json.loads(cls.location(data_dir).read_text(encoding="utf-8"))
            found = cls(path=str(doc["path"]), pid=int(doc["pid"]), port=int(doc["port"]), token=str(doc["token"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return found if found.path == data_dir else None

    def alive(self) -> bool:
        """Whether the process that wrote the file still runs (it may still have gone since)."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # another user's process: alive (and its token file unreadable to us anyway)
        return True

    def write(self) -> None:
        """Write atomically, readable by this user only (the token is a credential)."""
        target = self.location(self.path)
        fd, tmp = tempfile.mkstemp(prefix=".endpoint-", dir=self.path)  # mkstemp: mode 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(asdict(self), f)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def remove(self) -> None:
        """Remove the file if it is still this one (a successor may have written its own)."""
        if EndpointFile.read(self.path) == self:
            self.location(self.path).unlink(missing_ok=True)


def identity_proof(token: str, nonce: str) -> str:
    """What the owner answers at :data:`IDENTITY_PATH`: an HMAC of the client's nonce under the token.

    A client checks it before it sends its token or its rows: whatever listens on the port of an
    endpoint file left by a dead owner cannot answer it, so it gets neither.
    """
    return hmac.new(token.encode(), nonce.encode(), hashlib.sha256).hexdigest()
