"""Kubernetes API calls as the executor sees them: errors that name the operation, and pages.

Every call of the Kubernetes backend runs inside :func:`api_call`, so an API
refusal (403, 404, 409, 429...) or a transport failure becomes an
:class:`~sinks.executors.core.ExecutionError` whose message says what was
being done and what the API answered -- which is what a person reads in the
command's result. :class:`ApiFailure` keeps the HTTP status for the callers
that tolerate some (a 404 on a delete, a 409 on a guarded write). And what a drain asks of a
listed pod: whether it may be evicted, its name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from sinks.executors.core import ExecutionError

__all__ = ["ApiFailure", "MAX_PAGES", "MIRROR_POD", "all_pages", "api_call", "describe", "evictable", "label_value",
           "pod_ident", "pod_name"]

MAX_PAGES = 200


class ApiFailure(ExecutionError):
    """The API answered with an error status (kept, for the callers that tolerate some)."""

    def __init__(self, message: str, status: int | None) -> None:
        super().__init__(message)
        self.status = status


@contextmanager
def api_call(what: str) -> Iterator[None]:
    """API and transport errors as :class:`ExecutionError` naming the operation."""
    try:
        yield
    except ApiException as exc:
        raise ApiFailure(f"{what}: {describe(exc)}", exc.status) from exc
    except Urllib3Error as exc:
        raise ExecutionError(f"{what}: {type(exc).__name__}: {exc}") from exc


def describe(exc: ApiException) -> str:
    """``HTTP <status> <reason>: <the API's message>``."""
    message = ""
    if exc.body:
        match = re.search(r'"message"\s*:\s*"((?:[^"\\]|\\.)*)"', str(exc.body))
        message = match.group(1) if match else str(exc.body)[:200]
    return f"HTTP {exc.status} {exc.reason or ''}".rstrip() + (f": {message}" if message else "")


def all_pages(what: str, list_call: Callable[..., Any], timeout_s: float, *, page_size: int = 500,
              **kwargs: Any) -> list[Any]:
    """Every item of a list call, ``page_size`` at a time (at most :data:`MAX_PAGES` pages)."""
    items: list[Any] = []
    token: str | None = None
    for _ in range(MAX_PAGES):
        with api_call(what):
            page = list_call(limit=page_size, _continue=token, _request_timeout=timeout_s, **kwargs)
        items.extend(page.items or [])
        token = page.metadata._continue if page.metadata else None
        if not token:
            return items
    raise ExecutionError(f"{what}: more than {MAX_PAGES} pages of {page_size}: refusing to go on")


#: The annotation of a static pod's mirror: the kubelet owns it; evicting it does nothing.
MIRROR_POD = "kubernetes.io/config.mirror"


def evictable(pod: k8s.V1Pod) -> bool:
    """Not a DaemonSet's pod, not a static (mirror) pod, not finished."""
    meta = pod.metadata
    if meta is None or meta.name is None or meta.namespace is None:
        return False
    if any(ref.kind == "DaemonSet" for ref in meta.owner_references or []):
        return False
    if MIRROR_POD in (meta.annotations or {}):
        return False
    return not (pod.status and pod.status.phase in ("Succeeded", "Failed"))


def pod_ident(pod: k8s.V1Pod) -> tuple[str, str]:
    """(namespace, name) of a listed pod."""
    meta = pod.metadata
    if meta is None or not meta.name or not meta.namespace:
        raise ExecutionError("the API listed a pod without a name or namespace")
    return meta.namespace, meta.name


def pod_name(pod: k8s.V1Pod) -> str:
    meta = pod.metadata
    return f"{meta.namespace}/{meta.name}" if meta else "?"


def label_value(text: str) -> str:
    """``text`` as a valid label/taint value: [A-Za-z0-9-_.], at most 63, alphanumeric at both ends."""
    value = re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:63]
    return value.strip("-_.")
