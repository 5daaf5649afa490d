"""The agent carrier: one long-lived stdlib-only Python program per target and login (and one as root),
sent over the master on the stdin of one SSH session, carrying many exec and file requests.

``program`` is what runs on the target; ``boot`` sends it, ``channel`` speaks its protocol, ``exec`` encodes
exec requests, ``root`` starts the root agent behind a provider, ``carrier`` is the :class:`Carrier` on top.
"""
