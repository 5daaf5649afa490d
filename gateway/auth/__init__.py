"""Who is calling and what they may see and do.

Modules:

- ``policy`` — the principal, and the one object that decides for listing and for calls.
- ``oauth`` — the OAuth 2.1 resource server: access tokens checked with the authorization server.
- ``proxy`` — identity from a trusted authenticating proxy in front (``auth.trusted_proxy``).
- ``scope`` — step-up authorization over HTTP: a call outside the token's scopes is a 403 challenge.
"""
