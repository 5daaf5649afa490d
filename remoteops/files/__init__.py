"""Structured file operations on a target, carried as agent requests: models, errors, wire format,
patch application and :class:`~remoteops.files.operations.RemoteFiles`.
"""
