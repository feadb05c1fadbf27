"""Deploys nobody notices: a SIGTERM drained (healthz 503 while requests are still served, then streams and websockets
ended spread over the grace), a new process started beside the old on the same port taking every new connection,
live pages resuming on it without a reload, and a listening socket passed the way systemd passes it."""
import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

from websockets.asyncio.client import connect

from conftest import DEMO_EMAIL, DEMO_PASSWORD, REPO, RunningServer, foyer_binary, free_port
from test_graphql import session_token
from test_live import RawStream, create_post, event_ids, get, stream_path


def healthz(server) -> int:
    return get(server.url + "/healthz")[0]


def wait_for(condition, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {seconds} s"
        time.sleep(0.02)


def test_sigterm_drains_then_ends_streams_and_websockets_spread_over_the_grace(tmp_path):
    foyer = RunningServer(tmp_path, extra_env={"FOYER_DRAIN_DELAY": "1.5", "FOYER_SHUTDOWN_GRACE": "4"})
    try:
        token = session_token(foyer)
        path = stream_path(get(foyer.url + "/posts")[1])
        streams = [RawStream(foyer, path) for _ in range(20)]
        for stream in streams:
            stream.read_until(b": posts\n\n")

        async def subscribed_until_closed():
            async with connect(f"ws://127.0.0.1:{foyer.port}/graphql", subprotocols=["graphql-transport-ws"]) as ws:
                await ws.send(json.dumps({"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}))
                assert json.loads(await ws.recv())["type"] == "connection_ack"
                await ws.send(json.dumps({"type": "subscribe", "id": "1", "payload": {"query": "subscription { taskAdded { id } }"}}))
                subscribed.set()
                await ws.wait_closed()
                return ws.close_code, ws.close_reason

        subscribed = threading.Event()
        closed = {}
        socket_thread = threading.Thread(target=lambda: closed.update(code=asyncio.run(subscribed_until_closed())))
        socket_thread.start()
        assert subscribed.wait(5)

        signalled = time.monotonic()
        foyer.process.send_signal(signal.SIGTERM)
        # At once: the balancer's health check fails, while requests are still answered, each closing its connection.
        wait_for(lambda: healthz(foyer) == 503, 1, "healthz answers 503")
        status, body = get(foyer.url + "/healthz")
        assert (status, json.loads(body)["status"]) == (503, "draining")
        with socket.create_connection(("127.0.0.1", foyer.port)) as plain:
            plain.sendall(b"GET /up HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            answer = plain.recv(4096)
            assert answer.startswith(b"HTTP/1.1 200") and b"\r\nconnection: close\r\n" in answer.lower(), answer
        assert time.monotonic() - signalled < 1.5, "the drain delay is not over yet"

        # After the delay no new connection is taken; each stream ends at its own moment with a retry: of its own.
        ends, endings = [], []

        def read_to_end(stream):
            endings.append(stream.read_to_end(8))
            ends.append(time.monotonic() - signalled)

        readers = [threading.Thread(target=read_to_end, args=(stream,)) for stream in streams]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(10)
        for stream in streams:
            stream.close()
        assert len(endings) == len(streams) and all(re.search(rb"retry: \d+\n\n", rest) for rest in endings), endings
        with_refusal = False
        try:
            socket.create_connection(("127.0.0.1", foyer.port), timeout=1).close()
        except ConnectionRefusedError:
            with_refusal = True
        assert with_refusal or foyer.process.poll() is not None, "the listening socket closed after the drain delay"
        assert min(ends) >= 1.4, ends
        assert max(ends) - min(ends) >= 1.0, f"endings spread over the grace, not all at once: {sorted(ends)}"
        assert max(ends) <= 1.5 + 4 + 1, ends
        socket_thread.join(8)
        assert closed["code"][0] == 1012, closed  # service restart: reconnect
        assert foyer.process.wait(timeout=10) == 0
        log = foyer.log_path.read_text()
        assert "SIGTERM: draining" in log and "Drained and stopped" in log, log[-2000:]
    finally:
        foyer.stop()


def test_a_second_signal_ends_the_process_at_once(tmp_path):
    foyer = RunningServer(tmp_path, extra_env={"FOYER_DRAIN_DELAY": "30"})
    try:
        foyer.process.send_signal(signal.SIGTERM)
        wait_for(lambda: healthz(foyer) == 503, 2, "draining")
        started = time.monotonic()
        foyer.process.send_signal(signal.SIGINT)
        foyer.process.wait(timeout=5)
        assert time.monotonic() - started < 5
        assert foyer.process.returncode != 0
    finally:
        foyer.stop()


def test_ctrl_c_stops_at_once_whatever_the_drain_settings(tmp_path):
    """SIGINT is a person at a terminal, not a deploy: no drain delay, open streams end together."""
    foyer = RunningServer(tmp_path, extra_env={"FOYER_DRAIN_DELAY": "30", "FOYER_SHUTDOWN_GRACE": "30"})
    try:
        stream = RawStream(foyer, stream_path(get(foyer.url + "/posts")[1]))
        stream.read_until(b": posts\n\n")
        started = time.monotonic()
        foyer.process.send_signal(signal.SIGINT)
        assert re.search(rb"retry: \d+\n\n", stream.read_to_end(5))
        assert foyer.process.wait(timeout=5) == 0
        assert time.monotonic() - started < 5
        stream.close()
    finally:
        foyer.stop()


class TightLoop:
    """Clients each opening a new connection for every request, as fast as they can, counting what failed."""

    def __init__(self, port: int, clients: int = 8):
        self.port, self.answered, self.failures = port, 0, []
        self.running = True
        self.threads = [threading.Thread(target=self.run) for _ in range(clients)]
        for thread in self.threads:
            thread.start()

    def run(self):
        deadline = time.monotonic() + 60  # bounded whatever happens
        while self.running and time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=5) as connection:
                    connection.sendall(b"GET /up HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                    answer = b""
                    while chunk := connection.recv(4096):
                        answer += chunk
                if answer.startswith(b"HTTP/1.1 200"):
                    self.answered += 1
                else:
                    self.failures.append(answer[:100])
            except OSError as error:
                self.failures.append(repr(error))

    def stop(self):
        self.running = False
        for thread in self.threads:
            thread.join(10)


def test_a_new_process_on_the_same_port_takes_over_and_the_old_one_refuses_nothing(tmp_path):
    """One instance on SQLite, restarted by starting the new process first: a client connecting in a tight loop is
    never refused, and a live page that followed the old process resumes on the new one without a reload."""
    port = free_port()
    database = tmp_path / "shared.sqlite"
    for name in ("old", "new"):
        (tmp_path / name).mkdir()
    old = RunningServer(tmp_path / "old", port=port, database=str(database))
    new = None
    loop = TightLoop(port)
    try:
        token = session_token(old)
        path = stream_path(get(old.url + "/posts")[1])
        stream = RawStream(old, path)
        stream.read_until(b": posts\n\n")
        create_post(old, token, "Seen on the old process")
        seen = event_ids(stream.read_until(b"</turbo-stream>\n\n"))
        assert len(seen) == 1

        # Its /healthz may be answered by the old process meanwhile: its own log says when it listens.
        new = RunningServer(tmp_path / "new", port=port, database=str(database))
        wait_for(lambda: "Server started and listening" in new.log_path.read_text(), 30, "the new process listens")
        old.process.send_signal(signal.SIGTERM)
        ending = stream.read_to_end(5)
        assert re.search(rb"retry: \d+\n\n", ending), ending
        stream.close()
        assert old.process.wait(timeout=10) == 0
        create_post(new, token, "Made while the page was away")
        answered_before = loop.answered
        wait_for(lambda: loop.answered > answered_before + 20, 10, "the new process answers the loop")
        loop.stop()
        assert loop.failures == [], loop.failures[:5]
        assert loop.answered > 50, loop.answered

        resumed = RawStream(new, path, [f"Last-Event-ID: {seen[0].decode()}"])
        replay = resumed.read_until(b"Made while the page was away")
        assert b"data-live-reload" not in replay and b"Seen on the old process" not in replay, replay
        resumed.close()
    finally:
        loop.stop()
        old.stop()
        if new:
            new.stop()


def test_a_listening_socket_passed_as_systemd_passes_it_is_served(tmp_path):
    """Socket activation: fd 3, LISTEN_FDS=1, LISTEN_PID naming the process; Foyer binds nothing itself."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    port = listener.getsockname()[1]
    # A connection made before Foyer starts waits in the socket's queue, as systemd's would.
    early = socket.create_connection(("127.0.0.1", port))
    early.sendall(b"GET /up HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")

    def on_fd_3():
        os.dup2(listener.fileno(), 3)

    log_path = tmp_path / "server.log"
    env = dict(os.environ, FOYER_DEMO_EMAIL=DEMO_EMAIL, FOYER_DEMO_PASSWORD=DEMO_PASSWORD, FOYER_DRAIN_DELAY="0", FOYER_SHUTDOWN_GRACE="1")
    env.pop("LISTEN_FDS", None)
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            # The shell's pid is Foyer's once it execs, as systemd names the process it starts. --port names another
            # port: the passed socket wins.
            ["sh", "-c", 'LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" "$@"', foyer_binary(), "serve", "--port", str(free_port()),
             "--database", str(tmp_path / "foyer.sqlite"), "--root", str(REPO)],
            env=env, stdout=log, stderr=subprocess.STDOUT, close_fds=False, preexec_fn=on_fd_3,
        )
    try:
        early.settimeout(30)
        answer = b""
        while chunk := early.recv(4096):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200"), answer
        assert get(f"http://127.0.0.1:{port}/up")[0] == 200
        assert "the socket systemd passed (fd 3)" in log_path.read_text()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        early.close()
        listener.close()
        if process.poll() is None:
            process.kill()
            process.wait()


# --- A rolling restart of two instances behind nginx, under load --------------------------------------------------

class Subscriber:
    """An EventSource through the balancer: reconnects after its last `retry:` with `Last-Event-ID`, as browsers do,
    and keeps the posts it was told of, in order."""

    def __init__(self, port: int, path: str):
        self.port, self.path = port, path
        self.titles, self.reloads, self.statuses, self.reconnects = [], 0, [], []
        self.last_id, self.retry = None, 2.0

    async def run(self):
        while True:
            try:
                await self.follow_once()
            except (OSError, asyncio.IncompleteReadError, ValueError) as error:
                self.statuses.append(repr(error))
            self.reconnects.append(time.monotonic())
            await asyncio.sleep(self.retry)

    async def follow_once(self):
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            head = [f"GET {self.path} HTTP/1.1", "Host: 127.0.0.1", "Accept: text/event-stream"]
            if self.last_id:
                head.append(f"Last-Event-ID: {self.last_id}")
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
            status = int((await reader.readline()).split()[1])
            self.statuses.append(status)
            while (await reader.readline()) not in (b"\r\n", b""):
                pass
            if status != 200:
                return
            pending = b""
            while True:
                size = int((await reader.readline()).strip() or b"0", 16)
                if size == 0:
                    return
                pending += (await reader.readexactly(size + 2))[:-2]
                while b"\n\n" in pending:
                    event, pending = pending.split(b"\n\n", 1)
                    self.take(event)
        finally:
            writer.close()

    def take(self, event: bytes):
        data = []
        for line in event.split(b"\n"):
            name, _, value = line.partition(b": ")
            if name == b"retry":
                self.retry = int(value) / 1000
            elif name == b"id":
                self.last_id = value.decode()
            elif name == b"data":
                data.append(value)
        html = b"\n".join(data)
        if b"data-live-reload" in html:
            self.reloads += 1
        if found := re.search(rb"rolling post (\d+)<", html):
            self.titles.append(int(found.group(1)))


class SocketSubscriber:
    """A graphql-transport-ws client through the balancer, subscribed to taskAdded; when its socket closes it
    connects and subscribes again, keeping the close codes it was given."""

    def __init__(self, port: int, token: str):
        self.url, self.token = f"ws://127.0.0.1:{port}/graphql", token
        self.close_codes, self.acknowledged = [], 0

    async def run(self):
        while True:
            try:
                async with connect(self.url, subprotocols=["graphql-transport-ws"]) as ws:
                    await ws.send(json.dumps({"type": "connection_init", "payload": {"Authorization": f"Bearer {self.token}"}}))
                    assert json.loads(await ws.recv())["type"] == "connection_ack"
                    await ws.send(json.dumps({"type": "subscribe", "id": "1", "payload": {"query": "subscription { taskAdded { id } }"}}))
                    self.acknowledged += 1
                    await ws.wait_closed()
                    self.close_codes.append(ws.close_code)
            except Exception as error:  # a refused upgrade, a close during the handshake: kept, then tried again
                self.close_codes.append(repr(error))
            await asyncio.sleep(0.1)


def test_a_rolling_restart_under_load_fails_no_request_and_loses_no_event(tmp_path_factory):
    from test_instances import Balancer, fresh_database, request

    database = fresh_database()
    settings = {"FOYER_DRAIN_DELAY": "1", "FOYER_SHUTDOWN_GRACE": "4"}
    ports = [free_port(), free_port()]

    def instance(index: int) -> RunningServer:
        return RunningServer(tmp_path_factory.mktemp(f"rolling-{index}"), port=ports[index], database=database,
                             extra_args=["--trust-proxy"], extra_env=settings)

    instances = [instance(0), instance(1)]
    balancer = Balancer(tmp_path_factory.mktemp("rolling-nginx"), instances, worker_connections=4096)
    failures, answered, posted = [], [0], []
    running = threading.Event()
    running.set()
    try:
        token = session_token(balancer)
        path = stream_path(get(balancer.url + "/posts")[1])
        subscribers = [Subscriber(balancer.port, path) for _ in range(300)]
        sockets = [SocketSubscriber(balancer.port, token) for _ in range(10)]
        loop = asyncio.new_event_loop()
        following = [loop.create_task(subscriber.run()) for subscriber in subscribers + sockets]
        threading.Thread(target=loop.run_forever, daemon=True).start()
        wait_for(lambda: all(subscriber.statuses == [200] for subscriber in subscribers), 20, "every subscriber follows")
        wait_for(lambda: all(socket.acknowledged == 1 for socket in sockets), 20, "every socket subscribes")

        def writer():
            number = 0
            while running.is_set():
                status, body, _ = request_with_key(balancer.url + "/api/v1/posts", token, {"title": f"rolling post {number}", "content": "x"})
                (posted.append(number) if status == 201 else failures.append(("write", status, body[:200])))
                number += 1
                time.sleep(0.1)

        def request_with_key(url, token, body):
            import urllib.request, urllib.error, uuid
            data = json.dumps(body).encode()
            headers = {"Content-Type": "application/json", "Accept": "application/json", "Authorization": f"Bearer {token}",
                       "Idempotency-Key": str(uuid.uuid4())}
            try:
                with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers, method="POST"), timeout=30) as response:
                    return response.status, response.read(), None
            except urllib.error.HTTPError as error:
                return error.code, error.read(), None
            except OSError as error:
                return 0, repr(error).encode(), None

        def reader():
            while running.is_set():
                try:
                    status, body, _ = request(balancer.url + "/api/v1/posts?per_page=5")
                except OSError as error:
                    status, body = 0, repr(error).encode()
                (answered.__setitem__(0, answered[0] + 1) if status == 200 else failures.append(("read", status, body[:200])))

        load = [threading.Thread(target=writer), threading.Thread(target=reader), threading.Thread(target=reader)]
        for thread in load:
            thread.start()
        time.sleep(1)  # traffic under way before the first restart

        restarts = []
        for index in (0, 1):
            old = instances[index]
            signalled = time.monotonic()
            old.process.send_signal(signal.SIGTERM)
            assert old.process.wait(timeout=15) == 0, old.log_path.read_text()[-3000:]
            restarts.append((signalled, time.monotonic()))
            instances[index] = instance(index)
            # As an operator would: the next instance goes only once the balancer sends to this one again (nginx
            # counts the refused connections of the stop as failures and leaves it out for fail_timeout, 5 s).
            restarted = instances[index]
            wait_for(lambda: "GET /api/v1/posts 200" in restarted.log_path.read_text(), 15, "the balancer uses the restarted instance")
        time.sleep(1)
        running.clear()
        for thread in load:
            thread.join(30)
        last = posted[-1]
        wait_for(lambda: all(subscriber.titles and subscriber.titles[-1] == last for subscriber in subscribers), 15,
                 f"every subscriber hears of post {last}")
        wait_for(lambda: all(socket.acknowledged == len(socket.close_codes) + 1 for socket in sockets), 10,
                 f"every socket subscribes again: {[(socket.acknowledged, socket.close_codes) for socket in sockets]}")
        loop.call_soon_threadsafe(lambda: [task.cancel() for task in following])

        assert failures == [], failures[:10]
        assert answered[0] > 100 and len(posted) > 50, (answered[0], len(posted))
        for subscriber in subscribers:
            assert subscriber.titles == posted, f"every post once, in order: {subscriber.titles[:5]}… vs {posted[:5]}…"
            assert subscriber.reloads == 0
            assert all(status == 200 for status in subscriber.statuses), subscriber.statuses
        for socket_subscriber in sockets:
            assert socket_subscriber.close_codes and set(socket_subscriber.close_codes) == {1012}, socket_subscriber.close_codes
        reconnects = sorted(moment for subscriber in subscribers for moment in subscriber.reconnects)
        assert len(reconnects) >= len(subscribers), "each subscriber reconnected at least once"
        peak = max(sum(1 for moment in reconnects if start <= moment < start + 1) for start in reconnects)
        spans = [f"{end - start:.1f} s" for start, end in restarts]
        print(f"rolling restart: {len(posted)} posts, {answered[0]} reads, {len(reconnects)} reconnects of 300 subscribers, "
              f"peak {peak} in one second; each instance stopped in {', '.join(spans)}")
        assert peak <= 0.6 * len(subscribers), f"reconnects spread over the grace, peak {peak} in one second"
    finally:
        running.clear()
        balancer.stop()
        for running_instance in instances:
            running_instance.stop()
