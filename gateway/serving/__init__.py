"""Serving MCP: the low-level ``Server`` and its handlers (``server``, ``surface``), stdio and
streamable HTTP (``stdio``, ``http``), sd_notify and the watchdog (``sdnotify``), and ``serve``, which
starts it all.
"""
