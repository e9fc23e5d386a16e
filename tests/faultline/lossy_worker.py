"""A correlator worker whose consumer loses the first events record it fetches (tests only).

Faust can lose a fetched batch around a rebalance; this makes it happen on purpose. The record
never reaches a stream (so it is never acknowledged), and a fetch of it again within
``LOSE_AGAIN_S`` (Faust's own seek to the committed offsets at the end of recovery) is lost
too, so only the worker's delivery watch (:mod:`correlators.worker.delivery_watch`) can bring
it back. Run as the worker is: ``python tests/faultline/lossy_worker.py worker -l warn ...``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from common.settings import Settings
from correlators.app import make_app

LOSE_AGAIN_S = 3.0  # the watch waits 5 s of quiet before it sends the consumer back

log = logging.getLogger("faultline.test")


def main() -> None:
    app = make_app(Settings())
    deliver = app.topics.on_message
    lost: list[tuple[float, int]] = []

    async def on_message(message: Any) -> Any:
        if message.topic.endswith(".events") and (
                not lost or (message.offset == lost[0][1] and time.monotonic() - lost[0][0] < LOSE_AGAIN_S)):
            lost.append((time.monotonic(), message.offset))
            log.warning("test: lost the events record at offset %d of partition %d", message.offset,
                        message.partition)
            return None
        return await deliver(message)

    app.topics.on_message = on_message  # type: ignore[method-assign]  # the consumer's callback, set at start
    app.main()


if __name__ == "__main__":
    main()
