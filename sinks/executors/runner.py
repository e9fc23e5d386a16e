"""Kafka → executor → Kafka: consume a namespace's commands, publish one result per command.

The runner is the executor core's only contact with the broker:

* **commands** — a consumer group (``<namespace>.executor.<name>``). Each
  command is handed to :meth:`Executor.handle`; its result is published to
  ``command-results`` (keyed by command id) and only *after* the broker
  confirmed it is the command's offset committed. A crash in between
  re-delivers the command, and the ledger turns it into a duplicate.
* **approvals** — read from the beginning at every start (no group: the
  approvals view is rebuilt, it is small), then followed; each new decision
  goes to :meth:`Executor.decide`, which may run a held command. A decision
  that is not an operator's (unsigned, unknown key, no content hash) goes to
  ``deadletters`` with the reason.
* **command-results** — read to its end at start and whenever the group
  hands this runner partitions, so the ledger knows every id this executor
  (under its name, on any machine) has settled before it sees a command.

At start the runner also republishes results that were produced but never
confirmed (the ledger's outbox), and reports attempts interrupted by a crash
as failed. Records that do not decode go to ``deadletters`` with the reason.

Every loop ends when the ``stop`` event is set; waiting for the broker is
bounded by timeouts.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from prometheus_client import Counter
from pydantic import BaseModel, ValidationError

from common import metrics as stage_metrics
from common.deadletters import dead_letter
from common.kafka_reader import Backoff, ReadErrors, TopicReader, read_topic
from sinks.executors.core import Executor
from streams.decisions import Approval, Command, CommandResult
from streams.topics import topic_name

__all__ = ["ExecutorRunner", "RESULTS_PUBLISHED"]

log = logging.getLogger(__name__)

RESULTS_PUBLISHED = Counter("faultline_executor_results", "Command results published", ["executor", "status"])

_BACKOFF = Backoff(first_s=0.2, max_s=5.0)

_M = TypeVar("_M", bound=BaseModel)


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _follower(conf: Mapping[str, Any], topic: str, group: str, timeout_s: float) -> TopicReader:
    """A reader of every partition of ``topic`` from its beginning, with no group and no commits."""
    reader = TopicReader(conf, topic, group, stall_s=timeout_s)
    parts = reader.partitions()
    if not parts:
        reader.close()
        raise RuntimeError(f"topic {topic} does not exist: create the namespace's topics first")
    reader.assign({p: OFFSET_BEGINNING for p in parts})
    return reader


class ExecutorRunner:
    """Runs one :class:`Executor` against one topic namespace."""

    def __init__(
        self,
        executor: Executor,
        conf: Mapping[str, Any],
        namespace: str,
        *,
        group_id: str | None = None,
        clock: Callable[[], datetime] = _utcnow,
        timeout_s: float = 30.0,
    ) -> None:
        if executor.trust.namespace not in (None, namespace):  # its ledger and breaker are another namespace's
            raise ValueError(f"executor {executor.name} acts in namespace {executor.trust.namespace!r}, "
                             f"not {namespace!r}")
        self.executor = executor
        self.namespace = namespace
        self.clock = clock
        self.timeout_s = timeout_s
        self._topics = {s: topic_name(namespace, s)
                        for s in ("commands", "command-results", "approvals", "deadletters")}
        group = group_id or f"{namespace}.executor.{executor.name}"
        self._commands = Consumer({**conf, "group.id": group, "enable.auto.commit": False,
                                   "auto.offset.reset": "earliest",
                                   "topic.metadata.refresh.interval.ms": 10_000})
        self._commands_errors = ReadErrors(f"executor {executor.name}: {self._topics['commands']}",
                                           quiet=frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART}))
        self._results = _follower(conf, self._topics["command-results"], f"{group}.results-reader", timeout_s)
        self._approvals = _follower(conf, self._topics["approvals"], f"{group}.approvals-reader", timeout_s)
        self._producer = Producer({**conf, "enable.idempotence": True, "acks": "all", "linger.ms": 0})
        self._conf = dict(conf)
        self._stop = threading.Event()
        self._closed = False

    def close(self) -> None:
        """Leave the group and close every client; idempotent."""
        if not self._closed:
            self._closed = True
            self._producer.flush(self.timeout_s)
            self._commands.close()
            self._results.close()
            self._approvals.close()

    def __enter__(self) -> ExecutorRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- loops ----------------------------------------------------------------------------

    def run(self, stop: threading.Event, poll_s: float = 0.5) -> None:
        """Recover, then carry commands out until ``stop`` is set."""
        self._stop = stop
        self._recover()
        while not stop.is_set():
            self._approvals.follow(self._on_approval)
            msg = self._commands.poll(poll_s)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                self._commands_errors.handle(err)  # raises when fatal
                continue
            self._commands_errors.recovered()
            if self._on_command(msg):
                self._commit(msg)

    def _recover(self) -> None:
        """Rebuild state from the topics, publish what is owed, then subscribe to commands."""
        self._results.catch_up(self._on_result)
        self._attach_missing_commands()
        for result in self.executor.recover(self.clock()):
            self._publish(result)
        self._approvals.catch_up(self._on_approval)
        self._commands.subscribe([self._topics["commands"]], on_assign=self._on_assign)

    # --- records ----------------------------------------------------------------------------

    def _on_command(self, msg: Message) -> bool:
        """Handle one command record; True when its offset may be committed."""
        cmd = self._decode(msg, Command)
        if cmd is None:
            return True
        result = self.executor.handle(cmd, self.clock())
        return self._publish(result)

    def _on_approval(self, msg: Message) -> None:
        approval = self._decode(msg, Approval)
        if approval is None:
            return
        why = self.executor.refuse_approval(approval)
        if why is not None:
            self._dead_letter(msg, f"refused: {why}")
            return
        result = self.executor.decide(approval, self.clock())
        if result is not None:
            self._publish(result)

    def _on_result(self, msg: Message) -> None:
        value = msg.value()
        try:
            self.executor.absorb(CommandResult.model_validate_json(value or b""))
        except ValidationError:
            log.debug("executor %s: ignoring an undecodable result at %s", self.executor.name, msg.offset())

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """New partitions of commands: learn every result published so far before handling any."""
        self._results.catch_up(self._on_result)

    def _attach_missing_commands(self) -> None:
        """Held ids learnt from the results topic need their commands, from the commands topic."""
        missing = set(self.executor.ledger.missing_commands())
        if not missing:
            return
        for value in read_topic(self._conf, self._topics["commands"], timeout=self.timeout_s):
            try:
                cmd = Command.model_validate_json(value)
            except ValidationError:
                continue
            if cmd.id in missing and self.executor.attach(cmd, self.clock()):
                missing.discard(cmd.id)
        if missing:
            log.warning("executor %s: commands held for approval but gone from the topic: %s",
                        self.executor.name, sorted(missing))

    # --- output -----------------------------------------------------------------------------

    def _publish(self, result: CommandResult) -> bool:
        """Send ``result`` until the broker confirms it (or stop is set); True when it did."""
        failures = 0
        while not self._deliver(self._topics["command-results"], result.command, result):
            failures += 1
            if self._stop.wait(_BACKOFF.after(failures)):
                return False
        self.executor.published(result)
        RESULTS_PUBLISHED.labels(executor=self.executor.name, status=result.status).inc()
        stage_metrics.COMMAND_OUTCOMES.labels(result.status, self.executor.name).inc()
        log.info("executor %s: %s %s: %s", self.executor.name, result.command, result.status, result.detail)
        return True

    def _deliver(self, topic: str, key: str, record: BaseModel) -> bool:
        errors: list[KafkaError] = []

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                errors.append(err)

        try:
            self._producer.produce(topic, key=key.encode(), value=record.model_dump_json().encode(),
                                   on_delivery=delivered)
        except (KafkaException, BufferError) as exc:
            log.warning("executor %s: could not send to %s: %s", self.executor.name, topic, exc)
            return False
        left = self._producer.flush(self.timeout_s)
        if left or errors:
            log.warning("executor %s: %s not confirmed: %s", self.executor.name, topic,
                        errors[0] if errors else "timed out")
            return False
        return True

    def _decode(self, msg: Message, model: type[_M]) -> _M | None:
        """The record as ``model``, or None after sending it to dead letters with the reason."""
        value = msg.value() or b""
        try:
            return model.model_validate_json(value)
        except ValidationError as exc:
            self._dead_letter(msg, f"{type(exc).__name__}: {exc}")
            return None

    def _dead_letter(self, msg: Message, reason: str) -> None:
        letter = dead_letter(f"executor:{self.executor.name}:{msg.topic()}", reason, msg.value() or b"", self.clock())
        self._deliver(self._topics["deadletters"], letter.stage, letter)

    def _commit(self, msg: Message) -> None:
        try:
            self._commands.commit(message=msg, asynchronous=False)
        except KafkaException as exc:
            # The result is out and the ledger has it: a re-delivery becomes skipped_duplicate.
            log.warning("executor %s: offset commit failed: %s", self.executor.name, exc)
