"""Starts the real `foyer` binary on a free loopback port for the interop tests."""
import os
import pathlib
import signal
import socket
import subprocess
import time
import urllib.request

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
DEMO_EMAIL = "demo@foyer.test"
DEMO_PASSWORD = "interop password"


def foyer_binary() -> str:
    binary = os.environ.get("FOYER_BINARY") or str(REPO / ".build/debug/foyer")
    if not os.access(binary, os.X_OK):
        pytest.exit(f"no foyer binary at {binary}: run `swift build` first (scripts/test does)", returncode=2)
    return binary


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RunningServer:
    def __init__(self, workdir: pathlib.Path, extra_env=None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.database = workdir / "foyer.sqlite"
        self.log_path = workdir / "server.log"
        env = dict(os.environ, FOYER_DEMO_EMAIL=DEMO_EMAIL, FOYER_DEMO_PASSWORD=DEMO_PASSWORD, **(extra_env or {}))
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [foyer_binary(), "serve", "--port", str(self.port), "--database", str(self.database), "--root", str(REPO)],
            env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"foyer exited at start:\n{self.log_path.read_text()}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=1) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"foyer did not answer /healthz within 30 s:\n{self.log_path.read_text()}")
            time.sleep(0.1)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        return self.process.returncode


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    running = RunningServer(tmp_path_factory.mktemp("foyer"))
    yield running
    running.stop()
