"""remoteops package."""

__all__: list[str] = []
