"""The OpenSSH transport: native ``ssh`` processes over a pool of ControlMasters.

Modules:

- ``args`` — the ssh command lines remoteops runs, and the classification of ssh's own failures (255).
- ``resolve`` — target resolution through ``ssh -G``: what ssh will connect to, as whom, through which hops.
- ``master`` — one ControlMaster, run as a supervised foreground child.
- ``pool`` — the master pool: one per resolved identity, started single-flight, bounded, LRU-evicted.
- ``carrier`` — the ssh carrier: one ssh process per call over the pool (the agent carrier's fallback).
"""
