"""A Ray cluster of fake GPU nodes on this machine, for trying the launcher
and for tests: one head plus ``nodes`` worker nodes, each started with
``ray start`` (as on a real cluster) with ``--num-gpus`` and the labels
``gangway/server`` and ``gangway/rack`` the launcher places by.

The cluster uses Ray's token authentication with a token of its own (Ray
2.60 turns token mode on by itself once ``~/.ray/auth_token`` exists, and
nodes that disagree on the mode cannot join); :meth:`LocalCluster.connect`
connects this process with it.

Every process it starts carries its own ``--temp-dir`` on its command line,
which is how :meth:`LocalCluster.stop` finds them (and only them) again, and
how :meth:`LocalCluster.kill_node` finds one node's raylet.

Ray binds the host's own address even when told ``127.0.0.1``; to keep all
traffic on loopback run it inside a network namespace whose only interface
is ``lo`` (the tests do: ``tests/netns.py``).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["LocalCluster"]

SERVER_LABEL = "gangway/server"
RACK_LABEL = "gangway/rack"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _labels(text: str) -> Dict[str, str]:
    """Node labels as a raylet's command line gives them: JSON, or k=v,k=v."""
    text = text.strip()
    if text.startswith("{"):
        try:
            parsed = json.loads(text)
        except ValueError:
            return {}
        return {str(k): str(v) for k, v in parsed.items()} if isinstance(parsed, dict) else {}
    return dict(p.split("=", 1) for p in text.split(",") if "=" in p)


def _ray_cli() -> List[str]:
    """The `ray` command of the running interpreter's environment."""
    beside = Path(sys.executable).with_name("ray")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("ray")
    if found:
        return [found]
    return [sys.executable, "-m", "ray.scripts.scripts"]


class LocalCluster:
    """``nodes`` fake GPU nodes of ``gpus_per_node`` GPUs in ``racks`` racks
    (servers ``s0``, ``s1``, ... filled rack by rack: ``r0`` gets the first
    ``nodes / racks``), plus a head node without GPUs.

    >>> with LocalCluster(nodes=4, gpus_per_node=8, racks=2) as cluster:  # doctest: +SKIP
    ...     cluster.connect()
    """

    def __init__(
        self,
        nodes: int = 4,
        gpus_per_node: int = 8,
        racks: int = 2,
        *,
        head_cpus: int = 2,
        object_store_mb: int = 100,
        health_check_ms: int = 500,
        env: Optional[Dict[str, str]] = None,
        accelerator_types: Optional[List[str]] = None,
    ) -> None:
        if nodes < 1 or racks < 1 or racks > nodes:
            raise ValueError(f"need 1 <= racks <= nodes, got {racks} racks for {nodes} nodes")
        if accelerator_types is not None and len(accelerator_types) != nodes:
            raise ValueError(f"accelerator_types names {len(accelerator_types)} types for {nodes} nodes")
        self.nodes = nodes
        self.gpus_per_node = gpus_per_node
        self.racks = racks
        self.head_cpus = head_cpus
        self.object_store_mb = object_store_mb
        self.health_check_ms = health_check_ms
        self.extra_env = dict(env or {})
        self.temp_dir: Optional[str] = None
        self.port: Optional[int] = None
        per_rack = -(-nodes // racks)
        #: Server name -> rack name.
        self.servers: Dict[str, str] = {f"s{i}": f"r{i // per_rack}" for i in range(nodes)}
        #: Server name -> its GPUs' accelerator type (the resource
        #: ``accelerator_type:<type>`` Ray gives a node with such GPUs).
        self.accelerator_types: Dict[str, str] = (
            {f"s{i}": t for i, t in enumerate(accelerator_types)} if accelerator_types else {}
        )
        self.killed: List[str] = []
        #: The cluster's authentication token: this process's own when it
        #: has one (Ray keeps the first token it reads), else a new one.
        env_token = os.environ.get("RAY_AUTH_TOKEN")
        if os.environ.get("RAY_AUTH_MODE") == "token" and env_token:
            self.token = env_token
        else:
            self.token = secrets.token_hex(32)

    @property
    def address(self) -> str:
        """The GCS address to give ``ray.init(address=...)``."""
        if self.port is None:
            raise RuntimeError("the cluster is not started")
        return f"127.0.0.1:{self.port}"

    def _env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env.update(
            RAY_USAGE_STATS_ENABLED="0",
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN=self.token,
            # Notice a dead node in about a second instead of the default ~30 s.
            RAY_health_check_period_ms=str(self.health_check_ms),
            RAY_health_check_timeout_ms=str(self.health_check_ms),
            RAY_health_check_failure_threshold="2",
            RAY_health_check_initial_delay_ms="0",
        )
        env.update(self.extra_env)
        return env

    def _ray_start_async(self, args: List[str]) -> "Tuple[List[str], subprocess.Popen[str]]":
        cmd = _ray_cli() + ["start", "--disable-usage-stats", *args]
        proc = subprocess.Popen(
            cmd, env=self._env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        return cmd, proc

    def _ray_start(self, args: List[str]) -> None:
        cmd, proc = self._ray_start_async(args)
        stdout, stderr = proc.communicate(timeout=180)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{stdout}\n{stderr}")

    def start(self) -> "LocalCluster":
        """Starts the head and every node; returns once all are up. On
        failure, stops whatever it started and raises RuntimeError."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> "LocalCluster":
        self.temp_dir = tempfile.mkdtemp(prefix="gwray-", dir="/tmp")
        self.port = _free_port()
        common = [
            "--node-ip-address=127.0.0.1",
            f"--object-store-memory={self.object_store_mb * 1024 * 1024}",
        ]
        self._ray_start(
            [
                "--head",
                f"--port={self.port}",
                f"--temp-dir={self.temp_dir}",
                f"--num-cpus={self.head_cpus}",
                "--num-gpus=0",
                "--include-dashboard=false",
                *common,
            ]
        )
        # One at a time: nodes started together race for ports and time out.
        for server, rack in self.servers.items():
            typed = server in self.accelerator_types
            resources = (
                [f"--resources={json.dumps({'accelerator_type:' + self.accelerator_types[server]: 1})}"]
                if typed
                else []
            )
            self._ray_start(
                [
                    f"--address={self.address}",
                    f"--temp-dir={self.temp_dir}",
                    "--num-cpus=0",
                    f"--num-gpus={self.gpus_per_node}",
                    f"--labels={SERVER_LABEL}={server},{RACK_LABEL}={rack}",
                    *resources,
                    *common,
                ]
            )
        return self

    def connect(self, **ray_init: Any) -> Any:
        """Connects this process to the cluster (``ray.init``) with its token;
        also sets ``RAY_AUTH_MODE`` and ``RAY_AUTH_TOKEN`` in this process's
        environment, for Ray and for the processes it starts."""
        import ray

        os.environ["RAY_AUTH_MODE"] = "token"
        os.environ["RAY_AUTH_TOKEN"] = self.token
        # Ray reads RAY_AUTH_MODE into its config when it is imported; read it
        # again, as Ray itself does when it turns token mode on.
        try:
            from ray._raylet import Config  # type: ignore[attr-defined]

            Config.initialize("")
        except (ImportError, AttributeError):
            pass
        return ray.init(address=self.address, **ray_init)

    def pids(self) -> List[int]:
        """Every live process of this cluster (found by its temp dir)."""
        if self.temp_dir is None:
            return []
        needle = self.temp_dir.encode()
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if needle in cmdline:
                found.append(int(entry))
        return found

    def _raylet_of(self, server: str) -> int:
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().decode(errors="replace").split("\0")
            except OSError:
                continue
            if not argv or not argv[0].endswith("/raylet"):
                continue
            for a in argv:
                if a.startswith("--labels=") and _labels(a[len("--labels=") :]).get(SERVER_LABEL) == server:
                    return pid
        raise LookupError(f"no raylet of server {server!r} is running")

    def kill_node(self, server: str) -> None:
        """Kills the raylet of ``server`` with SIGKILL, as a machine dies; its
        workers exit with it and Ray marks the node dead."""
        os.kill(self._raylet_of(server), signal.SIGKILL)
        self.killed.append(server)

    def stop(self) -> None:
        """Stops every process of this cluster and removes its temp dir."""
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            pids = self.pids()
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.1)
            if not self.pids():
                break
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            self.temp_dir = None

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
