"""Local, Docker-free infrastructure for development and tests (see :mod:`deploy.local.kafka`)."""

__all__ = ["kafka"]
