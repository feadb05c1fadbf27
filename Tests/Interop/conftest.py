"""Starts the real `foyer` binary on a free loopback port for the interop tests."""
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
DEMO_EMAIL = "demo@foyer.test"
DEMO_PASSWORD = "interop password"


def wait_until_listening(port: int, process: subprocess.Popen, log_path: pathlib.Path, what: str):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited at start:\n{log_path.read_text()}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"{what} did not listen on {port} within 30 s:\n{log_path.read_text()}")


class TaskServer:
    """The ariadne showcase task server (Tests/Interop/peers), in its own venv. Can be stopped and started again."""

    def __init__(self, workdir: pathlib.Path, token: str | None, on_denied: str = "forbidden", extra_env=None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.token = token
        self.workdir = workdir
        self.env = dict(os.environ, TASK_SERVER_ON_DENIED=on_denied, **(extra_env or {}))
        if token:
            self.env["TASK_SERVER_TOKEN"] = token
        self.process = None
        self.start()

    def start(self):
        python = REPO / ".venv-peers/bin/python"
        if not python.exists():
            pytest.exit("no .venv-peers: scripts/test installs the GraphQL task server peer", returncode=2)
        log_path = self.workdir / f"task-server-{self.port}.log"
        self.log = open(log_path, "a")
        self.process = subprocess.Popen(
            [str(python), str(REPO / "Tests/Interop/peers/task_server.py"), str(self.port)],
            env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
        )
        wait_until_listening(self.port, self.process, log_path, "the task server")

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=15)
        self.log.close()


class KeycloakPeer:
    """nanoidp behind Keycloak's URL layout (Tests/Interop/peers/keycloak_adapter.py), realm `showcase`,
    confidential client `foyer`; users ada and bob."""
    realm = "showcase"
    client_id = "foyer"
    client_secret = "foyer-secret"

    def __init__(self, workdir: pathlib.Path, redirect_uris=(), expires_in: int | None = None, extra_env=None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.issuer = f"{self.url}/realms/{self.realm}"
        self.keys_dir = workdir / "nanoidp" / "keys"
        python = REPO / ".venv-oidc/bin/python"
        if not python.exists():
            pytest.exit("no .venv-oidc: scripts/test installs the OIDC provider peer", returncode=2)
        env = dict(os.environ, OIDC_REALM=self.realm, OIDC_CLIENT_ID=self.client_id, OIDC_CLIENT_SECRET=self.client_secret,
                   OIDC_REDIRECT_URIS=",".join(redirect_uris), **(extra_env or {}))
        if expires_in:
            env["OIDC_EXPIRES_IN"] = str(expires_in)
        log_path = workdir / f"oidc-{self.port}.log"
        self.log = open(log_path, "a")
        self.process = subprocess.Popen(
            [str(python), str(REPO / "Tests/Interop/peers/keycloak_adapter.py"), str(self.port), str(workdir)],
            env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )
        wait_until_listening(self.port, self.process, log_path, "the OIDC provider")

    def foyer_args(self) -> list[str]:
        return ["--keycloak-url", self.url, "--keycloak-realm", self.realm, "--keycloak-client-id", self.client_id]

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=15)
        self.log.close()


class OIDCProviderPeer:
    """A real OpenID Connect provider laid out its own way (Tests/Interop/peers): `nanoidp_provider.py` (nanoidp at
    its root) or `django_provider.py` (django-oidc-provider). Both register `foyer-web` (confidential) and
    `phone-app` (public, PKCE)."""
    client_id = "foyer-web"
    client_secret = "foyer-web-secret"
    app_client_id = "phone-app"
    app_redirect_uri = "http://127.0.0.1/phone-app/callback"

    def __init__(self, script: str, workdir: pathlib.Path, issuer_path: str, redirect_uris=()):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.issuer = self.url + issuer_path
        self.workdir = workdir
        python = REPO / ".venv-oidc/bin/python"
        if not python.exists():
            pytest.exit("no .venv-oidc: scripts/test installs the OIDC provider peers", returncode=2)
        log_path = workdir / f"{script}-{self.port}.log"
        self.log = open(log_path, "a")
        self.process = subprocess.Popen(
            [str(python), str(REPO / "Tests/Interop/peers" / script), str(self.port), str(workdir)],
            env=dict(os.environ, OIDC_REDIRECT_URIS=",".join(redirect_uris)), stdout=self.log, stderr=subprocess.STDOUT,
        )
        wait_until_listening(self.port, self.process, log_path, script)

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=15)
        self.log.close()


def curl_response(url: str, *args: str) -> tuple[int, dict, str]:
    """curl (a real client) with `-i`: the status, the headers (lower-cased names, the first of each) and the body."""
    result = subprocess.run(["curl", "-sS", "-i", url, *args], capture_output=True, timeout=60, check=True)
    head, _, body = result.stdout.decode().partition("\r\n\r\n")
    lines = head.split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(": ")
        headers.setdefault(name.lower(), value)
    return int(lines[0].split()[1]), headers, body


def wait_for_page(page, expression: str, timeout: float = 5000):
    """Polls a JavaScript expression until it is truthy. Playwright's wait_for_function compiles its predicate with
    eval inside the page, which Foyer's Content-Security-Policy (rightly) forbids; page.evaluate goes through
    DevTools and is not subject to it."""
    deadline = time.monotonic() + timeout / 1000
    while True:
        if page.evaluate(expression):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} ms waiting for {expression}")
        time.sleep(0.05)


def close_context(context, seconds: float = 30):
    """Closes a browser context, bounded. Playwright's close has no timeout, and once in a fresh-clone CI run
    closing twenty tabs never returned (every assertion before it had passed; Chromium sat idle with the renderers
    alive). If it has not returned after `seconds`, Chromium's renderers are killed, which ends their targets and
    lets the close finish; that is said on stderr, so a hang is seen rather than hidden."""
    def unstick():
        renderers = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if b"--type=renderer" in pathlib.Path(f"/proc/{pid}/cmdline").read_bytes():
                    renderers.append(int(pid))
            except OSError:
                pass  # gone meanwhile
        print(f"close_context: Chromium did not close the context in {seconds} s; killing its {len(renderers)} renderers", file=sys.stderr)
        for pid in renderers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    watchdog = threading.Timer(seconds, unstick)
    watchdog.start()
    try:
        context.close()
    finally:
        watchdog.cancel()


def wait_until(check, seconds: float = 10, what: str = "the condition"):
    """Polls `check` until it gives something truthy, which it returns; fails saying `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {seconds} s")
        time.sleep(0.05)


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
    def __init__(self, workdir: pathlib.Path, extra_env=None, extra_args=(), port: int | None = None, database: str | None = None):
        """`database`: a postgres:// URL to share with other instances; by default a SQLite file of its own."""
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.database = database or workdir / "foyer.sqlite"
        self.log_path = workdir / "server.log"
        # Stopped at once unless a test drains: no drain delay, streams and websockets ended within a second.
        env = dict(os.environ, FOYER_DEMO_EMAIL=DEMO_EMAIL, FOYER_DEMO_PASSWORD=DEMO_PASSWORD, FOYER_DRAIN_DELAY="0", FOYER_SHUTDOWN_GRACE="1")
        env.update(extra_env or {})
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [foyer_binary(), "serve", "--port", str(self.port), "--database", str(self.database), "--root", str(REPO), *extra_args],
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
def task_server(tmp_path_factory):
    peer = TaskServer(tmp_path_factory.mktemp("task-server"), token="upstream-secret")
    yield peer
    peer.stop()


@pytest.fixture(scope="session")
def upstream_foyer(tmp_path_factory, task_server):
    """Foyer proxying to the real task server, with the token it expects."""
    running = RunningServer(
        tmp_path_factory.mktemp("foyer-upstream"), extra_env={"FOYER_GRAPHQL_TOKEN": task_server.token},
        extra_args=["--graphql-url", task_server.url],
    )
    yield running
    running.stop()


@pytest.fixture
def own_server(tmp_path):
    """A server of its own, for a test whose failed sign-ins would otherwise throttle 127.0.0.1 for every later test."""
    running = RunningServer(tmp_path)
    yield running
    running.stop()


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    running = RunningServer(tmp_path_factory.mktemp("foyer"))
    yield running
    running.stop()
