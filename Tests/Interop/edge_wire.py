"""Raw HTTP/1.1 over a socket, for the edge's corpus and fuzzer: bytes sent whole or split, and what came back read
as a sequence of responses."""
import socket
import time
from dataclasses import dataclass, field

from conftest import RunningServer

GOOD = b"GET /up HTTP/1.1\r\nHost: x\r\n\r\n"
# Statuses the edge answers itself, always with `Connection: close`.
REFUSALS = {400, 408, 413, 414, 431}


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def closes(self) -> bool:
        return self.headers.get("connection", "").lower() == "close"


@dataclass
class Exchange:
    responses: list[Response]
    # Bytes after the last whole response: a response cut short or not HTTP at all.
    leftover: bytes
    closed: bool
    # From the last byte sent to the close (or to giving up).
    seconds: float
    raw: bytes = field(repr=False)

    @property
    def statuses(self) -> list[int]:
        return [response.status for response in self.responses]


def server_with_timeouts(workdir, header_timeout: float, idle_timeout: float) -> RunningServer:
    """A server whose clocks run out within a test."""
    return RunningServer(workdir, extra_args=["--header-timeout", f"{header_timeout}s", "--idle-timeout", f"{idle_timeout}s"])


def parse(raw: bytes, head_requests: int = 0) -> tuple[list[Response], bytes]:
    """Responses in order, each framed by Content-Length or chunks; what could not be read as one is left over.
    The first `head_requests` responses with a length answer HEAD and have no body."""
    responses, rest = [], raw
    while rest:
        head_end = rest.find(b"\r\n\r\n")
        if not rest.startswith(b"HTTP/1.1 ") or head_end < 0:
            break
        lines = rest[:head_end].decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        after = rest[head_end + 4:]
        if "content-length" in headers:
            length = int(headers["content-length"])
            if head_requests > len(responses):
                length = 0
            if len(after) < length:
                break
            body, rest = after[:length], after[length:]
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body, cursor, complete = b"", after, False
            while True:
                size_end = cursor.find(b"\r\n")
                if size_end < 0:
                    break
                size = int(cursor[:size_end].split(b";")[0], 16)
                if size == 0:
                    trailer_end = cursor.find(b"\r\n\r\n", size_end - 2 if size_end >= 2 else 0)
                    if trailer_end < 0:
                        break
                    cursor, complete = cursor[trailer_end + 4:], True
                    break
                if len(cursor) < size_end + 2 + size + 2:
                    break
                body += cursor[size_end + 2:size_end + 2 + size]
                cursor = cursor[size_end + 2 + size + 2:]
            if not complete:
                break
            rest = cursor
        else:
            break
        responses.append(Response(int(lines[0].split(" ")[1]), headers, body))
    return responses, rest


def pieces(data: bytes, step: int, most: int = 300) -> list[bytes]:
    """`data` in pieces of `step` bytes (more where that would make over `most` pieces)."""
    step = max(step, -(-len(data) // most))
    return [data[index:index + step] for index in range(0, len(data), step)] or [b""]


def exchange(port: int, parts: list[bytes], wait: float, gap: float = 0.0005) -> Exchange:
    """Sends the parts, each in its own segment, then reads until the server closes or `wait` seconds pass."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        received = b""
        try:
            for index, part in enumerate(parts):
                if part:
                    sock.sendall(part)
                if gap and index < len(parts) - 1:
                    time.sleep(gap)
        except (BrokenPipeError, ConnectionResetError):
            pass  # a refusal closed the connection before all was sent
        sent = time.monotonic()
        closed = False
        sock.settimeout(0.1)
        while time.monotonic() - sent < wait:
            try:
                chunk = sock.recv(1 << 16)
            except (TimeoutError, socket.timeout):
                continue
            except ConnectionResetError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            received += chunk
        seconds = time.monotonic() - sent
    responses, leftover = parse(received)
    return Exchange(responses, leftover, closed, seconds, received)
