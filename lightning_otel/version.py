"""The distribution's version, in one place (pyproject.toml reads it; the package face re-exports it)."""

__version__ = "0.2.0"
