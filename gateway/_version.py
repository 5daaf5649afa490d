"""The gateway version, in one place."""

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    __version__ = version("remoteops-gateway")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+source"
