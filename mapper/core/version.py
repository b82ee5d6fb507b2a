"""The engine version recorded on every sheet."""

__version__ = "0.1.0"
