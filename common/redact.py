"""Secrets out of what people read: URLs with credentials, as they may appear in settings, logs and errors.

``FAULTLINE_ARCHIVE=http://faultline:<password>@clickhouse:8123/faultline``
carries a password; a webhook URL may carry a token in its query. Wherever
such a URL is printed, logged or put in an error, it goes through
:func:`mask_url` first.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

__all__ = ["mask_url", "MASK"]

MASK = "***"
_USERINFO = re.compile(r"//[^/@\s]*@")


def mask_url(url: str) -> str:
    """``url`` with its user info and query values replaced by ``***`` (the rest kept, to say where)."""
    try:
        parts = urlsplit(url)
    except ValueError:  # not even a URL: mask anything that looks like credentials
        return _USERINFO.sub(f"//{MASK}@", url)
    if "@" not in parts.netloc and not parts.query and not parts.fragment:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rpartition('@')[2]}"
    query = "&".join(f"{pair.partition('=')[0]}={MASK}" for pair in parts.query.split("&") if pair)
    return urlunsplit((parts.scheme, netloc, parts.path, query, MASK if parts.fragment else ""))
