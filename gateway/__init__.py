"""remoteops-gateway: the composition root and the only package that serves MCP."""

from gateway._launch import main

__all__ = ["main"]
