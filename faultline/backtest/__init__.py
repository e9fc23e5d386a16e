"""``faultline backtest``: what a policy change would have decided, from history, in minutes.

The correlator judges on event time, deterministically, and the archive keeps every canonical
event: so a candidate policy can be run over last month's events, offline and at engine speed,
and its decisions compared with those of the current policy (or with what was decided live).

* :mod:`.source` -- the events: an archive window (its context and warm-up first), or a capture;
  what the archive's retention leaves out of the window.
* :mod:`.judge` -- one pass over the events through one engine per policy; each policy's
  decisions in the window (the contract's JSON, as ``faultline replay --json`` prints it).
* :mod:`.diff` -- the comparison: incidents added, removed, re-categorised, re-blamed; commands
  added, removed, changed, by type; lost GPU-hours and fenced hardware per category and per XID.
* :mod:`.render` -- the summary for people, and :mod:`.page` the side-by-side HTML page.
"""
