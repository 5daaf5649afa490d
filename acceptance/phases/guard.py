"""The HTTP guard and auth: 401 (no or wrong token, with RFC 9728 metadata), 421 (Host), 403 (Origin),
413 (body cap); /healthz says nothing but status; the token is never echoed."""

from __future__ import annotations

import httpx

from acceptance._registry import PhaseContext, phase
from acceptance.harness.raw_mcp import ACCEPT, INIT

__all__ = ["auth_and_guard"]


@phase("auth_guard", "bearer auth and the Host/Origin/body guard (401/421/403/413)")
async def auth_and_guard(ctx: PhaseContext) -> None:
    gw = ctx.env.gw
    token = gw.token
    ctx.check(bool(token), "the gateway runs without a bearer token")
    good = {**ACCEPT, "Authorization": f"Bearer {token}"}
    big = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"' + b"x" * (300 * 1024) + b'"}}'
    cases = {
        "no_token": (401, {"headers": ACCEPT, "json": INIT}),
        "wrong_token": (
            401,
            {"headers": {**ACCEPT, "Authorization": "Bearer not-the-token-0123456789"}, "json": INIT},
        ),
        "basic_auth": (401, {"headers": {**ACCEPT, "Authorization": "Basic Zm9vOmJhcg=="}, "json": INIT}),
        "hostile_host": (421, {"headers": {**good, "Host": "evil.example:80"}, "json": INIT}),
        "foreign_origin": (403, {"headers": {**good, "Origin": "http://evil.example"}, "json": INIT}),
        "oversized_body": (413, {"headers": good, "content": big}),
        "good_token": (200, {"headers": good, "json": INIT}),
    }
    statuses: dict[str, int] = {}
    async with httpx.AsyncClient(timeout=10) as http:
        for name, (want, kwargs) in cases.items():
            response = await http.post(gw.url, **kwargs)  # type: ignore[arg-type]
            statuses[name] = response.status_code
            ctx.check(response.status_code == want, f"{name}: HTTP {response.status_code}, want {want}")
            ctx.check(token is None or token not in response.text, f"{name}: the token is echoed")
            if want == 401:
                challenge = response.headers.get("www-authenticate", "")
                ctx.check(challenge.startswith("Bearer"), f"{name}: WWW-Authenticate {challenge!r}")
        # RFC 9728 metadata is advertised only where the gateway acts as an OAuth resource server; when the
        # challenge names it, it must be served and name this resource.
        challenge = (await http.post(gw.url, headers=ACCEPT, json=INIT)).headers["www-authenticate"]
        advertised = 'resource_metadata="' in challenge
        if advertised:
            meta_url = challenge.split('resource_metadata="')[1].split('"')[0]
            meta = await http.get(meta_url)
            ctx.check(meta.status_code == 200, f"metadata: HTTP {meta.status_code}")
            ctx.check(meta.json().get("resource") == gw.url, f"metadata resource: {meta.text}")
        ctx.figures["rfc9728_metadata_advertised"] = advertised
        healthz = await http.get(gw.base + "/healthz")
        ctx.check(
            healthz.status_code == 200 and healthz.json() == {"status": "ok"}, f"/healthz: {healthz.text}"
        )
    ctx.figures.update(
        {
            "requests": len(cases) + 3,
            "statuses": statuses,
            "refused": sum(s != 200 for s in statuses.values()),
        }
    )
