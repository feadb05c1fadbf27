"""Hostile and odd requests against the running server over a raw socket, each sent whole and split every few
bytes: what NIO's parser refuses is answered (in the client's format) and the connection closes; what it accepts
is answered as HTTP/1.1, whatever headers of another protocol it carries; and bytes after a refusal are never
answered as another request. Loopback only."""
import json
import shutil
import subprocess
from dataclasses import dataclass

import pytest

from edge_wire import GOOD, exchange, pieces, server_with_timeouts

HEADER_TIMEOUT = 2
IDLE_TIMEOUT = 4
# How soon "at once" is, on a loaded debug build.
PROMPTLY = 1.0


@pytest.fixture(scope="module")
def edge(tmp_path_factory):
    running = server_with_timeouts(tmp_path_factory.mktemp("edge-corpus"), HEADER_TIMEOUT, IDLE_TIMEOUT)
    yield running
    running.stop()


def post(path: bytes, fields: bytes, body: bytes = b"") -> bytes:
    return b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + fields + b"\r\n" + body


@dataclass
class Refused:
    """A request NIO's parser (or the edge after it) refuses at once: the answers before it, its status and format."""
    name: str
    data: bytes
    status: int
    json: bool
    before: tuple[int, ...] = ()


REFUSED = [
    Refused("Content-Length and Transfer-Encoding: chunked", post(b"/api/v1/sessions", b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n"), 400, True),
    Refused("two different Content-Lengths", post(b"/api/v1/sessions", b"Content-Length: 2\r\nContent-Length: 3\r\n", b"{}x"), 400, True),
    Refused("two equal Content-Lengths", post(b"/api/v1/sessions", b"Content-Length: 2\r\nContent-Length: 2\r\n", b"{}"), 400, True),
    Refused("Transfer-Encoding: chunked, identity", post(b"/api/v1/sessions", b"Transfer-Encoding: chunked, identity\r\n", b"0\r\n\r\n"), 400, True),
    Refused("Transfer-Encoding: xchunked", post(b"/api/v1/sessions", b"Transfer-Encoding: xchunked\r\n", b"0\r\n\r\n"), 400, True),
    Refused("a folded header line", b"GET /api/v1/posts HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n", 400, True),
    Refused("bare LF line ends", b"GET /up HTTP/1.1\nHost: x\n\n", 400, False),
    Refused("a space before the colon", b"GET /api/v1/posts HTTP/1.1\r\nHost : x\r\n\r\n", 400, True),
    Refused("a chunk size past 64 bits", post(b"/api/v1/sessions", b"Transfer-Encoding: chunked\r\n", b"fffffffffffffffffffff\r\nab\r\n0\r\n\r\n"), 400, True),
    Refused("a chunk size that is not hex", post(b"/api/v1/sessions", b"Transfer-Encoding: chunked\r\n", b"zz\r\nab\r\n0\r\n\r\n"), 400, True),
    Refused("a chunk without its line break", post(b"/api/v1/sessions", b"Transfer-Encoding: chunked\r\n", b"2\r\n{}XX0\r\n\r\n"), 400, True),
    Refused("30 KB of trailers", post(b"/api/v1/sessions", b"Transfer-Encoding: chunked\r\n", b"2\r\n{}\r\n0\r\n" + b"".join(b"X-T%d: %s\r\n" % (i, b"a" * 1000) for i in range(30)) + b"\r\n"), 431, True),
    Refused("120 trailer fields", post(b"/api/v1/sessions", b"Transfer-Encoding: chunked\r\n", b"2\r\n{}\r\n0\r\n" + b"".join(b"X-T%d: v\r\n" % i for i in range(120)) + b"\r\n"), 431, True),
    Refused("HTTP/1.1 without Host", b"GET /up HTTP/1.1\r\n\r\n", 400, False),
    Refused("HTTP/1.1 with two Hosts", b"GET /api/v1/posts HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, True),
    Refused("the HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400, False),
    Refused("a request line one byte over 8 KiB", b"GET /up?p=" + b"a" * (8193 - 19) + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, False),
    Refused("a URL over the whole head's 16 KiB", b"GET /api/" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, True),
    Refused("a head one byte over 16 KiB", b"GET /up HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * (16385 - 13) + b"\r\n\r\n", 431, False),
    Refused("101 header fields, asking for JSON", b"GET /posts HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\n" + b"".join(b"X-F%d: v\r\n" % i for i in range(99)) + b"\r\n", 431, True),
    Refused("a good request, then a 9 KB URL", GOOD + b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, False, (200,)),
    Refused("a good request with a body, then too many fields", post(b"/api/v1/sessions", b"Content-Length: 2\r\n", b"{}") + b"GET /api/v1/posts HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-F%d: v\r\n" % i for i in range(120)) + b"\r\n", 431, True, (422,)),
]


@pytest.mark.parametrize("split", [0, 3, 7], ids=["whole", "every 3 bytes", "every 7 bytes"])
@pytest.mark.parametrize("case", REFUSED, ids=[case.name for case in REFUSED])
def test_a_refused_request_is_answered_in_its_format_and_nothing_after_it(edge, case, split):
    # A good request follows each: it must never be answered.
    data = case.data + GOOD
    answer = exchange(edge.port, pieces(data, split) if split else [data], wait=HEADER_TIMEOUT + 2)
    assert answer.statuses == [*case.before, case.status], (answer.statuses, answer.raw[-300:])
    assert not answer.leftover, answer.leftover[:200]
    refusal = answer.responses[-1]
    assert refusal.closes and answer.closed and answer.seconds < PROMPTLY, (answer.closed, answer.seconds)
    if case.json:
        assert refusal.headers["content-type"].startswith("application/json")
        assert json.loads(refusal.body)["error"]
    else:
        assert refusal.headers["content-type"].startswith("text/html") and b"turbo" in refusal.body
    # Every answer ahead of the refusal came whole, before it.
    for response in answer.responses[:-1]:
        assert int(response.headers["content-length"]) == len(response.body)


@pytest.mark.parametrize("split", [0, 5], ids=["whole", "every 5 bytes"])
@pytest.mark.parametrize("name, data", [
    ("a request line of exactly 8 KiB", b"GET /up?p=" + b"a" * (8192 - 19) + b" HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("a head of exactly 16 KiB", b"GET /up HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * (16384 - 13) + b"\r\n\r\n"),
    ("a hundred header fields", b"GET /up HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-F%d: v\r\n" % i for i in range(99)) + b"\r\n"),
    ("trailers within the limits", post(b"/api/v1/sessions", b"Transfer-Encoding: chunked\r\n", b"2\r\n{}\r\n0\r\nX-T: t\r\n\r\n")),
    ("empty lines before the request line", b"\r\n\r\n" + GOOD),
])
def test_what_fits_the_limits_is_served_and_the_connection_stays(edge, name, data, split):
    answer = exchange(edge.port, (pieces(data, split) if split else [data]) + [GOOD], wait=PROMPTLY)
    assert len(answer.statuses) == 2 and answer.statuses[-1] == 200, (name, answer.statuses, answer.raw[:300])
    assert not any(response.closes for response in answer.responses)
    assert not answer.closed and not answer.leftover


@pytest.mark.parametrize("split", [0, 4], ids=["whole", "every 4 bytes"])
def test_a_stalled_body_on_the_api_is_a_json_408(edge, split):
    data = post(b"/api/v1/sessions", b"Content-Length: 100\r\n", b'{"email"')
    answer = exchange(edge.port, pieces(data, split) if split else [data], wait=HEADER_TIMEOUT + 3)
    assert answer.statuses == [408] and answer.closed
    assert answer.responses[0].headers["content-type"].startswith("application/json")
    assert HEADER_TIMEOUT - 0.2 < answer.seconds < HEADER_TIMEOUT + 2


def test_a_body_stalled_after_the_route_answered_without_it_closes_the_connection_without_a_second_answer(edge):
    # Authentication answers 401 before reading the body; the body then stalls.
    data = post(b"/api/v1/posts", b"Content-Length: 100\r\n", b'{"title"')
    answer = exchange(edge.port, [data], wait=HEADER_TIMEOUT + 3)
    assert answer.statuses == [401] and answer.closed and not answer.leftover
    assert HEADER_TIMEOUT - 0.2 < answer.seconds < HEADER_TIMEOUT + 1.5


@pytest.mark.parametrize("upgrade", [b"Upgrade: x\r\n", b"Upgrade: websocket\r\n"], ids=["x", "websocket"])
def test_an_upgrade_header_without_connection_upgrade_is_ignored_and_a_slow_head_after_it_times_out(edge, upgrade):
    data = b"GET /up HTTP/1.1\r\nHost: x\r\n" + upgrade + b"\r\nGET /up HTTP/1.1\r\nHost: "
    answer = exchange(edge.port, [data], wait=HEADER_TIMEOUT + 3)
    assert answer.statuses == [200, 408] and answer.closed
    assert HEADER_TIMEOUT - 0.2 < answer.seconds < HEADER_TIMEOUT + 2


@pytest.mark.parametrize("upgrade", [
    b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n",
    b"Connection: upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n",
], ids=["h2c", "websocket on a page"])
def test_an_upgrade_nothing_serves_is_answered_over_http_1_1_and_the_connection_closes(edge, upgrade):
    # NIO's parser reads nothing after a request it took for an upgrade: the connection ends after the answer,
    # and the request after it is not answered.
    answer = exchange(edge.port, [b"GET /up HTTP/1.1\r\nHost: x\r\n" + upgrade + b"\r\n" + GOOD], wait=PROMPTLY + 1)
    assert answer.statuses == [200] and answer.responses[0].body == b"OK"
    assert answer.closed and answer.seconds < PROMPTLY


def test_a_long_header_line_split_across_reads_keeps_the_body_a_body_and_the_clock_running(edge):
    # Content-Length: 000…038 arrives in two reads; its 38 bytes of body look like a request with an Upgrade. NIO
    # reads them as the body the route answers, and the slow head after it still meets the header timeout.
    body = b"GET /up HTTP/1.1\r\nUpgrade: x\r\nHost: y"
    head = b"POST /api/v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + b"0" * 600
    answer = exchange(
        edge.port, [head, b"%d\r\n\r\n" % len(body) + body, b"GET /up HTTP/1.1\r\nHost: x\r\n"], wait=HEADER_TIMEOUT + 3, gap=0.05
    )
    assert answer.statuses == [400, 408], answer.raw[:600]
    assert b"not valid JSON" in answer.responses[0].body and not answer.responses[0].closes
    assert answer.closed and HEADER_TIMEOUT - 0.2 < answer.seconds < HEADER_TIMEOUT + 2


def test_http_1_0_closes_after_its_answer_unless_it_asks_to_be_kept_alive(edge):
    closing = exchange(edge.port, [b"GET /up HTTP/1.0\r\n\r\n" + GOOD], wait=PROMPTLY + 1)
    assert closing.statuses == [200] and closing.closed and closing.seconds < PROMPTLY
    kept = exchange(edge.port, [b"GET /up HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", GOOD], wait=PROMPTLY, gap=0.05)
    assert kept.statuses == [200, 200] and not kept.closed


def test_curl_http2_upgrade_and_apachebench_http_1_0_are_served(edge):
    url = f"http://127.0.0.1:{edge.port}/up"
    curl = subprocess.run(["curl", "-sS", "--http2", "-o", "/dev/null", "-w", "%{http_code} %{http_version}", url],
                          capture_output=True, text=True, timeout=30)
    assert curl.stdout == "200 1.1", (curl.stdout, curl.stderr)
    ab = shutil.which("ab")
    assert ab, "ApacheBench (apache2-utils) is missing: scripts/test installs it"
    bench = subprocess.run([ab, "-n", "200", "-c", "4", "-s", "5", url], capture_output=True, text=True, timeout=60)
    assert bench.returncode == 0, bench.stderr
    assert "Complete requests:      200" in bench.stdout and "Failed requests:        0" in bench.stdout, bench.stdout
