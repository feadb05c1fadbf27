"""A fuzzer over the edge: random and mutated request streams (from the corpus and good requests) sent through the
real pipeline of a running server, whole or in random pieces, many connections at once. Every stream must end in
whole answers, at most one refusal and then a close; a head cut short must meet the header timeout; nothing may
crash. It runs FOYER_EDGE_FUZZ_SECONDS (40 by default, a minute at most in CI) and prints what it sent and saw;
FOYER_EDGE_FUZZ_SEED replays a run. Loopback only."""
import concurrent.futures
import os
import random
import time
import urllib.request

import pytest

from conftest import RunningServer
from edge_wire import GOOD, exchange, server_with_timeouts
from test_edge_corpus import REFUSED, post

HEADER_TIMEOUT = 1
IDLE_TIMEOUT = 2
# The longest any connection may stay open after its last byte: a body or head clock, then the idle clock.
LONGEST = HEADER_TIMEOUT + IDLE_TIMEOUT + 2
SECONDS = min(float(os.environ.get("FOYER_EDGE_FUZZ_SECONDS", "40")), 60 if os.environ.get("CI") else 3600)
CONNECTIONS_AT_ONCE = 48

GOOD_REQUESTS = [
    GOOD,
    b"GET /posts HTTP/1.1\r\nHost: x\r\nAccept: text/html\r\n\r\n",
    b"GET /api/v1/posts?page=1 HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\n\r\n",
    post(b"/api/v1/sessions", b"Content-Length: 2\r\n", b"{}"),
    post(b"/api/v1/sessions", b"Transfer-Encoding: chunked\r\n", b"1;ext=1\r\n{\r\n1\r\n}\r\n0\r\nX-Trailer: t\r\n\r\n"),
    b"GET /up HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    b"GET /up HTTP/1.1\r\nHost: x\r\nUpgrade: x\r\n\r\n",
    b"\r\n" + GOOD,
]
SEEDS = GOOD_REQUESTS + [case.data for case in REFUSED]
INTERESTING = [b"\r", b"\n", b"\r\n", b":", b" ", b"\t", b",", b";", b"0", b"9", b"f", b"-", b"\x00", b"\xff",
               b"chunked", b"Content-Length: 3\r\n", b"Transfer-Encoding: chunked\r\n", b"Connection: close\r\n",
               b"Upgrade: websocket\r\n", b"Host: y\r\n", b"\r\n\r\n", b"HTTP/1.0", b"a" * 9000]


def mutate(rng: random.Random, data: bytes) -> bytes:
    for _ in range(rng.randint(1, 4)):
        at = rng.randint(0, len(data))
        choice = rng.random()
        if choice < 0.3:
            data = data[:at] + rng.choice(INTERESTING) + data[at + rng.randint(0, 3):]
        elif choice < 0.5:
            data = data[:at] + data[at + rng.randint(1, 8):]
        elif choice < 0.7 and len(data) > 1:
            data = data[:at] + bytes([rng.randrange(256)]) + data[at + 1:]
        elif choice < 0.85:
            lines = data.split(b"\r\n")
            line = rng.randrange(len(lines))
            lines.insert(rng.randrange(len(lines) + 1), lines[line])
            data = b"\r\n".join(lines)
        else:
            data = data[:at]
    return data


def stream(rng: random.Random) -> bytes:
    """One to three requests back to back, any of them mutated."""
    parts = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        seed = rng.choice(SEEDS)
        parts.append(mutate(rng, seed) if rng.random() < 0.7 else seed)
    return b"".join(parts)


def cut_short(rng: random.Random) -> bytes:
    """Whole requests without chunks, then a head cut somewhere before its end: the header timeout must end it."""
    whole = [request for request in GOOD_REQUESTS if b"chunked" not in request]
    head = rng.choice([GOOD, b"GET /api/v1/posts HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\n\r\n"])
    return b"".join(rng.choice(whole) for _ in range(rng.randint(0, 2))) + head[:rng.randint(1, len(head) - 3)]


def split(rng: random.Random, data: bytes) -> list[bytes]:
    if rng.random() < 0.4 or not data:
        return [data]
    parts, index = [], 0
    while index < len(data) and len(parts) < 200:
        step = rng.choice([1, 2, 3, 5, 8, 13, 64, 512])
        parts.append(data[index:index + step])
        index += step
    if index < len(data):
        parts.append(data[index:])
    return parts


def check(port: int, number: int, seed: int) -> tuple[str, list[int], str | None]:
    rng = random.Random(seed * 1_000_003 + number)
    short = rng.random() < 0.25
    data = cut_short(rng) if short else stream(rng)
    answer = exchange(port, split(rng, data), wait=LONGEST, gap=0.0002)
    kind = "cut short" if short else "stream"

    def failed(why: str) -> tuple[str, list[int], str]:
        return kind, answer.statuses, f"{why}: sent {data[:300]!r}… ({len(data)} bytes, seed {seed}, stream {number}); got {answer.raw[:400]!r}"

    if answer.leftover:
        return failed("bytes that are not a whole answer")
    if not answer.closed:
        return failed(f"still open {LONGEST} s after the last byte")
    closing = [index for index, response in enumerate(answer.responses) if response.closes]
    if closing and closing[0] != len(answer.responses) - 1:
        return failed("an answer after one that said Connection: close")
    if short:
        if not answer.statuses or answer.statuses[-1] != 408:
            return failed("a head cut short did not end in a 408")
        if not HEADER_TIMEOUT - 0.2 < answer.seconds < HEADER_TIMEOUT + 1.5:
            return failed(f"the 408 came {answer.seconds:.2f} s after the last byte")
    return kind, answer.statuses, None


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    running = server_with_timeouts(tmp_path_factory.mktemp("edge-fuzz"), HEADER_TIMEOUT, IDLE_TIMEOUT)
    yield running
    assert running.stop() == 0, "the server did not stop cleanly after the fuzzer"


def test_random_and_mutated_request_streams_end_in_answers_or_one_refusal_and_a_close(fuzzed):
    seed = int(os.environ.get("FOYER_EDGE_FUZZ_SEED", str(random.randrange(1 << 30))))
    statuses: dict[int, int] = {}
    kinds: dict[str, int] = {}
    failures: list[str] = []
    deadline = time.monotonic() + SECONDS
    number = 0
    with concurrent.futures.ThreadPoolExecutor(CONNECTIONS_AT_ONCE) as pool:
        running = set()
        while time.monotonic() < deadline or running:
            while time.monotonic() < deadline and len(running) < CONNECTIONS_AT_ONCE:
                running.add(pool.submit(check, fuzzed.port, number, seed))
                number += 1
            done, running = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in done:
                kind, seen, failure = future.result()
                kinds[kind] = kinds.get(kind, 0) + 1
                for status in seen:
                    statuses[status] = statuses.get(status, 0) + 1
                if failure:
                    failures.append(failure)
    print(f"edge fuzzer: seed {seed}, {number} connections in {SECONDS:.0f} s ({kinds}), answers by status "
          f"{dict(sorted(statuses.items()))}, {len(failures)} failures")
    assert process_alive(fuzzed), "the server exited"
    with urllib.request.urlopen(fuzzed.url + "/up", timeout=5) as response:
        assert response.status == 200
    assert not failures, "\n".join(failures[:5])


def process_alive(server: RunningServer) -> bool:
    return server.process.poll() is None
