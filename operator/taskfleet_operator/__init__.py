"""The taskfleet operator: reconciles TaskQueue resources into worker fleets."""

# The operator's release is the library's: one version, written in taskfleet/_version.py.
from taskfleet._version import __version__

__all__ = ["__version__"]
