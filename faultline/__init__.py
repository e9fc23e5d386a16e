"""faultline: the command line and the wiring that runs the stages together."""

__all__ = ["__version__"]
__version__ = "0.1.0"
