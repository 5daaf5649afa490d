"""Root providers (sudo, su, docker) and the choice between them for ``privilege: auto|user|root``.

Modules:

- ``models`` — privilege settings and the non-secret report of one privileged call.
- ``errors`` — privilege failures, a branch of the remoteops exception tree.
- ``diagnose`` — sudo's refusals (requiretty, a password needed, not permitted, PAM) told apart, with fixes.
- ``wire`` — how a provider wraps a command and when its password reaches sudo or su.
- ``escalator`` — the choice point: run a request as root through the first provider that works.
"""
