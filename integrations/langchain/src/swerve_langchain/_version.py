"""The distribution's version, read once from its installed metadata."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("swerve-langchain")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"
