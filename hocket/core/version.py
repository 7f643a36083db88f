"""hocket's version (the package metadata reads the same number from ``pyproject.toml``)."""

__version__ = "0.1.0"
