"""The package version, in one place (imported by the package and its engine model)."""

__version__ = "0.1.0"
