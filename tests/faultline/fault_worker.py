"""A correlator worker that SIGKILLs itself at a fault point the test names (tests only).

The fault point is armed by ``FAULTLINE_TEST_KILL`` (read here, never by faultline itself);
the worker is otherwise the production one (:func:`correlators.app.make_app`), keys and all:

* ``acked:K`` -- once the broker acknowledged every decision of events offset ``K``, before
  ``emitted`` records it: :attr:`~correlators.worker.publisher.Publisher.on_acknowledged`, the
  publisher's own fault-injection hook;
* ``between:K`` -- in the middle of settling offset ``K``: its first decision handed over and
  acknowledged, the second not yet handed to the producer;
* ``rebuild:N`` -- in the first takeover's catch-up, after folding ``N`` records of the log (the
  state half built, nothing installed yet);
* ``installed`` -- in the first takeover, its state built and installed, before its outcomes are
  published and before the record that called it is judged.

At ``acked`` and ``between`` it stalls until the consumer has committed every record before the one
in flight (at most :data:`COMMIT_WAIT_S`), then dies. Before it dies it writes one line
(``test: SIGKILL at ...``, with the ids of the decisions in
question) straight to its log, so the test knows where it landed. Run as the worker is:
``python tests/faultline/fault_worker.py worker -l warn ...``.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import signal
from collections.abc import Iterable, Iterator
from typing import Any

import correlators.rebuild
from common.settings import Settings
from correlators.app import make_app
from correlators.partitions import Judged, PartitionState
from correlators.worker.publisher import Publisher
from correlators.worker.takeover import Takeover
from streams.decisions import Command, Incident
from streams.topics import correlator_app_id, topic_name
from tests.faultline.takeover import committed_offset

ENV = "FAULTLINE_TEST_KILL"
#: How long a worker stalled at ``acked``/``between`` waits, at most, for the group's committed offset to
#: reach the record in flight before it dies, so the successor rebuilds everything before it from the log
#: (as after the crash of a worker that was making progress) and judges the record in flight itself.
COMMIT_WAIT_S = 30.0

_settling: contextvars.ContextVar[int | None] = contextvars.ContextVar("settling", default=None)


def die(where: str) -> None:
    """Say where, unbuffered, then SIGKILL this process: no shutdown, no flush, no commit."""
    os.write(2, f"\ntest: SIGKILL at {where}\n".encode())
    os.kill(os.getpid(), signal.SIGKILL)


async def committed_upto(offset: int) -> None:
    """Until the group's committed offset is ``offset`` (every record before it judged and committed)."""
    settings = Settings()
    ns = settings.namespace
    conf = settings.kafka_config(settings.kafka or f"127.0.0.1:{settings.local_kafka_port}")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + COMMIT_WAIT_S
    while loop.time() < deadline:
        at = await loop.run_in_executor(None, committed_offset, conf, correlator_app_id(ns), topic_name(ns, "events"))
        if at >= offset:
            return
        await asyncio.sleep(0.5)


def decision_key(d: Incident | Command) -> str:
    """How the kill line names a decision: a command by id, an incident version as ``id@version``."""
    return f"{d.id}@{d.version}" if isinstance(d, Incident) else d.id


def _ids(judged: Judged) -> str:
    return ",".join(decision_key(d) for d in judged.decisions)


def arm_acked(offset: int) -> None:
    settle = Publisher.settle

    async def settling(self: Publisher, state: PartitionState, judged: Judged) -> None:
        if judged.offset == offset and judged.decisions and self.on_acknowledged is None:
            async def hook(part: int, at: int) -> None:
                if at == offset:
                    await committed_upto(offset)
                    die(f"acked offset {offset} decisions {_ids(judged)}")
            self.on_acknowledged = hook
        await settle(self, state, judged)

    Publisher.settle = settling  # type: ignore[method-assign]


def arm_between(offset: int) -> None:
    settle, send = Publisher.settle, Publisher.send
    handed: list[Any] = []
    decisions: list[str] = []

    async def settling(self: Publisher, state: PartitionState, judged: Judged) -> None:
        token = _settling.set(judged.offset)
        if judged.offset == offset:
            decisions[:] = [decision_key(d) for d in judged.decisions]
        try:
            await settle(self, state, judged)
        finally:
            _settling.reset(token)

    async def sending(self: Publisher, suffix: str, key: str, value: bytes) -> Any:
        if _settling.get() == offset and suffix in ("incidents", "commands"):
            if handed:  # the second decision of the record: the first is on its topic, this one never leaves
                await handed[0]
                await committed_upto(offset)
                die(f"between offset {offset} decisions {','.join(decisions)} after 1")
            fut = await send(self, suffix, key, value)
            handed.append(fut)
            return fut
        return await send(self, suffix, key, value)

    Publisher.settle = settling  # type: ignore[method-assign]
    Publisher.send = sending  # type: ignore[method-assign]


def arm_rebuild(records: int) -> None:
    fold = correlators.rebuild.fold
    seen = [0]

    def counted(items: Iterable[Any]) -> Iterator[Any]:
        for item in items:
            if seen[0] >= records:
                die(f"rebuild after {seen[0]} records")
            seen[0] += 1
            yield item

    def folding(state: PartitionState, items: Iterable[Any], *args: Any) -> None:
        fold(state, counted(items), *args)

    correlators.rebuild.fold = folding  # type: ignore[assignment]


def arm_installed() -> None:
    install = Takeover.catch_up

    async def catching_up(self: Takeover, part: int, offset: int) -> PartitionState:
        real = self._publisher.settle

        async def first_settle(state: PartitionState, judged: Judged) -> None:
            die(f"installed partition {part} up to {offset}, before publishing offset {judged.offset}")

        self._publisher.settle = first_settle  # type: ignore[method-assign]
        try:
            state = await install(self, part, offset)
        finally:
            self._publisher.settle = real  # type: ignore[method-assign]
        die(f"installed partition {part} up to {offset}, nothing left to publish")
        return state

    Takeover.catch_up = catching_up  # type: ignore[method-assign]


def arm(spec: str) -> None:
    point, _, arg = spec.partition(":")
    if point == "acked":
        arm_acked(int(arg))
    elif point == "between":
        arm_between(int(arg))
    elif point == "rebuild":
        arm_rebuild(int(arg))
    elif point == "installed":
        arm_installed()
    elif point:
        raise SystemExit(f"{ENV}={spec!r}: unknown fault point")


def main() -> None:
    arm(os.environ.get(ENV, ""))
    app = make_app(Settings())
    app.main()


if __name__ == "__main__":
    main()
