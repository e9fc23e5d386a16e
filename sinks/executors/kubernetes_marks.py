"""Where ``kubectl`` shows a fence: a node condition ``FaultlineFenced`` and an Event for each fence and release.

The fence itself is the cordon, the quarantine taint or the DeviceTaintRule (:mod:`sinks.executors.kubernetes`).
These marks put it where a Kubernetes user looks: ``kubectl describe node`` lists the condition (why, since
when, for which incident) and the node's events; ``kubectl get events --field-selector
involvedObject.kind=Node`` the history across nodes. Events are written as the kubelet writes a node's: in
namespace ``default``, the node's name as its uid, so ``describe node`` finds them.

The condition is ``True`` while faultline fences anything on the node (``reason`` ``Quarantined``,
``Cordoned`` or ``Drained``; the message names the GPU and the incident) and ``False`` (``Released``) once its
last fence is released; its ``lastTransitionTime`` moves only when the status flips.

Best effort, and said: the fence is done before its mark is written. A mark the API refuses (a role
without ``nodes/status`` or ``events``, the server away) is logged and named in the command's result,
never a failed command -- the fence ran, and running it again would not make the mark any likelier.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s

__all__ = ["CONDITION", "EVENTS_NAMESPACE", "FenceMarks"]

log = logging.getLogger("faultline.executor")

CONDITION = "FaultlineFenced"
EVENTS_NAMESPACE = "default"
COMPONENT = "faultline-executor"


class FenceMarks:
    """Writes the condition and the event of one fence or release (module docstring)."""

    def __init__(self, api: k8s.CoreV1Api, timeout_s: float = 30.0,
                 now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.api = api
        self.timeout_s = timeout_s
        self._now = now

    def fenced(self, node: str, reason: str, message: str) -> str:
        """Mark ``node`` fenced (``reason``: Quarantined, Cordoned, Drained); what to add to the result."""
        return self._mark(node, True, reason, message, "Warning", "FaultlineFenced")

    def released(self, node: str, still_fenced: bool, message: str) -> str:
        """Mark a release: the condition stays True while something else of the node is fenced."""
        if still_fenced:
            return self._mark(node, True, "Quarantined", message + "; other fences of the node hold", "Normal",
                              "FaultlineReleased")
        return self._mark(node, False, "Released", message, "Normal", "FaultlineReleased")

    def _mark(self, node: str, status: bool, reason: str, message: str, kind: str, event: str) -> str:
        missed = []
        try:
            self._condition(node, status, reason, message)
        except Exception as exc:  # noqa: BLE001 -- a mark never fails a fence that is applied (module docstring)
            missed.append(f"node condition {CONDITION} ({_why(exc)})")
        try:
            self._event(node, event, message, kind)
        except Exception as exc:  # noqa: BLE001 -- likewise
            missed.append(f"event ({_why(exc)})")
        if not missed:
            return ""
        log.warning("node %s: %s not recorded; the fence itself is applied", node, " and ".join(missed))
        return f"; not shown to kubectl: {' and '.join(missed)}"

    def _condition(self, node: str, status: bool, reason: str, message: str) -> None:
        now = self._now()
        current = self.api.read_node(node, _request_timeout=self.timeout_s)
        old = next((c for c in (current.status.conditions or []) if c.type == CONDITION), None) \
            if current.status else None
        since = now  # a new status: it changed now; the same: since it last changed
        if old is not None and old.status == ("True" if status else "False") and old.last_transition_time:
            since = old.last_transition_time
        condition: dict[str, Any] = {
            "type": CONDITION, "status": "True" if status else "False", "reason": reason, "message": message,
            "lastHeartbeatTime": _time(now), "lastTransitionTime": _time(since)}
        self.api.patch_node_status(node, {"status": {"conditions": [condition]}}, _request_timeout=self.timeout_s)

    def _event(self, node: str, reason: str, message: str, kind: str) -> None:
        now = self._now()
        body = k8s.CoreV1Event(
            metadata=k8s.V1ObjectMeta(generate_name=f"{node}.faultline-", namespace=EVENTS_NAMESPACE),
            involved_object=k8s.V1ObjectReference(kind="Node", name=node, uid=node, api_version="v1"),
            reason=reason, message=message, type=kind, count=1, first_timestamp=now, last_timestamp=now,
            source=k8s.V1EventSource(component=COMPONENT), reporting_component=COMPONENT,
            reporting_instance=COMPONENT)
        self.api.create_namespaced_event(EVENTS_NAMESPACE, body, _request_timeout=self.timeout_s)


def _time(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _why(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    return f"HTTP {status} {getattr(exc, 'reason', '')}".strip() if status else type(exc).__name__
