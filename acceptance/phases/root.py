"""Root through the gateway over MCP/HTTP: a NOPASSWD sudo target runs as uid 0 through ``sudo_nopasswd``;
a target outside the root allow-list is ``policy_denied``; a password sudo target fails with a
``privilege_error`` carrying a one-time link, a real headless Chromium enters the password on the page
the gateway serves, and the retry runs as uid 0 through ``sudo_password``; the link is refused afterwards;
a wrong password is ``privilege_error``; the password appears in none of the gateway's outputs.
"""

from __future__ import annotations

import statistics
from typing import Any

from acceptance._mcp import error_of, structured
from acceptance._registry import PhaseContext, phase
from acceptance.harness.browser import chromium, chromium_unavailable_reason, enter_password, visit
from acceptance.phases._util import ms_figures, timed

__all__ = ["root"]


def _code(result: dict[str, Any]) -> tuple[str | None, str | None]:
    error = error_of(result) or {}
    return error.get("code"), (error.get("details") or {}).get("reason")


@phase("root", "privilege: sudo/su providers, secret entry page, root toolset", needs=("sshd",))
async def root(ctx: PhaseContext) -> None:
    reason = chromium_unavailable_reason()
    if reason is not None:
        ctx.skip(reason)
    env = ctx.env
    assert env.sshd is not None
    sshd = env.sshd
    config = {
        "transport": {"ssh_config_file": str(sshd.ssh_config), "control_dir": str(env.control_dir())},
        "targets": [{"name": role, "host": sshd.alias(role)} for role in ("plain", "sudo", "pass")],
        "root": {"targets": ["sudo", "pass"]},
        "tools": {"toolsets": ["inspect", "execute", "root"]},
    }
    async with env.extra_gateway("root", config) as gw, env.client_of(gw) as client:
        call = client.call
        ran = structured(await call("remote_root_exec", {"target": "sudo", "argv": ["id", "-u"]}))
        ctx.check(ran["stdout"].strip() == "0", f"sudo target as root: {ran}")
        ctx.check(ran["privilege"]["provider"] == "sudo_nopasswd", f"provider: {ran['privilege']}")
        user = structured(await call("remote_exec", {"target": "sudo", "argv": ["id", "-u"]}))
        ctx.check(user["stdout"].strip() != "0", "remote_exec never escalates")

        denied = await call("remote_root_exec", {"target": "plain", "argv": ["id", "-u"]})
        ctx.check(_code(denied) == ("policy_denied", "not_root_allowed"), f"outside the allow-list: {denied}")

        async with chromium() as browser:
            first = await call("remote_root_exec", {"target": "pass", "argv": ["id", "-u"]})
            ctx.check(_code(first) == ("privilege_error", "secret_required"), f"password needed: {first}")
            link = (error_of(first) or {})["details"]["entry"]
            ctx.check(link.startswith(gw.base + "/secret/"), f"link on the gateway's listener: {link}")
            page = await enter_password(browser, link, sshd.pass_password)
            ctx.check(page.status == 200 and page.after_status == 200, "the page took the password")
            ctx.check(sshd.pass_password not in page.after_html, "the page never shows the password")
            second, sudo_password_ms = await timed(
                call("remote_root_exec", {"target": "pass", "argv": ["id", "-u"]})
            )
            out = structured(second)
            ctx.check(out["stdout"].strip() == "0", f"password sudo as root: {out}")
            ctx.check(out["privilege"]["provider"] == "sudo_password", f"provider: {out['privilege']}")
            again = await visit(browser, link)
            ctx.check(again.status == 410, f"a used link is refused: {again.status}")

            third = await call("remote_root_exec", {"target": "pass", "argv": ["id", "-u"]})
            wrong_link = (error_of(third) or {})["details"]["entry"]
            await enter_password(browser, wrong_link, "not-the-password-" + "z" * 8)
            wrong = await call("remote_root_exec", {"target": "pass", "argv": ["id", "-u"]})
            ctx.check(_code(wrong) == ("privilege_error", "wrong_password"), f"wrong password: {wrong}")

        root_ms, user_ms = [], []
        for _ in range(ctx.n(10, 50)):
            result, ms = await timed(call("remote_root_exec", {"target": "sudo", "argv": ["true"]}))
            ctx.check(error_of(result) is None, f"root exec failed: {result}")
            root_ms.append(ms)
            result, ms = await timed(call("remote_exec", {"target": "sudo", "argv": ["true"]}))
            user_ms.append(ms)
        outputs = {"gateway stderr": gw.stderr_text()}
        for path in gw.state_dir.rglob("*"):
            if path.is_file():  # audit log, token, state records
                outputs[str(path)] = path.read_text(errors="replace")
        leaked = [name for name, text in outputs.items() if sshd.pass_password in text]
        ctx.check(leaked == [], f"the sudo password appears in: {leaked}")
        ctx.figures.update(
            {
                **ms_figures("root_exec_sudo_nopasswd", root_ms),
                **ms_figures("remote_exec_same_target", user_ms),
                "root_over_user_median_ratio": round(
                    statistics.median(root_ms) / max(statistics.median(user_ms), 0.001), 2
                ),
                "sudo_password_call_ms": round(sudo_password_ms, 1),
            }
        )
