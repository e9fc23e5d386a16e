"""faultline's benchmarks: `faultline bench` (see bench/runner.py) and the goodput model."""

__all__: list[str] = []
