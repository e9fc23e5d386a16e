"""The Kafka ACL plan: what each service's principal may do on one namespace, and nothing more.

Anyone who can write to ``<ns>.commands`` can fence and restart the fleet (commands are also
signed: :mod:`streams.signing`), and anyone who can write to ``<ns>.events`` can invent an
outage; so on a broker with an authorizer (``allow.everyone.if.no.acl.found=false``) each stage
authenticates as a user of its own and is granted exactly what its code does:

============  ===================================================================================
service       grants (``ns`` = the namespace, ``app`` = ``faultline-correlator.<ns>``)
============  ===================================================================================
agent         write ``events``, ``deadletters``, ``heartbeats`` (node agents, scheduler sources, Slurm hooks); read
              them (no group): after a crash the spool reads back what it had delivered unrecorded
operator      write ``events`` (quarantine/release, signed with an operator key: the correlator
              ignores unsigned ones, so an agent's credential cannot release hardware),
              ``approvals`` (approve/deny); read ``commands`` (an approval names the exact
              content it approves) and ``command-results`` (which content an executor holds).
              Operators run as their own principal, never an agent's
correlator    read ``events``; write ``incidents``, ``commands``, ``deadletters``, ``control``,
              ``heartbeats`` (every stage writes its own heartbeat there);
              create/read/write its Faust topics ``app-emitted-changelog`` (and alter it: it
              grows with ``events``), ``app-snapshots`` (its state snapshots; grown
              likewise) and ``app-__assignor-__leader``; group ``app`` (a takeover also
              reads its committed offset)
sink          read ``events``, ``incidents``, ``commands``, ``command-results``,
              ``deadletters``, ``heartbeats``; write ``heartbeats``; group ``<ns>.archive``
executor      read ``commands``, ``approvals``, ``command-results``; write
              ``command-results``, ``deadletters``, ``heartbeats``; groups ``<ns>.executor.*`` (prefixed)
============  ===================================================================================

Every grant is on a literal topic or group name but the executor's groups (one per executor
name). ``read_topic``'s throwaway groups need no grant: it assigns partitions, commits nothing
and skips error records. Producers are idempotent (``enable.idempotence``), which Kafka >= 2.8
allows with WRITE on any topic, so nobody gets ``IDEMPOTENT_WRITE`` on the cluster. Nobody but the admin (a super user) creates topics, except
the correlator its own three topics, and nobody deletes any. The admin runs ``faultline
topics apply`` and ``faultline acls apply``; ``faultline replay`` creates and deletes a
namespace of its own, so it runs as the admin too.

``faultline acls plan`` prints the table for the configured namespace; ``faultline acls apply
[--dry-run]`` creates the missing bindings (idempotent; it removes nothing, and reports bindings
of these users that the plan does not hold). ``tests/deploy/test_secured_kafka.py`` runs each
service under its grants on a broker with the authorizer on, and checks the refusals.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from streams.topics import correlator_app_id, topic_name

__all__ = ["SERVICES", "DEFAULT_USERS", "Grant", "acl_plan", "render_plan", "apply_acls", "correlator_app_id"]

SERVICES: tuple[str, ...] = ("agent", "operator", "correlator", "sink", "executor")
DEFAULT_USERS: dict[str, str] = {service: f"faultline-{service}" for service in SERVICES}

Resource = Literal["topic", "group"]
Pattern = Literal["literal", "prefixed"]
Operation = Literal["READ", "WRITE", "CREATE", "ALTER", "DESCRIBE"]

_RESOURCE_TYPES = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP}
_PATTERN_TYPES = {"literal": ResourcePatternType.LITERAL, "prefixed": ResourcePatternType.PREFIXED}


@dataclass(frozen=True, order=True)
class Grant:
    """One ALLOW binding: ``user`` may ``operation`` on the ``resource`` named ``name``."""

    service: str
    user: str
    resource: Resource
    pattern: Pattern
    name: str
    operation: Operation
    why: str

    @property
    def principal(self) -> str:
        return f"User:{self.user}"

    def binding(self) -> AclBinding:
        return AclBinding(_RESOURCE_TYPES[self.resource], self.name, _PATTERN_TYPES[self.pattern],
                          self.principal, "*", AclOperation[self.operation], AclPermissionType.ALLOW)

    def key(self) -> tuple[str, str, str, str, str]:
        return (self.principal, self.resource, self.pattern, self.name, self.operation)


def acl_plan(namespace: str, users: Mapping[str, str] | None = None) -> list[Grant]:
    """Every grant of every service on ``namespace``; ``users`` overrides :data:`DEFAULT_USERS`."""
    unknown = set(users or {}) - set(SERVICES)
    if unknown:
        raise ValueError(f"unknown services {sorted(unknown)}; the services are {', '.join(SERVICES)}")
    who = {**DEFAULT_USERS, **(users or {})}
    app = correlator_app_id(namespace)
    grants: list[Grant] = []

    def grant(service: str, resource: Resource, name: str, operations: Sequence[Operation], why: str,
              pattern: Pattern = "literal") -> None:
        grants.extend(Grant(service, who[service], resource, pattern, name, op, why) for op in operations)

    def topic(suffix: str) -> str:
        return topic_name(namespace, suffix)

    grant("agent", "topic", topic("events"), ["WRITE", "READ"], "publishes what the node observes; after a "
          "crash reads back what it had delivered unrecorded, so nothing is sent twice (producers/spool/readback.py)")
    grant("agent", "topic", topic("deadletters"), ["WRITE", "READ"], "observations it could not parse (read "
          "back likewise)")

    grant("operator", "topic", topic("events"), ["WRITE"], "faultline quarantine / release")
    grant("operator", "topic", topic("approvals"), ["WRITE"], "faultline approve / deny")
    grant("operator", "topic", topic("commands"), ["READ"], "faultline approve / deny: the content it decides on")
    grant("operator", "topic", topic("command-results"), ["READ"], "faultline approve / deny: which content an "
          "executor holds, when forgeries share its id")

    grant("correlator", "topic", topic("events"), ["READ"], "judges the cell's events")
    for suffix, why in (("incidents", "its incidents"), ("commands", "its commands (signed)"),
                        ("deadletters", "undecodable events"), ("control", "end-of-capture markers")):
        grant("correlator", "topic", topic(suffix), ["WRITE"], why)
    grant("correlator", "topic", f"{app}-emitted-changelog", ["CREATE", "ALTER", "READ", "WRITE"],
          "the `emitted` table's changelog; grown with the events topic")
    grant("correlator", "topic", f"{app}-snapshots", ["CREATE", "ALTER", "READ", "WRITE"],
          "its state snapshots (correlators/snapshots.py): only it may write them; grown with the events topic")
    grant("correlator", "topic", f"{app}-__assignor-__leader", ["CREATE", "READ", "WRITE"],
          "Faust's leader-assignor topic")
    grant("correlator", "group", app, ["READ"], "the Faust consumer group")

    for suffix in ("events", "incidents", "commands", "command-results", "deadletters", "heartbeats"):
        grant("sink", "topic", topic(suffix), ["READ"], "archived")
    for service in ("agent", "correlator", "sink", "executor"):
        grant(service, "topic", topic("heartbeats"), ["WRITE"], "its own heartbeat, for status (streams/health.py)")
    grant("sink", "group", f"{namespace}.archive", ["READ"], "the archive sink's consumer group")

    grant("executor", "topic", topic("commands"), ["READ"], "the commands it carries out")
    grant("executor", "topic", topic("approvals"), ["READ"], "people's approvals and denials")
    grant("executor", "topic", topic("command-results"), ["READ", "WRITE"], "its ledger: results it wrote")
    grant("executor", "topic", topic("deadletters"), ["WRITE"], "commands it refused as malformed")
    grant("executor", "group", f"{namespace}.executor.", ["READ"], "one group per executor name",
          pattern="prefixed")
    return grants


def render_plan(grants: Sequence[Grant]) -> str:
    """The plan as a table people read (``faultline acls plan``)."""
    rows = [("service", "principal", "operation", "resource", "name", "why")]
    rows += [(g.service, g.principal, g.operation, g.resource,
              g.name + ("*" if g.pattern == "prefixed" else ""), g.why) for g in grants]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1]
                     for r in rows)


def _existing(admin: AdminClient, principals: set[str], timeout: float) -> set[tuple[str, str, str, str, str]]:
    """The ALLOW bindings the broker holds for ``principals``, as :meth:`Grant.key` tuples."""
    found: set[tuple[str, str, str, str, str]] = set()
    names = {v: k for k, v in _RESOURCE_TYPES.items()}
    patterns = {v: k for k, v in _PATTERN_TYPES.items()}
    for principal in sorted(principals):
        # None matches any name and any host (the stubs say str; librdkafka takes NULL).
        flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal, None,  # type: ignore[arg-type]
                               AclOperation.ANY, AclPermissionType.ANY)
        for b in admin.describe_acls(flt, request_timeout=timeout).result(timeout=timeout):
            resource, pattern = names.get(b.restype), patterns.get(b.resource_pattern_type)
            if resource and pattern and b.permission_type == AclPermissionType.ALLOW:
                found.add((b.principal, resource, pattern, b.name, b.operation.name))
            else:
                found.add((b.principal, str(b.restype.name).lower(), str(b.resource_pattern_type.name).lower(),
                           b.name, f"{b.permission_type.name} {b.operation.name}"))
    return found


def _wait_until_listed(admin: AdminClient, grants: Sequence[Grant], timeout: float) -> None:
    """Until the broker lists every one of ``grants``: a created ACL reaches the authorizer through the
    metadata log, a moment after the request returns; ``apply`` returns once it is enforced."""
    deadline = time.monotonic() + timeout
    wanted = {g.key() for g in grants}
    while True:
        absent = wanted - _existing(admin, {g.principal for g in grants}, timeout)
        if not absent:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(absent)} created ACLs not listed by the broker after {timeout:.0f}s, e.g. "
                               f"{' '.join(sorted(absent)[0])}; run apply again to check")
        time.sleep(0.2)


def apply_acls(admin_conf: Mapping[str, Any], grants: Sequence[Grant], *, dry_run: bool = False,
               timeout: float = 30.0) -> list[str]:
    """Create the plan's missing bindings (as a user allowed to ALTER the cluster); what was done, in words."""
    admin = AdminClient(dict(admin_conf))
    have = _existing(admin, {g.principal for g in grants}, timeout)
    missing = [g for g in grants if g.key() not in have]
    planned = {g.key() for g in grants}
    report = [f"{'would create' if dry_run else 'created'} {g.principal} {g.operation} {g.resource} "
              f"{g.name}{'*' if g.pattern == 'prefixed' else ''}" for g in missing]
    report += [f"not in the plan (left alone; remove it if unneeded): {' '.join(k)}" for k in sorted(have - planned)]
    if missing and not dry_run:
        for binding, future in admin.create_acls([g.binding() for g in missing], request_timeout=timeout).items():
            try:
                future.result(timeout=timeout)
            except Exception as exc:
                raise RuntimeError(f"could not create the ACL {binding}: {exc}; apply ACLs as the Kafka "
                                   "admin (a super user or one allowed to ALTER the cluster)") from exc
        _wait_until_listed(admin, missing, timeout)
    if not report:
        report.append(f"all {len(grants)} bindings already in place")
    return report
