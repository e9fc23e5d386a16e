"""``faultline topics apply``: make a broker's topics match the plan, idempotently (it only creates and grows).

The replication factor is the planned one, or the number of brokers where the cluster has fewer
(:func:`common.replication.replication_for`), with ``min.insync.replicas`` to match.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from common.replication import min_insync, replication_for
from deploy.topics.plan import Plan

__all__ = ["Action", "apply_plan", "render_actions"]


@dataclass(frozen=True)
class Action:
    """One thing ``apply`` did (or, in a dry run, would do) to one topic."""

    topic: str
    kind: Literal["create", "partitions", "config", "ok", "warn"]
    detail: str

    def __str__(self) -> str:
        return f"{self.kind:<10} {self.topic}: {self.detail}"


@dataclass
class _Existing:
    partitions: dict[str, int] = field(default_factory=dict)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)


def _existing(admin: AdminClient, names: list[str], timeout: float) -> _Existing:
    meta = admin.list_topics(timeout=timeout)
    found = _Existing()
    for name in names:
        t = meta.topics.get(name)
        if t is not None and t.error is None:
            found.partitions[name] = len(t.partitions)
    if found.partitions:
        resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in found.partitions]
        for res, fut in admin.describe_configs(resources, request_timeout=timeout).items():
            entries = fut.result(timeout=timeout)
            found.configs[res.name] = {k: str(v.value) for k, v in entries.items()}
    return found


def _brokers(admin: AdminClient, timeout: float) -> int:
    return max(1, len(admin.list_topics(timeout=timeout).brokers))


def _wait(futures: Mapping[Any, Any], what: str, timeout: float, tolerate: str | None = None) -> None:
    """Wait for every admin future; ``tolerate`` names an error that means another apply got there first."""
    for key, fut in futures.items():
        try:
            fut.result(timeout=timeout)
        except KafkaException as exc:
            if tolerate is None or tolerate not in str(exc):
                raise RuntimeError(f"{what} {getattr(key, 'name', key)}: {exc}") from exc


def apply_plan(admin_conf: Mapping[str, Any], plan: Plan, *, dry_run: bool = False,
               timeout: float = 30.0) -> list[Action]:
    """Make the broker's topics match ``plan`` (see the module docstring); the actions, in order."""
    admin = AdminClient(dict(admin_conf))
    brokers = _brokers(admin, timeout)
    existing = _existing(admin, [t.name for t in plan.topics], timeout)
    actions: list[Action] = []
    create: list[NewTopic] = []
    grow: list[NewPartitions] = []
    alter: list[ConfigResource] = []
    short = sorted({t.replication for t in plan.topics if t.replication > brokers})
    if short:
        actions.append(Action("*", "warn", f"replication {brokers}, not {short[-1]}: the cluster has "
                                           f"{brokers} broker(s)"))
    for t in plan.topics:
        replication = replication_for(brokers, planned=t.replication)
        configs = {**t.configs, "min.insync.replicas": str(min_insync(replication))}
        if t.name not in existing.partitions:
            create.append(NewTopic(t.name, num_partitions=t.partitions, replication_factor=replication,
                                   config=configs))
            actions.append(Action(t.name, "create", f"{t.partitions} partitions, replication {replication}, "
                                                    + ", ".join(f"{k}={v}" for k, v in configs.items())))
            continue
        changed = False
        have = existing.partitions[t.name]
        if have < t.partitions:
            grow.append(NewPartitions(t.name, t.partitions))
            actions.append(Action(t.name, "partitions", f"{have} -> {t.partitions}"))
            changed = True
        elif have > t.partitions:
            actions.append(Action(t.name, "warn", f"has {have} partitions, the plan {t.partitions}: Kafka "
                                                  "cannot remove partitions (recreate the topic to shrink it)"))
        current = existing.configs.get(t.name, {})
        differ = {k: v for k, v in configs.items() if current.get(k) != v}
        if differ:
            alter.append(ConfigResource(ConfigResource.Type.TOPIC, t.name, incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in differ.items()]))
            actions.append(Action(t.name, "config", ", ".join(f"{k}: {current.get(k)} -> {v}"
                                                               for k, v in differ.items())))
            changed = True
        if not changed:
            actions.append(Action(t.name, "ok", f"{have} partitions, configs as planned"))
    if not dry_run:
        if create:
            # Several stages apply the plan as they start: a topic another one just made is fine.
            _wait(admin.create_topics(create, operation_timeout=timeout, request_timeout=timeout),
                  "creating topic", timeout, tolerate="TOPIC_ALREADY_EXISTS")
        if grow:
            _wait(admin.create_partitions(grow, operation_timeout=timeout, request_timeout=timeout),
                  "adding partitions to", timeout)
        if alter:
            _wait(admin.incremental_alter_configs(alter, request_timeout=timeout), "setting configs of", timeout)
    return actions


def render_actions(actions: list[Action], dry_run: bool) -> str:
    """What ``apply`` did, one line per action, and a summary line."""
    changes = sum(1 for a in actions if a.kind in ("create", "partitions", "config"))
    verb = "would change" if dry_run else "changed"
    return "\n".join([*map(str, actions), f"{verb} {changes} thing(s); "
                      f"{sum(1 for a in actions if a.kind == 'ok')} topic(s) already as planned"])

