"""Fault-injection pieces the reliability tests share: seeded fault points, simulated power cuts,
per-id copy counting and comparison with an uninterrupted run, kill helpers, captures with
decisions spread through them."""
