"""The package version (one home: the package root and every module read it here)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
