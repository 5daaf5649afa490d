"""The audit trail: one JSONL record per call, and shipping it to a collector.

Modules:

- ``log`` — the audit log: one canonical line per tool call, written off the loop, size-rotated.
- ``chain`` — the tamper-evident chain: each line sealed with ``seq`` and an HMAC of it and its predecessor,
  the key, the head.
- ``verify`` — ``audit verify``: walks the files (and what a collector received) and names the first problem.
- ``ship`` — audit shipping (``[audit.ship]``): every record POSTed to a collector, in order.
- ``spool`` — the shipper's spool: records waiting for the collector, on disk, bounded, across restarts.
"""
