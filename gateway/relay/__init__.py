"""Relaying upstream MCP servers: tools (``tools``), resources, templates and prompts
(``surface``, ``surface_relay``, ``surface_dispatch``) and URI templates.
"""
