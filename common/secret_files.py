"""``FAULTLINE_<SETTING>_FILE``: a secret setting read from a file (a Docker or Kubernetes secret).

A container's environment is public to whoever may inspect it (``docker inspect``, the container
runtime's API, ``/proc/<pid>/environ`` of a process of the same user), so a key should not travel
there. Every secret setting -- each ``SecretStr`` of :class:`common.settings.Settings` and the
archive URL, which may carry a password -- may instead be given as the path of a file holding it:
``FAULTLINE_SIGNING_KEYS_FILE=/run/secrets/signing_keys`` reads the keys from that file (one
trailing newline dropped, as ``echo`` writes it). Docker Compose mounts its ``secrets:`` there
(``deploy/compose/compose.yaml``); systemd's ``LoadCredential=`` has its own way, files named like
the variables in ``$CREDENTIALS_DIRECTORY`` (:class:`~common.settings.Settings`' ``secrets_dir``).

Fail closed: a setting given both ways, a file that cannot be read, or an empty file is an error
naming the variable -- never a silent fall back to another value or to none.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

__all__ = ["SecretFileError", "SecretFiles", "secret_fields"]


class SecretFileError(ValueError):
    """A ``*_FILE`` variable that cannot be used; the message names it and says why."""


def secret_fields(settings_cls: type[BaseSettings], also: tuple[str, ...] = ()) -> list[str]:
    """The fields of ``settings_cls`` that hold secrets: every ``SecretStr`` one, and ``also``."""
    return [name for name, f in settings_cls.model_fields.items()
            if "SecretStr" in str(f.annotation) or name in also]


class SecretFiles(PydanticBaseSettingsSource):
    """A settings source: ``<prefix><FIELD>_FILE`` in the environment names a file holding that field's value."""

    def __init__(self, settings_cls: type[BaseSettings], fields: list[str], prefix: str,
                 environ: Mapping[str, str] | None = None) -> None:
        super().__init__(settings_cls)
        self._fields = fields
        self._prefix = prefix
        self._environ = environ if environ is not None else os.environ

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # everything is read in __call__

    def __call__(self) -> dict[str, Any]:
        env = {k.upper(): v for k, v in self._environ.items()}
        out: dict[str, Any] = {}
        for name in self._fields:
            var = f"{self._prefix}{name}".upper()
            path = env.get(f"{var}_FILE")
            if not path:
                continue
            if env.get(var):
                raise SecretFileError(f"both {var} and {var}_FILE are set: give the secret one way only")
            out[name] = read_secret(Path(path), f"{var}_FILE")
        return out


def read_secret(path: Path, var: str) -> str:
    """The secret in ``path`` (one trailing newline dropped); :class:`SecretFileError` naming ``var`` otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise SecretFileError(f"{var}={path}: cannot read it ({why})") from None
    value = text[:-1] if text.endswith("\n") else text
    value = value[:-1] if value.endswith("\r") else value
    if not value.strip():
        raise SecretFileError(f"{var}={path}: the file is empty")
    return value
