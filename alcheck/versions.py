"""Installed package versions, for run.json's environment (torch-free: engine runs import it too)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def package_version(package: str) -> str:
    """The installed distribution's version, or "unknown" when it is not installed."""
    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"
