"""Helpers of the `gangway` Python tests (see conftest.py for the network
namespace they run in)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import pytest

REPO = Path(__file__).resolve().parents[3]

#: Why the tests could not get a private network namespace (None: they did).
NETNS_ERROR: Optional[str] = "not attempted"


def skip_loudly(reason: str) -> None:
    """Skips the test, printing the reason on stderr too; fails it instead
    when GANGWAY_REQUIRE_ALL is set (CI sets it: there a skip would hide a
    failure)."""
    if os.environ.get("GANGWAY_REQUIRE_ALL"):
        pytest.fail(f"GANGWAY_REQUIRE_ALL is set but this test cannot run: {reason}")
    sys.stderr.write(f"SKIPPED {reason}\n")
    pytest.skip(reason)


def require_ray() -> None:
    """Skips unless Ray is installed and the process is in its own netns."""
    try:
        import ray  # noqa: F401
    except ImportError:
        skip_loudly("ray is not installed (pip install ray): the Ray launcher and sweep tests need it")
    if NETNS_ERROR is not None:
        skip_loudly(f"cannot confine Ray to loopback: {NETNS_ERROR}")


def replay_command() -> List[str]:
    """The `replay` binary: $GANGWAY_REPLAY, else the workspace's debug build,
    else `cargo run`. Skips when none is available."""
    env = os.environ.get("GANGWAY_REPLAY")
    if env:
        return [env]
    built = REPO / "target" / "debug" / "replay"
    if built.exists():
        return [str(built)]
    cargo = shutil.which("cargo")
    if cargo:
        return [
            cargo,
            "run",
            "-q",
            "--manifest-path",
            str(REPO / "Cargo.toml"),
            "-p",
            "gangway-replay",
            "--bin",
            "replay",
            "--",
        ]
    skip_loudly(
        "no replay binary: set GANGWAY_REPLAY or build the workspace (cargo build -p gangway-replay)"
    )
    return []


def run_replay_cli(args: List[str]) -> subprocess.CompletedProcess:
    """Runs the `replay` command with `args`."""
    return subprocess.run(replay_command() + args, capture_output=True, text=True, timeout=600)


def loopback_only_connections() -> List[str]:
    """TCP connections of this network namespace (as `ss -tn` lists them,
    read from /proc/net/tcp and tcp6) whose either end is not loopback."""
    bad = []
    for path, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            lines = Path(path).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, remote, state = fields[1], fields[2], fields[3]
            if state == "0A":  # LISTEN: not a connection
                continue
            for end in (local, remote):
                if not _is_loopback(end.split(":")[0], v6):
                    bad.append(f"{path}: {local} -> {remote} (state {state})")
    return bad


def _is_loopback(hexaddr: str, v6: bool) -> bool:
    raw = bytes.fromhex(hexaddr)
    if not v6:
        return raw[::-1][0] == 127
    # tcp6 stores four little-endian 32-bit words.
    words = [raw[i : i + 4][::-1] for i in range(0, 16, 4)]
    addr = b"".join(words)
    if addr == b"\0" * 15 + b"\x01":
        return True
    return addr[:12] == b"\0" * 10 + b"\xff\xff" and addr[12] == 127
