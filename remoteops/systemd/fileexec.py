"""The file of an ``admin_transaction`` read and replaced by a small python program run over exec: as root
through the operator's root providers, or as the login user where the target has no agent (carrier ssh).

As root: ``privilege: root``, or ``auto`` after the login user was refused (``EACCES`` / ``EPERM``: by the
agent, or by this program, which then also says "Permission denied" on stderr) on a target allowed to
escalate. The same guarantees as the agent's write: the content travels on stdin (never in argv); the file
is replaced only if its SHA-256 is still the expected one (else
:class:`~remoteops.systemd.errors.TransactionFileConflict` ``sha256_mismatch`` with the current digest,
nothing written); the replacement is a temporary file next to it (same owner, group and mode as the file it
replaces), fsynced and renamed over it, then the directory fsynced. A link is written through (the link
stays a link). Reads come back base64 in bounded chunks (halved when the command's output cap clipped one),
each naming the whole file's SHA-256, which the assembled bytes must match.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from remoteops._errors import InvalidRequest
from remoteops._models import ExecResult
from remoteops.privilege.escalator import SecretSource
from remoteops.privilege.models import PrivilegeMode, PrivilegeReport, ProviderAttempt
from remoteops.systemd.errors import (
    SystemdCommandFailed,
    TransactionFileConflict,
    TransactionFileDenied,
    TransactionFileMissing,
)
from remoteops.systemd.runner import SystemdRunner, run_privileged

__all__ = ["exec_read", "exec_write"]

_PROGRAM = r"""import base64, errno, hashlib, json, os, stat, sys
op, path = sys.argv[1], sys.argv[2]
def out(code, **fields):
    sys.stdout.write(json.dumps(fields))
    sys.stdout.flush()
    sys.exit(code)
def digest(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 16), b""):
            h.update(chunk)
    return h.hexdigest()
try:
    if os.path.islink(path):
        path = os.path.realpath(path)
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        out(4, error="not_regular")
    if op == "read":
        offset, length = int(sys.argv[3]), int(sys.argv[4])
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(length)
        out(0, size=st.st_size, sha256=digest(path), data=base64.b64encode(data).decode())
    expected = sys.argv[3]
    data = sys.stdin.buffer.read()
    current = digest(path)
    if current != expected:
        out(3, error="sha256_mismatch", current_sha256=current)
    directory, base = os.path.split(path)
    tmp = os.path.join(directory, "." + base[:160] + ".rog-tx-%d-%s" % (os.getpid(), os.urandom(8).hex()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view[:1 << 20]):]
            os.fchown(fd, st.st_uid, st.st_gid)
            os.fchmod(fd, st.st_mode & 0o7777)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    dfd = os.open(directory or ".", os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    out(0, sha256=hashlib.sha256(data).hexdigest(), size=len(data))
except FileNotFoundError:
    out(2, error="not_found")
except PermissionError as exc:
    sys.stderr.write("Permission denied: %s\n" % exc)
    out(5, error="access_denied", detail=str(exc))
except OSError as exc:
    out(6, error="os_error", errno=errno.errorcode.get(exc.errno or 0, ""), detail=str(exc))
"""
_CHUNK = 36 * 1024  # base64 of it, in JSON, stays below the default 64 KiB output cap
_MIN_CHUNK = 1024


def _argv(*words: str) -> list[str]:
    return ["python3", "-I", "-c", _PROGRAM, *words]


def _answer(result: ExecResult, *, target: str, path: str, stage: str) -> dict[str, Any]:
    """The program's JSON answer, or the matching file error."""
    try:
        answer = json.loads(result.stdout) if result.stdout.strip() else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise SystemdCommandFailed(
            f"the root file program exited {result.exit_code}: {result.stderr.strip()[-300:]}",
            target=target, stage=stage,
        )  # fmt: skip
    error = answer.get("error")
    if error is None and result.exit_code == 0:
        return answer
    if error == "sha256_mismatch":
        current = answer.get("current_sha256")
        raise TransactionFileConflict(
            "the file changed", target=target, path=path, reason="sha256_mismatch",
            current_sha256=current if isinstance(current, str) else None,
        )  # fmt: skip
    if error == "not_found":
        raise TransactionFileMissing("no such file", target=target, path=path)
    if error == "access_denied":
        raise TransactionFileDenied(str(answer.get("detail", ""))[:300], target=target, path=path)
    if error == "not_regular":
        raise InvalidRequest(target=target, field="change.path", reason="not a regular file")
    raise SystemdCommandFailed(
        f"the root file program failed: {str(answer.get('detail', error))[:300]}", target=target, stage=stage
    )


async def _run(
    runner: SystemdRunner,
    target: str,
    argv: list[str],
    *,
    privilege: PrivilegeMode,
    escalate: bool,
    secrets: SecretSource | None,
    before: tuple[ProviderAttempt, ...],
    stdin: bytes | None = None,
) -> tuple[ExecResult, PrivilegeReport]:
    return await run_privileged(
        runner, target, argv, privilege=privilege, escalate=escalate, secrets=secrets, stdin=stdin,
        before=before, timeout_s=60,
    )  # fmt: skip


async def exec_read(
    runner: SystemdRunner,
    target: str,
    path: str,
    *,
    max_bytes: int,
    privilege: PrivilegeMode,
    escalate: bool,
    secrets: SecretSource | None,
    before: tuple[ProviderAttempt, ...] = (),
) -> tuple[bytes, str, PrivilegeReport]:
    """The file's bytes and SHA-256 (as ``privilege`` says); the report of the privilege attempts."""
    chunks: list[bytes] = []
    offset, chunk, size = 0, _CHUNK, None
    digest: str | None = None
    report: PrivilegeReport | None = None
    while size is None or offset < size:
        result, report = await _run(
            runner, target, _argv("read", path, str(offset), str(chunk)), privilege=privilege,
            escalate=escalate, secrets=secrets, before=before,
        )  # fmt: skip
        if result.stdout_truncated:  # the command's output cap clipped the chunk: ask for less
            if chunk <= _MIN_CHUNK:
                raise SystemdCommandFailed("the output cap is too small for a root read", target=target,
                                           stage="root_read")  # fmt: skip
            chunk //= 2
            continue
        answer = _answer(result, target=target, path=path, stage="root_read")
        size = int(answer["size"])
        if size > max_bytes:
            raise InvalidRequest(target=target, field="change.path", reason=f"file larger than {max_bytes}")
        if digest is not None and answer["sha256"] != digest:
            raise TransactionFileConflict("the file changed while it was read", target=target, path=path,
                               reason="changed_during_read")  # fmt: skip
        digest = str(answer["sha256"])
        data = base64.b64decode(str(answer["data"]))
        if not data and offset < size:
            raise TransactionFileConflict("the file shrank while it was read", target=target, path=path,
                               reason="changed_during_read")  # fmt: skip
        chunks.append(data)
        offset += len(data)
    whole = b"".join(chunks)
    if digest is None or report is None or hashlib.sha256(whole).hexdigest() != digest:
        raise TransactionFileConflict("the file changed while it was read", target=target, path=path,
                           reason="changed_during_read")  # fmt: skip
    return whole, digest, report


async def exec_write(
    runner: SystemdRunner,
    target: str,
    path: str,
    data: bytes,
    expected_sha256: str,
    *,
    privilege: PrivilegeMode,
    escalate: bool,
    secrets: SecretSource | None,
    before: tuple[ProviderAttempt, ...] = (),
) -> tuple[str, PrivilegeReport]:
    """Replace the file if its SHA-256 is still ``expected_sha256``: (the new SHA-256, report)."""
    result, report = await _run(
        runner, target, _argv("write", path, expected_sha256), privilege=privilege, escalate=escalate,
        secrets=secrets, before=before, stdin=data,
    )  # fmt: skip
    answer = _answer(result, target=target, path=path, stage="root_write")
    return str(answer["sha256"]), report
