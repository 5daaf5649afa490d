"""Relaying upstream MCP servers: their tools, resources, resource templates and prompts.

Modules:

- ``tools`` — merge upstream tools into the catalog, gate them, route calls.
- ``surface`` — resources, resource templates and prompts: gate, merge, route.
- ``surface_relay`` — :class:`SurfaceRelay`: the relayed surface of every upstream.
- ``surface_dispatch`` — one relayed read, prompt get, completion or (un)subscription, end to end.
- ``uritemplate`` — does a URI match an RFC 6570 template (the gate of ``resources/read``)?
"""
