"""Root providers (sudo, su, docker): models, errors, the wire (how a provider wraps a command and
when a password is fed) and the escalator that chooses a provider for ``privilege: auto|user|root``.
"""
