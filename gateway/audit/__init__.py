"""The audit trail: one JSONL record per call with size rotation (``log``), and shipping it to a
collector through a durable spool (``ship``, ``spool``).
"""
