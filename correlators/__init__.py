"""Correlators: typed events in, incidents and commands out (see engine.py)."""
