"""Where the archive's owner listens, and with which password: random by default, fixed for Grafana.

By default the owner of a chDB directory serves it on a random loopback port with a random
token, both written to its endpoint file (:mod:`.endpoint_file`) for the processes that read
that file. A Grafana data source is configured once, so it needs an address and a password that
outlive the owner: ``faultline sink run`` (the owner, normally) serves at
``FAULTLINE_ARCHIVE_ENDPOINT_PORT`` with the password in ``FAULTLINE_ARCHIVE_ENDPOINT_PASSWORD_FILE``
when they are set (:func:`listen_for`, then :func:`configure`). Still on loopback only: Grafana
runs on the archive's host (host network), and no request runs SQL without the password. (What a
fixed port gives up: while no owner holds it, another local user may listen there and receive the
password a client sends; the random default has no such address to squat. OPERATIONS.md says so.)

Fail closed: a password file that cannot be read, is empty, is shorter than
:data:`MIN_PASSWORD_CHARS`, or that other users may read or write (its mode gives "others" any
of r or w: a Grafana container may share its group) is refused, with the setting named; the sink
does not start rather than serve with a weaker password or none.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MIN_PASSWORD_CHARS", "Listen", "PasswordFileError", "configure", "configured", "listen_for",
           "password_from_file"]

MIN_PASSWORD_CHARS = 16
"""A fixed password shorter than this is refused (the random token is 43 characters)."""
PORT_SETTING = "FAULTLINE_ARCHIVE_ENDPOINT_PORT"
PASSWORD_SETTING = "FAULTLINE_ARCHIVE_ENDPOINT_PASSWORD_FILE"


class PasswordFileError(ValueError):
    """The endpoint's password file cannot be used; the message names the setting and says why."""


@dataclass(frozen=True)
class Listen:
    """The loopback port (0: a random one) and password (None: a random token) the owner serves with."""

    port: int = 0
    password: str | None = None

    def __repr__(self) -> str:  # the password is a credential: never printed
        return f"Listen(port={self.port}, password={'set' if self.password else 'random'})"


_configured = Listen()


def configure(listen: Listen) -> None:
    """What an archive endpoint this process starts from now on listens with (the sink sets it)."""
    global _configured
    _configured = listen


def configured() -> Listen:
    return _configured


def password_from_file(path: Path) -> str:
    """The password in ``path`` (one trailing newline dropped), or :class:`PasswordFileError`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise PasswordFileError(f"{PASSWORD_SETTING}: cannot read {path}: {exc.strerror}") from None
    try:
        mode = os.fstat(fd)  # the file opened, not a name someone may swap after the check
        if not stat.S_ISREG(mode.st_mode):
            raise PasswordFileError(f"{PASSWORD_SETTING}: {path} is not a regular file")
        if mode.st_mode & (stat.S_IROTH | stat.S_IWOTH):
            raise PasswordFileError(f"{PASSWORD_SETTING}: {path} may be read or written by any user "
                                    f"(mode {stat.S_IMODE(mode.st_mode):o}); chmod o-rw it")
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read(4096)
    finally:
        os.close(fd)
    try:
        password = raw.decode()
    except UnicodeDecodeError:
        raise PasswordFileError(f"{PASSWORD_SETTING}: {path} is not UTF-8 text") from None
    password = password[:-1] if password.endswith("\n") else password
    if not password.strip():
        raise PasswordFileError(f"{PASSWORD_SETTING}: {path} is empty")
    if len(password) < MIN_PASSWORD_CHARS or any(c in password for c in "\r\n"):
        raise PasswordFileError(f"{PASSWORD_SETTING}: the password in {path} must be one line of "
                                f"{MIN_PASSWORD_CHARS} or more characters")
    return password


def listen_for(port: int, password_file: Path | None) -> Listen:
    """The :class:`Listen` of the two settings (unset: 0 and None, the random defaults)."""
    if not 0 <= port < 65536:
        raise ValueError(f"{PORT_SETTING}: {port} is not a port (0 for a random one)")
    return Listen(port, password_from_file(password_file) if password_file is not None else None)
