"""Deployment helpers for faultline (local broker launcher and friends)."""

__all__ = ["local"]
