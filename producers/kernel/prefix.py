"""Strip what log transports put in front of a kernel message.

The same kernel message reaches us in several wrappings:

- ``/dev/kmsg``: ``6,1234,5678,-;NVRM: ...`` (priority, sequence, usec, flags)
- ``dmesg``: ``[12345.678901] NVRM: ...`` or, with ``-T``,
  ``[Wed Apr 22 03:14:17 2026] NVRM: ...``
- syslog / ``journalctl -k``: ``Apr 22 03:14:17 host kernel: NVRM: ...`` or
  the ISO form ``2026-04-22T03:14:17+0000 host kernel: ...``, possibly followed
  by a dmesg timestamp.

:func:`strip_prefix` returns the bare message, so the parsers can anchor on it.
"""

from __future__ import annotations

import re

__all__ = ["strip_prefix"]

_KMSG = re.compile(r"\d+,\d+,\d+,[^;]*;")
_SYSLOG = re.compile(
    r"(?:[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d(?:\.\d+)?|\d{4}-\d\d-\d\d[T ][\d:.]+(?:Z|[+-]\d\d:?\d\d)?)"
    r" \S+ kernel: "
)
_DMESG = re.compile(r"\[ *\d+\.\d+\] ?|\[[A-Z][a-z]{2} [A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d \d{4}\] ?")


def strip_prefix(line: str) -> str:
    """Return the kernel message without a kmsg, syslog/journal or dmesg prefix.

    >>> strip_prefix("Apr 22 03:14:17 host kernel: [ 12.5] NVRM: hi")
    'NVRM: hi'
    """
    s = line.strip()
    m = _KMSG.match(s) or _SYSLOG.match(s)
    if m:
        s = s[m.end() :]
    m = _DMESG.match(s)
    if m:
        s = s[m.end() :]
    return s
