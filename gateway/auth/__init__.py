"""Who may call what: the policy object (toolsets, targets, principals), the OAuth resource server
(``oauth``), the trusted-proxy identity (``proxy``) and step-up scope challenges (``scope``).
"""
