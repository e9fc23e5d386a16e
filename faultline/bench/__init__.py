"""faultline's benchmarks: `faultline bench` (see faultline/bench/runner.py) and the goodput model."""

__all__: list[str] = []
