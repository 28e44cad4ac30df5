"""``omny run --backend ray --address`` against a cluster started as docs/across_machines.md
tells a user: ``ray start --head`` and ``ray start --address`` (two raylets on this machine,
each with a custom resource of its own), with token authentication as the page sets it up.

Each ``ray start`` runs with ``--block`` in a session of its own, so that the test stops
exactly its own processes (``ray stop`` would stop every Ray on the machine) and a unique
``--temp-dir``; a finalizer stops them even when the test fails. About a minute on a shared
2-core machine: marked slow (still part of the suite, so ``scripts/test`` runs it).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="the Ray backend needs ray (pip install '.[ray]')")

from onnx_ir_multidevice.examples import EXAMPLE  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]

STARTED = "Ray runtime started."
START_TIMEOUT = 180.0
"""Seconds a ``ray start`` may take to say it started (a busy 2-core machine)."""


_NODES = (
    "import json, sys, ray; ray.init(address=sys.argv[1], log_to_driver=False); "
    "print(json.dumps({r: n['NodeID'] for n in ray.nodes() if n['Alive'] "
    "for r in n['Resources'] if r.startswith('box')}))"
)
"""A driver that prints ``{custom resource: node id}`` of the cluster at ``argv[1]``."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _RayStart:
    """One ``ray start ... --block`` process, its output read by a thread."""

    def __init__(self, args: list[str], env: dict[str, str], until: str) -> None:
        self.lines: list[str] = []
        self.match: re.Match[str] | None = None
        self._until = re.compile(until)
        self._seen = threading.Event()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ray.scripts.scripts", "start", *args, "--block"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,  # its own process group: stop() ends it and its children
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip())
            if self.match is None:
                self.match = self._until.search(line)
                if self.match is not None:
                    self._seen.set()
        self._seen.set()  # the process ended: wait() returns and says so

    def wait(self) -> re.Match[str] | None:
        """Wait for the line ``until`` matches (``None``: the process ended without it)."""
        self._seen.wait(START_TIMEOUT)
        return self.match

    def stop(self) -> None:
        """SIGTERM (``ray start --block`` then stops what it started), then SIGKILL the group."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(60)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(60)


@pytest.fixture
def ray_start_cluster(request):
    """A head (resource ``boxa``) and a worker (``boxb``) started with ``ray start``; yields
    ``(address the head printed, environment for the driver, {resource: node id})``."""
    temp = tempfile.mkdtemp(prefix="omny-ray-")  # short: Ray's socket paths live under it
    started: list[_RayStart] = []

    def start(what: str, args: list[str], until: str) -> re.Match[str]:
        """Start a node; again once if it fails (Ray gives a raylet 30 s to register, which a
        busy machine can miss); skip the test with Ray's output if it fails twice."""
        for _ in range(2):
            started.append(_RayStart(args, env, until))
            match = started[-1].wait()
            if match is not None:
                return match
            started[-1].stop()
        tail = "\n".join(started[-1].lines[-15:])
        pytest.skip(f"this machine cannot start {what} with `ray start`:\n{tail}")

    def stop() -> None:
        for process in reversed(started):
            process.stop()
        shutil.rmtree(temp, ignore_errors=True)

    request.addfinalizer(stop)  # noqa: PT021 (set before the nodes start: a failed start is stopped too)
    token = Path(temp, "auth_token")
    token.write_text(secrets.token_hex(32))
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}
    # What the docs tell a user: token authentication on, every process given the token.
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token), RAY_USAGE_STATS_ENABLED="0")
    common = ["--num-cpus", "1", "--object-store-memory", str(80 * 1024 * 1024)]
    common += ["--temp-dir", temp, "--disable-usage-stats"]
    port = _free_port()
    head = start(
        "a head node",
        [
            "--head",
            f"--port={port}",
            "--resources",
            '{"boxa": 1}',
            "--include-dashboard=false",
            f"--dashboard-port={_free_port()}",
            f"--dashboard-agent-listen-port={_free_port()}",
            *common,
        ],
        until=r"ray start --address='([^']+)'",  # what it tells a user to run on other nodes
    )
    address = head.group(1)
    start(
        "a second node",
        [
            f"--address={address}",
            "--resources",
            '{"boxb": 1}',
            f"--dashboard-agent-listen-port={_free_port()}",
            *common,
        ],
        until=re.escape(STARTED),
    )
    nodes = subprocess.run(
        [
            sys.executable,
            "-c",
            _NODES,
            address,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    return address, env, json.loads(nodes.stdout.strip().splitlines()[-1])


def test_omny_run_on_a_cluster_started_with_ray_start(ray_start_cluster):
    address, env, node_of = ray_start_cluster
    assert set(node_of) == {"boxa", "boxb"} and node_of["boxa"] != node_of["boxb"]
    argv = [sys.executable, "-m", "onnx_ir_multidevice._cli", "run", str(EXAMPLE)]
    argv += ["--shards", "2", "--threads", "1", "--requests", "4", "--warmup", "1"]
    argv += ["--backend", "ray", "--address", address, "--placement", "boxa,boxb", "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)["result"]
    assert result["backend"] == "ray" and result["requests"] == 4 and result["failed"] == 0
    assert [stage["node_id"] for stage in result["stages"]] == [node_of["boxa"], node_of["boxb"]]
    assert all(stage["node_address"] for stage in result["stages"])
    assert result["baseline"]["max_abs_diff"] <= 1e-4  # the outputs equal the whole model's
    # A driver without the cluster's token is refused with what to do, not a traceback.
    tokenless = {**env, "RAY_AUTH_MODE": "disabled"}
    done = subprocess.run(
        argv, capture_output=True, text=True, env=tokenless, timeout=300, check=False
    )
    assert done.returncode != 0
    assert "RAY_AUTH_MODE=token" in done.stdout + done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
