"""The distribution's version, read once; imports nothing from swerve so anything may import it."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("swerve")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"
