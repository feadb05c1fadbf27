"""HTTP/2 over Foyer's own TLS, with a raw h2 client (Python's hyperframe and hpack, frames written by hand): pages, the
JSON API, /graphql and an event stream on one connection, and h2's own attacks answered while the server stays up and
answers others: too many concurrent streams, rapid reset (CVE-2023-44487), a CONTINUATION flood, a header block over
the limit, a client that never reads, an idle connection."""
import json
import re
import socket
import ssl
import signal
import time

import hpack
import pytest
from hyperframe.frame import (
    ContinuationFrame, DataFrame, Frame, GoAwayFrame, HeadersFrame, RstStreamFrame, SettingsFrame, WindowUpdateFrame,
)

from conftest import DEMO_EMAIL, DEMO_PASSWORD
from test_https import HTTPSServer

PROTOCOL_ERROR, REFUSED_STREAM, COMPRESSION_ERROR, ENHANCE_YOUR_CALM = 0x1, 0x7, 0x9, 0xB


class H2:
    """One h2 connection, frames sent and read as they are. Its windows are opened wide unless `window` says."""

    def __init__(self, server, window: int = 1 << 24):
        context = ssl.create_default_context(cafile=str(server.ca))
        context.set_alpn_protocols(["h2"])
        self.socket = context.wrap_socket(socket.create_connection(("127.0.0.1", server.port), timeout=10), server_hostname="127.0.0.1")
        assert self.socket.selected_alpn_protocol() == "h2"
        self.encoder, self.decoder = hpack.Encoder(), hpack.Decoder()
        self.buffer = b""
        self.aside = []  # other streams' frames read while `request` waited for its own
        self.send_window = 65535  # the connection's, for what `upload` sends
        self.server_settings = {}
        self.next_stream = 1
        settings = SettingsFrame(0, settings={SettingsFrame.INITIAL_WINDOW_SIZE: min(window, (1 << 31) - 1)})
        frames = [settings] + ([WindowUpdateFrame(0, window_increment=window - 65535)] if window > 65535 else [])
        self.socket.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"".join(frame.serialize() for frame in frames))

    def close(self):
        self.socket.close()

    def send(self, *frames):
        self.socket.sendall(b"".join(frame.serialize() for frame in frames))

    def headers(self, path: str, method: str = "GET", fields=(), end_stream: bool = True, stream: int | None = None) -> HeadersFrame:
        if stream is None:
            stream, self.next_stream = self.next_stream, self.next_stream + 2
        block = self.encoder.encode([(":method", method), (":scheme", "https"), (":authority", "127.0.0.1"), (":path", path), *fields])
        return HeadersFrame(stream, data=block, flags=["END_HEADERS"] + (["END_STREAM"] if end_stream else []))

    def frame(self, timeout: float = 10):
        """The next frame (SETTINGS answered), or None when the connection closed."""
        return self.aside.pop(0) if self.aside else self.read_frame(timeout)

    def read_frame(self, timeout: float = 10):
        self.socket.settimeout(timeout)
        while True:
            while len(self.buffer) < 9 or len(self.buffer) < 9 + int.from_bytes(self.buffer[:3], "big"):
                try:
                    chunk = self.socket.recv(65536)
                except (ConnectionResetError, ssl.SSLError):
                    chunk = b""
                if not chunk:
                    return None
                self.buffer += chunk
            frame, length = Frame.parse_frame_header(memoryview(self.buffer[:9]))
            frame.parse_body(memoryview(self.buffer[9:9 + length]))
            self.buffer = self.buffer[9 + length:]
            if isinstance(frame, SettingsFrame) and "ACK" not in frame.flags:
                self.server_settings.update(frame.settings)
                self.send(SettingsFrame(0, flags=["ACK"]))
                continue
            if isinstance(frame, HeadersFrame):
                frame.fields = dict((name.decode(), value.decode()) for name, value in self.decoder.decode(frame.data, raw=True))
            if isinstance(frame, WindowUpdateFrame) and frame.stream_id == 0:
                self.send_window += frame.window_increment
            return frame

    def request(self, path: str, method: str = "GET", fields=(), body: bytes = b"") -> tuple[int, dict, bytes]:
        """Sends one request and reads its whole answer; other streams' frames are left aside for `frame`."""
        head = self.headers(path, method, fields, end_stream=not body)
        frames = [head] + ([DataFrame(head.stream_id, data=body, flags=["END_STREAM"])] if body else [])
        self.send(*frames)
        answer = Answer(head.stream_id, path)
        while not answer.ended:
            self.read_into(answer)
        return answer.status, answer.fields, answer.body

    def read_into(self, answer: "Answer"):
        """Reads one frame: `answer`'s if it is of its stream; another stream's is left aside for `frame`."""
        frame = self.read_frame()
        assert frame is not None, f"the connection closed before {answer.path} was answered"
        if frame.stream_id == answer.stream:
            answer.take(frame)
        else:
            self.aside.append(frame)

    def ends(self, timeout: float) -> GoAwayFrame | None:
        """Reads until the server ends the connection: its GOAWAY (or None if it only closed); fails after `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                frame = self.frame(timeout=max(0.1, deadline - time.monotonic()))
            except socket.timeout:
                break
            if frame is None or isinstance(frame, GoAwayFrame):
                return frame
        raise AssertionError(f"the connection was still open after {timeout} s")


class Answer:
    """What one stream has answered so far, and how much more the server lets it send (its flow-control window)."""

    def __init__(self, stream: int, path: str, window: int = 65535):
        self.stream, self.path, self.window = stream, path, window
        self.status, self.fields, self.body, self.ended = None, {}, b"", False

    def take(self, frame):
        assert not isinstance(frame, RstStreamFrame), f"{self.path} was reset with {frame.error_code}"
        if isinstance(frame, WindowUpdateFrame):
            self.window += frame.window_increment
        elif isinstance(frame, HeadersFrame):
            self.fields = frame.fields
            self.status = int(frame.fields[":status"])
        elif isinstance(frame, DataFrame):
            self.body += frame.data
        self.ended = self.ended or "END_STREAM" in frame.flags


@pytest.fixture
def https(tmp_path):
    server = HTTPSServer(tmp_path, extra_env={"FOYER_HEADER_TIMEOUT": "2s", "FOYER_IDLE_TIMEOUT": "3s"})
    yield server
    server.stop()


def answers_others(server):
    """A new connection is answered at once."""
    other = H2(server)
    try:
        assert other.request("/up")[0] == 200
    finally:
        other.close()


def flood(client: H2, batches, error_code: int):
    """Sends each batch of frames until the server stops taking them; it must end the connection with a GOAWAY that
    says `error_code`."""
    try:
        for batch in batches:
            client.send(*batch)
    except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
        pass
    goaway = client.ends(timeout=10)
    assert goaway is not None and goaway.error_code == error_code, goaway


def test_pages_the_api_graphql_and_an_event_stream_share_one_connection(https):
    client = H2(https)
    try:
        status, fields, body = client.request("/posts")
        assert status == 200 and "strict-transport-security" in fields and "connection" not in fields
        stream_path = re.search(rb'<turbo-stream-source src="([^"]+)"', body).group(1).decode()
        status, fields, body = client.request("/api/v1/sessions", "POST", [("content-type", "application/json")],
                                              json.dumps({"email": DEMO_EMAIL, "password": DEMO_PASSWORD}).encode())
        assert status == 201, body
        token = fields["x-session-token"]
        bearer = [("authorization", f"Bearer {token}"), ("content-type", "application/json")]

        # The event stream stays open on its stream while the post is written on another of the same connection.
        events = client.headers(stream_path, fields=[("accept", "text/event-stream")])
        client.send(events)
        status, _, body = client.request("/api/v1/posts", "POST", bearer, json.dumps({"title": "Over h2", "content": "one connection"}).encode())
        assert status == 201, body
        seen = b""
        while b"Over h2" not in seen:
            frame = client.frame()
            assert frame is not None
            if frame.stream_id == events.stream_id and isinstance(frame, DataFrame):
                seen += frame.data
        assert b"event: " not in seen and b"id: " in seen, "a single stream's events, as over HTTP/1.1"

        status, _, body = client.request("/graphql", "POST", bearer, json.dumps({"query": "{ allTasks { id } }"}).encode())
        assert status == 200 and b'"allTasks"' in body, body
        status, _, body = client.request("/api/v1/posts?limit=1")
        assert status == 200 and json.loads(body)
        metrics = client.request("/metrics")[2].decode()
        assert re.search(r'^foyer_http_version_requests_total\{protocol="h2"\} ([1-9]\d*)', metrics, re.M), metrics
    finally:
        client.close()


def upload(client: H2, path: str, fields, body: bytes) -> tuple[int, bytes]:
    """POSTs `body` in 16 KiB DATA frames as the server's flow-control windows allow, reading its frames meanwhile;
    stops sending once the answer has ended (the rest is the server's to drop). Returns the status and the answer."""
    head = client.headers(path, "POST", fields, end_stream=False)
    client.send(head)
    answer = Answer(head.stream_id, path, window=client.server_settings.get(SettingsFrame.INITIAL_WINDOW_SIZE, 65535))
    sent = 0
    while sent < len(body) and not answer.ended:
        size = min(16384, len(body) - sent, client.send_window, answer.window)
        if size <= 0:
            client.read_into(answer)
            continue
        client.send(DataFrame(head.stream_id, data=body[sent:sent + size], flags=["END_STREAM"] if sent + size == len(body) else []))
        sent += size
        client.send_window -= size
        answer.window -= size
    if sent < len(body):
        client.send(DataFrame(head.stream_id, data=b"", flags=["END_STREAM"]))
    while not answer.ended:
        client.read_into(answer)
    return answer.status, answer.body


def test_a_body_larger_than_the_window_is_read_as_the_route_asks_and_one_too_large_is_refused(https):
    """A body past the stream's 1 MiB window cannot come in one read: the route reads it as it arrives, and the
    window opens as it does. One past the 2 MiB a post may be is refused with 413 once that much has come; the rest
    is dropped and the connection goes on."""
    signing_in = H2(https)
    try:
        status, fields, body = signing_in.request("/api/v1/sessions", "POST", [("content-type", "application/json")],
                                                  json.dumps({"email": DEMO_EMAIL, "password": DEMO_PASSWORD}).encode())
        assert status == 201, body
        bearer = [("authorization", f"Bearer {fields['x-session-token']}"), ("content-type", "application/json")]
    finally:
        signing_in.close()
    client = H2(https)
    try:
        assert client.request("/up")[0] == 200  # the server's settings read
        content = "\U0001F600" * 90_000  # 12 bytes each in JSON: 1.08 MB
        status, body = upload(client, "/api/v1/posts", bearer, json.dumps({"title": "Past the window", "content": content}).encode())
        assert status == 201, body[:300]
        post = json.loads(body)
        status, _, body = client.request(f"/api/v1/posts/{post['id']}")
        assert status == 200 and json.loads(body)["content"] == content

        status, body = upload(client, "/api/v1/posts", bearer, b'{"title": "Too long", "content": "' + b"a" * (3 << 20) + b'"}')
        assert status == 413, body[:300]
        assert client.request("/up")[0] == 200
    finally:
        client.close()


def test_a_client_opening_more_streams_than_the_limit_is_closed_and_others_are_answered(https):
    """SETTINGS_MAX_CONCURRENT_STREAMS is 100: a client that opens a 101st while a hundred are open broke the limit it
    was told (swift-nio-http2 answers it as a connection error: GOAWAY with PROTOCOL_ERROR, nginx would refuse the one
    stream). Up to the limit, every stream is answered."""
    client = H2(https)
    try:
        stream_path = re.search(rb'<turbo-stream-source src="([^"]+)"', client.request("/posts")[2]).group(1).decode()
        limit = client.server_settings[SettingsFrame.MAX_CONCURRENT_STREAMS]
        assert limit == 100
        # Event streams stay open: the limit's worth, each answered; then one more.
        client.send(*[client.headers(stream_path) for _ in range(limit)])
        answered = set()
        while len(answered) < limit:
            frame = client.frame()
            assert frame is not None and not isinstance(frame, (RstStreamFrame, GoAwayFrame)), frame
            if isinstance(frame, HeadersFrame):
                answered.add(frame.stream_id)
        client.send(client.headers("/up"))
        goaway = client.ends(timeout=10)
        assert goaway is None or goaway.error_code in (PROTOCOL_ERROR, REFUSED_STREAM), goaway
    finally:
        client.close()
    answers_others(https)


def test_rapid_reset_closes_the_connection_and_others_are_answered(https):
    """CVE-2023-44487: a request opened and reset at once, again and again, each costing the server work and never
    counting against the concurrent limit. The connection is closed long before ten thousand."""
    client = H2(https)
    try:
        def batches():
            for _ in range(100):
                batch = []
                for _ in range(100):
                    head = client.headers("/posts")
                    batch += [head, RstStreamFrame(head.stream_id, error_code=0x8)]
                yield batch
        flood(client, batches(), ENHANCE_YOUR_CALM)
    finally:
        client.close()
    answers_others(https)


def test_a_continuation_flood_closes_the_connection_and_others_are_answered(https):
    """CVE-2024-27316 and kin: a header block that never ends, one CONTINUATION frame after another."""
    client = H2(https)
    try:
        head = client.headers("/up", fields=[("x-flood", "a")], end_stream=True)
        head.flags.discard("END_HEADERS")
        continuations = ([ContinuationFrame(head.stream_id, data=b"\x40\x01x\x01y") for _ in range(50)] for _ in range(200))
        flood(client, [[head], *continuations], ENHANCE_YOUR_CALM)
    finally:
        client.close()
    answers_others(https)


def test_a_header_block_over_the_limit_is_refused_and_the_server_goes_on(https):
    client = H2(https)
    try:
        assert client.request("/up")[0] == 200
        assert client.server_settings[SettingsFrame.MAX_HEADER_LIST_SIZE] == 16 * 1024
        # Over SETTINGS_MAX_HEADER_LIST_SIZE: swift-nio-http2's HPACK decoder stops there, and the connection with it.
        client.send(client.headers("/up", fields=[("x-big", "b" * 20_000)]))
        goaway = client.ends(timeout=10)
        assert goaway is not None and goaway.error_code == COMPRESSION_ERROR, goaway
    finally:
        client.close()
    # Within the limits but with too many fields: refused as over HTTP/1.1.
    client = H2(https)
    try:
        status, _, body = client.request("/up", fields=[(f"x-field-{number}", "v") for number in range(120)])
        assert status == 431 and b"more than 100 header fields" in body, body
    finally:
        client.close()
    answers_others(https)


def test_a_response_its_client_never_reads_is_reset_after_the_timeout(https):
    """The client's window stays shut: what Foyer would write waits in its buffer, and after the header timeout (2 s
    here) the stream is reset rather than held for ever."""
    client = H2(https, window=1024)
    try:
        started = client.headers("/openapi.json")
        client.send(started)
        began = time.monotonic()
        while True:
            frame = client.frame(timeout=15)
            assert frame is not None
            if frame.stream_id == started.stream_id and isinstance(frame, RstStreamFrame):
                break
        assert 1.5 < time.monotonic() - began < 10
    finally:
        client.close()
    answers_others(https)


def test_an_idle_connection_is_closed_after_the_idle_timeout(https):
    client = H2(https)
    try:
        assert client.request("/up")[0] == 200
        began = time.monotonic()
        goaway = client.ends(timeout=15)
        assert goaway is None or goaway.error_code == 0, goaway
        assert time.monotonic() - began >= 2.5
    finally:
        client.close()


def test_a_client_that_never_answers_the_goaways_ping_does_not_hold_the_shutdown(https):
    """A graceful shutdown sends GOAWAY and a PING; this client answers neither, nor closes: the connection is closed
    after the shutdown grace (1 s here) and the process exits."""
    client = H2(https)
    try:
        assert client.request("/up")[0] == 200
        began = time.monotonic()
        https.process.send_signal(signal.SIGTERM)
        https.process.wait(timeout=10)
        assert time.monotonic() - began < 5
    finally:
        client.close()
