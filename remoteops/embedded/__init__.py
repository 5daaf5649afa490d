"""The embedded SSH target (an in-process asyncssh server on loopback), imported explicitly.

It is kept out of ``import remoteops`` on purpose: it loads asyncssh and cryptography (~0.2 s), which serving
never needs. ``remoteops-gateway demo`` and the tests import it from here::

    from remoteops.embedded import EmbeddedTarget

Modules:

- ``target`` — :class:`EmbeddedTarget`: an in-process asyncssh server on loopback that ``ssh`` can drive.
- ``session`` — one SSH session channel of the embedded target → one local subprocess.
"""

from remoteops.embedded.target import EmbeddedTarget

__all__ = ["EmbeddedTarget"]
