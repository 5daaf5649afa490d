"""The embedded SSH target (an in-process asyncssh server on loopback), imported explicitly.

It is kept out of ``import remoteops`` on purpose: it loads asyncssh and cryptography (~0.2 s), which serving
never needs. ``remoteops-gateway demo`` and the tests import it from here::

    from remoteops.embedded import EmbeddedTarget
"""

from remoteops.embedded.target import EmbeddedTarget

__all__ = ["EmbeddedTarget"]
