"""Serving MCP. Only this sub-package and ``gateway.cli`` import it; the rest of the gateway never does.

Modules:

- ``server`` — the low-level SDK ``Server`` whose handlers reach the runtime one way only.
- ``tasks`` — MCP tasks on that server: which call becomes a task, what it runs, how its result reads.
- ``relayed_tasks`` — a task-augmented call of a relayed tool: the dispatcher's path, the upstream's own task.
- ``surface`` — its handlers for relayed resources, templates, prompts, completions, subscriptions.
- ``stdio`` — stdio that answers every request line, even one that cannot be parsed.
- ``drain`` — the stdio transport on the event loop and the bounded drain that SIGTERM starts.
- ``http`` — guarded streamable HTTP: Host/Origin allow-lists, body cap, bearer auth, /healthz.
- ``answer`` — a request whose SSE stream would carry only its answer is answered as ``application/json``.
- ``sse`` — the SDK's Server-Sent Events encoded in one join and one encode (same bytes).
- ``sdnotify`` — systemd's notify-socket protocol (sd_notify) and the watchdog, without libsystemd.
- ``memory`` — the start-up's freed memory given back to the operating system once serving.
- ``serve`` — running it all: stdio or guarded HTTP under uvicorn, sd_notify, a bounded drain.
"""
