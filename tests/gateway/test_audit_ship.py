"""Audit shipping against a real HTTP collector on loopback (``tests/fixtures/collector.py``): records
written while it is down all arrive once it is back, in order, exactly once (an ambiguous POST is resent
and deduplicated by its key); a full spool drops the oldest or refuses the new, counted; a restart with a
non-empty spool delivers it; the collector receives the audit file's very bytes and no planted secret."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from pydantic import ValidationError

from gateway._redact import Redactor
from gateway.audit.log import AuditLog
from gateway.audit.ship import AuditShipper
from gateway.config import AuditShipSettings
from tests.fixtures.collector import Collector, run_collector
from tests.fixtures.gateway_proc import run_gateway

pytestmark = pytest.mark.anyio

TOKEN = "collector-token-0123456789abcdef"
CEILING_S = 20


def _cfg(collector: Collector, **over: Any) -> AuditShipSettings:
    return AuditShipSettings.model_validate(
        {"url": collector.url, "backoff_initial_s": 0.02, "backoff_max_s": 0.2, "timeout_s": 2, **over}
    )


@asynccontextmanager
async def _audit(
    tmp_path: Path, collector: Collector, redactor: Redactor | None = None, **over: Any
) -> AsyncIterator[tuple[AuditLog, AuditShipper]]:
    shipper = AuditShipper(_cfg(collector, **over), tmp_path / "spool", token=TOKEN, close_timeout_s=0.5)
    audit = AuditLog(
        tmp_path / "audit.jsonl",
        max_bytes=10 * 1024 * 1024,
        backups=1,
        redactor=redactor or Redactor(),
        shipper=shipper,
    )
    async with audit:
        yield audit, shipper


def _record(audit: AuditLog, index: int, **arguments: Any) -> None:
    audit.tool_call(
        request_id=f"req-{index:05d}",
        principal="oauth:alice",
        tool="remote_exec",
        toolset="execute",
        target="t1",
        outcome="ok",
        error_code=None,
        duration_ms=1.5,
        arguments={"argv": ["echo", str(index)], **arguments},
    )


async def _spooled(audit: AuditLog) -> None:
    with anyio.fail_after(CEILING_S):
        await audit.flush()  # written to the file, and so to the spool (the same worker step)


async def _delivered(shipper: AuditShipper) -> None:
    with anyio.fail_after(CEILING_S):
        await shipper.wait_delivered()


def _file_lines(tmp_path: Path) -> list[bytes]:
    return (tmp_path / "audit.jsonl").read_bytes().splitlines(keepends=True)


async def test_records_written_while_the_collector_is_down_arrive_in_order_exactly_once_when_it_is_back(
    tmp_path: Path,
) -> None:
    with run_collector(TOKEN, start=False) as collector:
        async with _audit(tmp_path, collector) as (audit, shipper):
            for i in range(50):
                _record(audit, i)
            await _spooled(audit)
            ship = audit.status()["ship"]
            assert (ship["pending_records"], ship["delivered"]) == (50, 0)  # nothing lost while down
            collector.up()
            await _delivered(shipper)
            ship = audit.status()["ship"]
    assert [s.seq for s in collector.stored] == list(range(50))
    assert [s.line for s in collector.stored] == _file_lines(tmp_path)  # the very bytes, in order
    assert {s.stream for s in collector.stored} == {ship["stream"]}
    assert (collector.duplicates, collector.unauthorized) == (0, 0)
    assert (ship["delivered"], ship["pending_records"], ship["healthy"]) == (50, 0, True)
    assert list((tmp_path / "spool").glob("*.jsonl")) == []  # delivered segments are deleted


async def test_an_ambiguous_post_is_resent_and_the_collector_dedupes_it_by_its_key(tmp_path: Path) -> None:
    with run_collector(TOKEN) as collector:
        collector.ambiguous_next = 2  # stored, then the connection dropped without an answer (twice)
        async with _audit(tmp_path, collector) as (audit, shipper):
            for i in range(30):
                _record(audit, i)
            await _spooled(audit)
            await _delivered(shipper)
    assert [s.seq for s in collector.stored] == list(range(30))
    assert [s.line for s in collector.stored] == _file_lines(tmp_path)
    assert collector.duplicates >= 1  # the resent records, dropped by the collector
    assert collector.posts >= 3  # two unanswered POSTs, then the one that was answered


async def test_a_collector_answering_503_gets_the_records_after_backoff(tmp_path: Path) -> None:
    with run_collector(TOKEN) as collector:
        collector.fail_next = 3
        async with _audit(tmp_path, collector) as (audit, shipper):
            for i in range(5):
                _record(audit, i)
            await _spooled(audit)
            await _delivered(shipper)
            ship = audit.status()["ship"]
    assert [s.seq for s in collector.stored] == list(range(5))
    assert ship["post_failures"] >= 3
    assert ship["healthy"] is True  # recovered


async def test_a_full_spool_drops_the_oldest_records_and_counts_them(tmp_path: Path) -> None:
    written = 800
    with run_collector(TOKEN, start=False) as collector:
        async with _audit(tmp_path, collector, spool_max_bytes=64 * 1024) as (audit, shipper):
            for i in range(written):
                _record(audit, i)
            await _spooled(audit)
            full = audit.status()["ship"]
            collector.up()
            await _delivered(shipper)
    assert full["dropped_oldest"] > 0
    assert full["spool_bytes"] <= 64 * 1024
    assert full["pending_records"] + full["dropped_oldest"] == written  # every record accounted for
    kept = [s.seq for s in collector.stored]
    assert kept == list(range(written - len(kept), written))  # the newest, contiguous, in order
    assert len(kept) == full["pending_records"]
    assert [s.line for s in collector.stored] == _file_lines(tmp_path)[-len(kept) :]


async def test_a_full_spool_in_refuse_new_mode_keeps_the_oldest_and_counts_the_refused(
    tmp_path: Path,
) -> None:
    written = 800
    with run_collector(TOKEN, start=False) as collector:
        async with _audit(tmp_path, collector, spool_max_bytes=64 * 1024, when_full="refuse_new") as (
            audit,
            shipper,
        ):
            for i in range(written):
                _record(audit, i)
            await _spooled(audit)
            full = audit.status()["ship"]
            collector.up()
            await _delivered(shipper)
            _record(audit, written)  # room again: spooled and delivered
            await _spooled(audit)
            await _delivered(shipper)
    assert full["refused"] > 0
    assert full["pending_records"] + full["refused"] == written
    kept = full["pending_records"]
    assert [s.seq for s in collector.stored] == list(range(kept + 1)), json.dumps(audit.status()["ship"])
    lines = _file_lines(tmp_path)
    assert [s.line for s in collector.stored] == [*lines[:kept], lines[-1]]


async def test_a_restart_with_a_non_empty_spool_delivers_it_and_continues_the_stream(tmp_path: Path) -> None:
    with run_collector(TOKEN, start=False) as collector:
        async with _audit(tmp_path, collector) as (audit, _):
            for i in range(20):
                _record(audit, i)
            await _spooled(audit)
        assert list((tmp_path / "spool").glob("*.jsonl"))  # left on disk for the next start
        collector.up()
        async with _audit(tmp_path, collector) as (audit, shipper):
            await _delivered(shipper)
            for i in range(20, 25):
                _record(audit, i)
            await _spooled(audit)
            await _delivered(shipper)
    assert [s.seq for s in collector.stored] == list(range(25))
    assert len({s.stream for s in collector.stored}) == 1
    assert [s.line for s in collector.stored] == _file_lines(tmp_path)


async def test_a_torn_spool_line_from_a_crash_is_cut_and_counted_as_lost(tmp_path: Path) -> None:
    with run_collector(TOKEN, start=False) as collector:
        async with _audit(tmp_path, collector) as (audit, _):
            for i in range(3):
                _record(audit, i)
            await _spooled(audit)
        [segment] = (tmp_path / "spool").glob("*.jsonl")
        with segment.open("ab") as f:
            f.write(b'{"event": "tool_call", "torn')  # what a crash mid-append leaves
        collector.up()
        async with _audit(tmp_path, collector) as (audit, shipper):
            await _delivered(shipper)
            ship = audit.status()["ship"]
    assert [s.seq for s in collector.stored] == [0, 1, 2]
    assert ship["lost"] == 1


async def test_a_planted_secret_never_reaches_the_collector(tmp_path: Path) -> None:
    secret = "PlantedSecret-7c1e9a0b5d"
    with run_collector(TOKEN) as collector:
        async with _audit(tmp_path, collector, redactor=Redactor([secret])) as (audit, shipper):
            _record(audit, 0, password=secret, stdin=f"token={secret}", env={"API_KEY": secret})
            _record(audit, 1, argv=["deploy", f"--password={secret}"])
            await _spooled(audit)
            await _delivered(shipper)
    received = b"".join(collector.bodies)
    assert received  # the positive control: the records did arrive
    assert secret.encode() not in received
    assert TOKEN.encode() not in received + (tmp_path / "audit.jsonl").read_bytes()
    assert [s.line for s in collector.stored] == _file_lines(tmp_path)
    spooled = b"".join(p.read_bytes() for p in (tmp_path / "spool").iterdir() if p.is_file())
    assert secret.encode() not in spooled


async def test_a_collector_refusing_big_bodies_gets_smaller_batches_and_a_lone_oversized_record_is_skipped(
    tmp_path: Path,
) -> None:
    with run_collector(TOKEN, start=False) as collector:
        collector.max_body = 4000
        async with _audit(tmp_path, collector) as (audit, shipper):
            for i in range(20):
                _record(audit, i)
            # alone over the collector's limit (two values: one long string alone is recorded as its digest)
            _record(audit, 20, note="x" * 3000, more="y" * 3000)
            _record(audit, 21)
            await _spooled(audit)
            collector.up()
            await _delivered(shipper)
            ship = audit.status()["ship"]
    assert [s.seq for s in collector.stored] == [*range(20), 21]
    assert ship["rejected"] == 1
    assert ship["pending_records"] == 0


async def test_the_collector_sees_the_bearer_token_and_the_spool_is_private(tmp_path: Path) -> None:
    with run_collector("a-different-token-0123456789") as collector:  # the shipper's token is wrong here
        async with _audit(tmp_path, collector) as (audit, shipper):
            _record(audit, 0)
            await _spooled(audit)
            with anyio.fail_after(CEILING_S):
                while collector.unauthorized < 2:  # noqa: ASYNC110 - another thread's counter
                    await anyio.sleep(0.02)
            ship = audit.status()["ship"]
            assert (ship["healthy"], ship["pending_records"]) == (False, 1)  # kept, and said so
            collector.token = TOKEN  # the operator fixes the token on the collector's side
            await _delivered(shipper)
    assert [s.seq for s in collector.stored] == [0]
    spool = tmp_path / "spool"
    assert spool.stat().st_mode & 0o777 == 0o700
    assert {p.stat().st_mode & 0o777 for p in spool.iterdir()} == {0o600}


@pytest.mark.parametrize(
    "url",
    ["http://collector.example.net/ingest", "https://user:pw@collector.example.net/x", "ftp://127.0.0.1/x"],
)
def test_the_collector_url_must_be_https_or_loopback_http_without_credentials(url: str) -> None:
    with pytest.raises(ValidationError):
        AuditShipSettings(url=url)


def test_shipping_is_off_without_a_url_and_health_says_so(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path / "a.jsonl", max_bytes=4096, backups=0, redactor=Redactor())
    assert audit.status()["ship"] is None
    assert not os.path.exists(tmp_path / "audit-spool")
    assert json.dumps(audit.status())  # serialisable as gateway_health shows it


@pytest.mark.slow  # a gateway subprocess
async def test_a_hanging_collector_never_blocks_a_tool_call_and_gateway_health_shows_the_backlog(
    tmp_path: Path,
) -> None:
    token_file = tmp_path / "collector-token"
    token_file.write_text(TOKEN + "\n", encoding="utf-8")
    token_file.chmod(0o600)
    with run_collector(TOKEN) as collector:
        collector.hang = True  # accepts, reads, never answers (until released)
        ship = {
            "url": collector.url,
            "bearer_token_file": str(token_file),
            "timeout_s": 30,  # longer than the calls below: only the queue stands between them
            "backoff_initial_s": 0.05,
            "backoff_max_s": 0.2,
        }
        (tmp_path / "gw").mkdir()
        with run_gateway(tmp_path / "gw", {"audit": {"ship": ship}}) as gw:
            http = httpx2.AsyncClient(headers=gw.headers(), timeout=httpx2.Timeout(30))
            async with (
                http,
                Client(streamable_http_client(gw.url, http_client=http), mode="legacy") as client,
            ):
                with anyio.fail_after(10):  # calls while the collector holds the first POST: none waits
                    held: dict[str, Any] = {}
                    while held.get("pending_records", 0) < 10:  # the records of the calls so far, spooled
                        health = (await client.call_tool("gateway_health", {})).structured_content
                        assert health is not None
                        held = health["audit"]["ship"]
                assert held["posts"] >= 1
                assert held["delivered"] == 0
                collector.hang = False
                collector.down()  # releases the held request (503), then back up
                collector.up()
                with anyio.fail_after(CEILING_S):
                    await anyio.to_thread.run_sync(collector.wait_stored, 10, CEILING_S)
        stderr = gw.stderr_text()
    assert [s.seq for s in collector.stored][:10] == list(range(10))
    audit_bytes = (gw.state_dir / "audit.jsonl").read_bytes()
    assert [s.line for s in collector.stored] == audit_bytes.splitlines(keepends=True)[
        : len(collector.stored)
    ]
    for text in (
        stderr.encode(),
        audit_bytes,
        *(p.read_bytes() for p in gw.state_dir.rglob("*") if p.is_file()),
    ):
        assert TOKEN.encode() not in text  # the collector's token is nowhere but in its file
