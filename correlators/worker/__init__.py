"""The correlator worker's collaborators, each a small class with its dependencies injected.

:mod:`correlators.app` is the Faust wiring; this package is what the wiring calls, testable
without a broker (``tests/correlators/worker/``: a fake producer whose acknowledgements resolve
or fail on demand, a fake log, blocking calls run inline):

* :mod:`.judge` -- the agent's body: one events record at a time, in a stated order;
* :mod:`.takeover` -- a partition's state from its newest snapshot and the log tail, what is
  still to publish, the skipped offsets acknowledged;
* :mod:`.publisher` -- sign, count, send, await the broker's acknowledgement, then ``emitted``
  (with a named point in between for fault injection);
* :mod:`.snapshot_taker` -- when to snapshot, capture on the loop, seal and write off it;
* :mod:`.live` -- the live clock tick and the gauges;
* :mod:`.delivery_watch` -- records the consumer fetched but never handed over, fetched again;
* :mod:`.ports` -- the callables and protocols they take; :mod:`.assembly` builds them all.
"""
