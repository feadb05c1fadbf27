"""WebSocket /graphql with real clients: gql in both subprotocols, on the embedded service and relayed to the ariadne
task server; raw `websockets` for the refusals and the same-origin cookie rule."""
import asyncio
import json

import pytest
from gql import Client, gql
from gql.transport.exceptions import TransportQueryError
from gql.transport.websockets import WebsocketsTransport
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedError

from conftest import RunningServer, TaskServer
from test_graphql import post, session_token

PROTOCOLS = ["graphql-transport-ws", "graphql-ws"]
CREATE = {"query": 'mutation($title: String!) { createTask(title: $title, description: "live") { id } }'}


def ws_url(foyer) -> str:
    return foyer.url.replace("http://", "ws://") + "/graphql"


async def first_event(url: str, protocol: str, token: str, subscription: str, trigger) -> dict:
    """Subscribes with gql, then calls `trigger` (in a thread) every 0.3 s until the first event arrives."""
    transport = WebsocketsTransport(url=url, init_payload={"Authorization": f"Bearer {token}"}, subprotocols=[protocol])
    async with Client(transport=transport, fetch_schema_from_transport=False) as session:
        async def keep_triggering():
            while True:
                await asyncio.sleep(0.3)
                await asyncio.to_thread(trigger)

        triggering = asyncio.create_task(keep_triggering())
        try:
            async for result in session.subscribe(gql(subscription)):
                return result
        finally:
            triggering.cancel()


def run(coroutine, seconds: float = 20):
    return asyncio.run(asyncio.wait_for(coroutine, seconds))


def task_added_through(foyer, protocol: str, title: str) -> dict:
    """Subscribes to taskAdded through Foyer with gql, creating tasks titled `title` through Foyer until one arrives."""
    token = session_token(foyer)

    def create():
        status, body = post(foyer.url + "/graphql", {**CREATE, "variables": {"title": title}}, token)
        assert status == 200, body

    return run(first_event(ws_url(foyer), protocol, token, "subscription { taskAdded { id title version } }", create))["taskAdded"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_gql_subscribes_on_the_embedded_service(server, protocol):
    title = f"Embedded event over {protocol}"
    task = task_added_through(server, protocol, title)
    assert task["title"] == title
    assert task["version"] == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_gql_queries_and_mutates_over_the_socket(server, protocol):
    token = session_token(server)

    async def talk():
        transport = WebsocketsTransport(url=ws_url(server), init_payload={"Authorization": f"Bearer {token}"}, subprotocols=[protocol])
        async with Client(transport=transport, fetch_schema_from_transport=False) as session:
            created = await session.execute(gql('mutation { createTask(title: "Socket", description: "d") { id } }'))
            read = gql("query($id: ID!) { getTask(id: $id) { title } }")
            read.variable_values = {"id": created["createTask"]["id"]}
            fetched = await session.execute(read)
            with pytest.raises(TransportQueryError):
                await session.execute(gql("query { noSuchField }"))
            return fetched

    assert run(talk())["getTask"]["title"] == "Socket"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_subscriptions_are_relayed_to_the_upstream(upstream_foyer, task_server, protocol):
    """The event starts at the ariadne server (a mutation made there directly) and reaches gql through Foyer."""
    token = session_token(upstream_foyer)
    title = f"Upstream event over {protocol}"

    def create_upstream():
        status, body = post(task_server.url, {**CREATE, "variables": {"title": title}}, task_server.token)
        assert status == 200, body

    event = run(first_event(ws_url(upstream_foyer), protocol, token, "subscription { taskAdded { id title } }", create_upstream))
    assert event["taskAdded"]["title"] == title


def test_an_upstream_refusing_our_token_ends_the_subscription_with_a_clear_error(tmp_path):
    peer = TaskServer(tmp_path, token="the-right-one")
    foyer = RunningServer(tmp_path, extra_env={"FOYER_GRAPHQL_TOKEN": "a-wrong-one"}, extra_args=["--graphql-url", peer.url])
    try:
        token = session_token(foyer)

        async def subscribe():
            transport = WebsocketsTransport(url=ws_url(foyer), init_payload={"Authorization": f"Bearer {token}"}, subprotocols=["graphql-transport-ws"])
            async with Client(transport=transport, fetch_schema_from_transport=False) as session:
                with pytest.raises(TransportQueryError) as refused:
                    async for _ in session.subscribe(gql("subscription { taskAdded { id } }")):
                        pass
                return refused.value

        error = run(subscribe())
        assert "upstream session expired" in str(error)
    finally:
        foyer.stop()
        peer.stop()


def test_refusals_follow_each_protocol(server):
    async def talk():
        async with connect(ws_url(server), subprotocols=["graphql-transport-ws"]) as socket:
            assert socket.subprotocol == "graphql-transport-ws"
            await socket.send(json.dumps({"type": "connection_init", "payload": {"Authorization": "Bearer nonsense"}}))
            await socket.wait_closed()
            modern = socket.close_code
        async with connect(ws_url(server), subprotocols=["graphql-ws"]) as socket:
            assert socket.subprotocol == "graphql-ws"
            await socket.send(json.dumps({"type": "connection_init", "payload": {}}))
            legacy = json.loads(await socket.recv())
        return modern, legacy

    modern, legacy = run(talk())
    assert modern == 4403
    assert legacy["type"] == "connection_error"
    assert "Sign in first" in legacy["payload"]["message"]


def test_the_session_cookie_counts_only_from_our_own_origin(server):
    token = session_token(server)
    cookie = {"Cookie": f"foyer_session={token}"}

    async def talk(origin: str):
        async with connect(ws_url(server), subprotocols=["graphql-transport-ws"], origin=origin, additional_headers=cookie) as socket:
            await socket.send(json.dumps({"type": "connection_init"}))
            try:
                return json.loads(await socket.recv())["type"]
            except ConnectionClosedError:  # refused: the close is the answer
                return socket.close_code

    assert run(talk(server.url)) == "connection_ack"
    assert run(talk("https://evil.example")) == 4403


def test_a_socket_whose_client_stops_reading_is_closed_with_1013_and_counted(server):
    """A client that sends and never reads (here: pings, each answered by a pong) is let go once its backlog passes
    the limit, rather than held in memory: counted in /metrics, and its last frame, behind every pong, is 1013."""
    import base64
    import os
    import socket
    import struct
    import time
    import urllib.request

    def lagging_count() -> float:
        with urllib.request.urlopen(server.url + "/metrics", timeout=10) as response:
            for line in response.read().decode().splitlines():
                if line.startswith("foyer_websockets_closed_lagging_total"):
                    return float(line.split()[-1])
        return 0.0

    def frame(text: str) -> bytes:
        payload = text.encode()
        length = bytes([0x80 | len(payload)]) if len(payload) < 126 else bytes([0x80 | 126]) + struct.pack(">H", len(payload))
        return b"\x81" + length + b"\0\0\0\0" + payload  # masked with a zero key

    before = lagging_count()
    token = session_token(server)
    host, port = server.url.removeprefix("http://").split(":")
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: the server's output backs up soon
    raw.connect((host, int(port)))
    raw.settimeout(10)
    key = base64.b64encode(os.urandom(16)).decode()
    raw.sendall((f"GET /graphql HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: graphql-transport-ws\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += raw.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    raw.sendall(frame(json.dumps({"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}})))
    pings = frame('{"type":"ping"}') * 20_000
    sent, counted = 0, False
    while sent < 2_000_000 and not counted:  # bounded: ~40 MB at most; a few hundred thousand do it here
        raw.sendall(pings)
        sent += 20_000
        counted = lagging_count() == before + 1
    assert counted, f"no lagging socket counted after {sent} pings"

    # Reading again: every pong queued before, then the close frame with 1013.
    buffered, close_code = b"", None
    deadline = time.monotonic() + 20
    while close_code is None and time.monotonic() < deadline:
        chunk = raw.recv(1 << 16)
        if not chunk:
            break
        buffered += chunk
        while len(buffered) >= 2:
            length, offset = buffered[1] & 0x7F, 2
            if length == 126:
                if len(buffered) < 4:
                    break
                length, offset = struct.unpack(">H", buffered[2:4])[0], 4
            if len(buffered) < offset + length:
                break
            opcode, payload = buffered[0] & 0x0F, buffered[offset:offset + length]
            buffered = buffered[offset + length:]
            if opcode == 0x8:
                close_code = struct.unpack(">H", payload[:2])[0]
                break
    raw.close()
    assert close_code == 1013
    assert lagging_count() == before + 1, "counted once"


def test_a_graceful_shutdown_closes_open_sockets_with_1012_and_the_server_exits(tmp_path):
    """SIGTERM: a subscribed socket hears 1012 (service restart: reconnect) and, once it answers, the server exits 0."""
    import signal

    foyer = RunningServer(tmp_path)
    try:
        token = session_token(foyer)

        async def subscribed_then_stopped():
            async with connect(ws_url(foyer), subprotocols=["graphql-transport-ws"]) as socket:
                await socket.send(json.dumps({"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}))
                assert json.loads(await socket.recv())["type"] == "connection_ack"
                await socket.send(json.dumps({"type": "subscribe", "id": "1", "payload": {"query": "subscription { taskAdded { id } }"}}))
                await socket.send(json.dumps({"type": "ping"}))
                assert json.loads(await socket.recv())["type"] == "pong"  # the subscribe before it was taken
                foyer.process.send_signal(signal.SIGTERM)
                await socket.wait_closed()
                return socket.close_code

        assert run(subscribed_then_stopped()) == 1012
        assert foyer.process.wait(timeout=15) == 0
    finally:
        foyer.stop()


def test_fragmented_messages_are_put_together_up_to_the_size_limit(server):
    """A message may come in fragments (RFC 6455 §5.4): they are joined; past 1 MiB together the socket closes 1009."""
    token = session_token(server)
    init = json.dumps({"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}})

    async def talk():
        async with connect(ws_url(server), subprotocols=["graphql-transport-ws"], max_size=None) as socket:
            await socket.send([init[:10], init[10:25], init[25:]])  # three frames, one message
            acknowledged = json.loads(await socket.recv())["type"]
            filler = "x" * (256 * 1024)
            await socket.send([filler] * 5)  # 1.25 MiB in frames each under the frame limit
            await socket.wait_closed()
            return acknowledged, socket.close_code

    assert run(talk()) == ("connection_ack", 1009)


def test_a_websocket_asked_for_on_a_kept_alive_connection_is_upgraded(server):
    """A balancer keeping connections to Foyer alive (nginx's `keepalive`) sends an upgrade on a connection that
    already carried requests: it is upgraded like a first one, not answered as a plain GET."""
    import base64
    import os
    import socket

    token = session_token(server)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as connection:
        connection.sendall(b"GET /up HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        first = connection.recv(4096)
        assert first.startswith(b"HTTP/1.1 200") and first.endswith(b"OK"), first
        key = base64.b64encode(os.urandom(16)).decode()
        connection.sendall((
            "GET /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: graphql-transport-ws\r\n\r\n"
        ).encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += connection.recv(4096)
        head, _, rest = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head
        expected = base64.b64encode(__import__("hashlib").sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
        assert b"Sec-WebSocket-Accept: " + expected in head and b"Sec-WebSocket-Protocol: graphql-transport-ws" in head, head

        def send(message: dict):
            payload = json.dumps(message).encode()
            mask = os.urandom(4)
            assert len(payload) < 126
            connection.sendall(bytes([0x81, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

        def receive() -> dict:
            nonlocal rest
            while len(rest) < 2 or len(rest) < 2 + (rest[1] & 0x7F):
                rest += connection.recv(4096)
            assert rest[0] == 0x81, rest
            message, rest = json.loads(rest[2:2 + (rest[1] & 0x7F)]), rest[2 + (rest[1] & 0x7F):]
            return message

        send({"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}})
        assert receive() == {"type": "connection_ack"}
        # Read on after the first message too (the HTTP side behind the socket asks for no more reads).
        send({"type": "ping"})
        assert receive() == {"type": "pong"}
