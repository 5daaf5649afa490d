"""The agent carrier: one long-lived stdlib-only Python program per target and login (and one as root),
sent over the master on the stdin of one SSH session, carrying many exec and file requests.

``program`` is what runs on the target; ``boot`` sends it (and finds its start past any login-shell
output), ``channel`` speaks its protocol, ``liveness`` finds a stuck agent, ``exec`` encodes exec requests,
``root`` starts the root agent behind a provider, ``slots`` is what is kept per target, ``carrier`` is the
:class:`Carrier` on top.
"""
