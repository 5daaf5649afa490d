"""The system programs' outputs parse from their fixed formats into records (samples in the real formats)."""

from __future__ import annotations

import base64

import pytest

from remoteops.system.parse import (
    parse_df,
    parse_du,
    parse_gpus,
    parse_os_release,
    parse_proc_sockets,
    parse_processes,
    parse_ss,
    start_epoch,
)


def test_ss_records_give_address_port_family_and_the_first_owner() -> None:
    text = (
        "tcp   LISTEN 0      4096   127.0.0.1:8080   0.0.0.0:*   "
        'users:(("nginx",pid=10,fd=6),("nginx",pid=11,fd=6))\n'
        "tcp   LISTEN 0      128    [::1]:631        [::]:*\n"
        'udp   UNCONN 0      0      0.0.0.0%lo:5353  0.0.0.0:*   users:(("a b",pid=7,fd=3))\n'
        "tcp   LISTEN 0      128    *:22             *:*\n"
    )
    sockets = parse_ss(text)
    assert [(s.protocol, s.family, s.address, s.port, s.pid, s.process) for s in sockets] == [
        ("tcp", "ipv4", "127.0.0.1", 8080, 10, "nginx"),
        ("tcp", "ipv6", "::1", 631, None, None),
        ("udp", "ipv4", "0.0.0.0%lo", 5353, 7, "a b"),
        ("tcp", "ipv4", "0.0.0.0", 22, None, None),  # noqa: S104  # a parsed value
    ]


def test_proc_net_addresses_decode_from_the_kernels_word_order() -> None:
    text = (
        "L tcp 0100007F:1F90 123\n"
        "L tcp6 00000000000000000000000001000000:0277 456\n"
        "L udp 00000000:14E9 789\n"
        "O 42 123 python3\n"
    )
    sockets = parse_proc_sockets(text)
    assert [(s.protocol, s.family, s.address, s.port, s.pid, s.process) for s in sockets] == [
        ("tcp", "ipv4", "127.0.0.1", 8080, 42, "python3"),
        ("tcp", "ipv6", "::1", 631, None, None),
        ("udp", "ipv4", "0.0.0.0", 5353, None, None),  # noqa: S104  # a parsed value
    ]


def test_df_records_keep_a_mount_point_with_spaces_and_a_missing_percentage() -> None:
    lines = [
        "Filesystem     Type 1-blocks        Used   Available Capacity Mounted on",
        "/dev/vda       ext4 270553174016 31171506176 77772787712      29% /",
        "server:/x      nfs4 1000 0 1000 - /mnt/my share",
    ]
    first, second = parse_df(lines)
    assert (first.type, first.size_bytes, first.use_percent, first.mount) == ("ext4", 270553174016, 29, "/")
    assert (second.use_percent, second.mount) == (None, "/mnt/my share")


def test_du_records_split_the_paths_total_from_its_children() -> None:
    raw = b"900\t/data\x00500\t/data/a b\x00300\t/data/c\x00"
    total, children = parse_du(base64.b64encode(raw).decode(), "/data/")
    assert total == 900
    assert [(c.path, c.bytes) for c in children] == [("/data/a b", 500), ("/data/c", 300)]


def test_nvidia_smi_csv_rows_become_gpus_with_not_available_as_null() -> None:
    lines = ["0, Tesla T4, GPU-1, 15360, 12, [N/A], 41, 535.104.05", "garbage"]
    [gpu] = parse_gpus(lines)
    assert gpu.memory_total_bytes == 15360 * 2**20
    assert gpu.utilization_percent is None
    assert gpu.temperature_c == 41.0


def test_os_release_values_are_unquoted_as_shell_words() -> None:
    release = parse_os_release(['PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"', "ID=debian", "# c", "bad"])
    assert release.pretty_name == "Debian GNU/Linux 12 (bookworm)"
    assert release.id == "debian"


def test_process_records_keep_a_command_name_with_spaces_and_cap_argv() -> None:
    argv = base64.b64encode(b"python3\x00-c\x00" + b"x" * 100).decode()
    text = (
        "H 100 4096 1700000000 1000.00\n"
        "P 42 1 1000 S 500 50000 10 my prog\n"
        f"A {argv}\n"
        "U 1000 alice\n"
        "P 43 1 0 R 0 0 0 short\n"
        "T 7\n"
    )
    records, matched = parse_processes(text, argv_cap=20)
    assert matched == 7
    first, second = records
    assert (first.name, first.user, first.rss_bytes, first.start_time) == (
        "my prog",
        "alice",
        40960,
        1700000500.0,
    )
    assert first.cpu_percent == 1.0  # 5 s of CPU over 500 s of life
    assert first.argv[:2] == ["python3", "-c"]
    assert first.argv_truncated
    assert (second.user, second.argv) == (None, [])


@pytest.mark.parametrize("hz", [100, 250, 300, 1000, 1024])
def test_a_start_time_gives_signal_sh_its_exact_clock_tick_back_at_any_clk_tck(hz: int) -> None:
    btime = 1_764_600_000
    for starttime in (0, 1, 7, hz - 1, hz, 12_345, 98_765_431, 2**40 + 3):
        epoch = start_epoch(btime, starttime, hz)
        sent = float(f"{epoch:.6f}")  # the argument RemoteSystem.signal hands signal.sh
        assert int((sent - btime) * hz + 0.5) == starttime  # signal.sh's awk: (e - b) * hz + 0.5
        assert int((start_epoch(btime, starttime + 1, hz) - btime) * hz + 0.5) != starttime
