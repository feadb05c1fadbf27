#!/usr/bin/env python3
"""Drain client for scripts/bench-live: N event-stream subscribers on a Foyer that is then replaced on the same port.

    drain-load.py PORT STREAM_PATH TOKEN SUBSCRIBERS OLD_PID NEW_LOG -- NEW_FOYER_COMMAND...

Holds SUBSCRIBERS EventSource-like subscribers (each reconnects after its last `retry:` with `Last-Event-ID`), makes a
task change through POST /graphql every 100 ms, starts NEW_FOYER_COMMAND (a second `foyer serve` on the same port:
SO_REUSEPORT; its output goes to NEW_LOG), waits until it listens, sends SIGTERM to OLD_PID and waits for it to exit, then for every
subscriber to have every change. Each event's id is `epoch-N`, N one more than the last on the stream (the journal
numbers them), so a subscriber that missed an event or got one twice is seen. Prints key=value lines; exits 1 when a
step fails. Loopback only; every wait is bounded.
"""
import asyncio
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
import urllib.request


class Subscriber:
    def __init__(self):
        self.last = None  # the N of the last event
        self.first = None
        self.last_id = None
        self.retry = 2.0
        self.lost = self.twice = self.reloads = 0
        self.opened = asyncio.Event()

    def take(self, event: bytes):
        data = []
        for line in event.split(b"\n"):
            name, _, value = line.partition(b": ")
            if name == b"retry":
                self.retry = int(value) / 1000
            elif name == b"id":
                self.last_id = value.decode()
                number = int(self.last_id.rsplit("-", 1)[1])
                if self.last is not None:
                    if number <= self.last:
                        self.twice += 1
                    elif number > self.last + 1:
                        self.lost += number - self.last - 1
                self.last = number
                self.first = self.first or number
            elif name == b"data":
                data.append(value)
            elif line.startswith(b": ") and line != b": heartbeat":
                self.opened.set()
        if b"data-live-reload" in b"\n".join(data):
            self.reloads += 1


async def follow(subscriber: Subscriber, port: int, path: str, token: str, reconnects: list, stop: asyncio.Event):
    first = True
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            head = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", "Accept: text/event-stream", f"Authorization: Bearer {token}"]
            if subscriber.last_id:
                head.append(f"Last-Event-ID: {subscriber.last_id}")
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
            status = await reader.readline()
            if b" 200 " not in status:
                raise ValueError(f"answered {status!r}")
            while (await reader.readline()) not in (b"\r\n", b""):
                pass
            if not first:
                reconnects.append(time.monotonic())
            first = False
            pending = b""
            while True:
                size = int((await reader.readline()).strip() or b"0", 16)
                if size == 0:
                    break
                pending += (await reader.readexactly(size + 2))[:-2]
                while b"\n\n" in pending:
                    event, pending = pending.split(b"\n\n", 1)
                    subscriber.take(event)
            writer.close()
        except (OSError, asyncio.IncompleteReadError, ValueError) as error:
            print(f"subscriber error: {error!r}", file=sys.stderr)
        await asyncio.sleep(subscriber.retry)


def change(port: int, token: str, number: int):
    body = json.dumps({"query": f'mutation {{ createTask(title: "drain {number}", description: "") {{ id }} }}'}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=body, method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        if response.status != 200 or b'"errors"' in response.read():
            raise RuntimeError(f"the change {number} failed")


def listening_sockets(port: int) -> int:
    """Sockets listening on `port` (the kernel's table): 2 once the new process listens beside the old."""
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return sum(1 for row in rows if row[1].endswith(f":{port:04X}") and row[3] == "0A")


started: list[subprocess.Popen] = []


def fail(message: str):
    """Says why, stops the new Foyer if this script started one (bench-live cannot know its pid then), exits 1."""
    print(f"drain-load: {message}", file=sys.stderr)
    for process in started:
        if process.poll() is None:
            process.kill()
    sys.exit(1)


async def main():
    port, path, token, count, old_pid, new_log = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
    new_command = sys.argv[sys.argv.index("--") + 1:]
    files = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (files[1], files[1]))
    stop = asyncio.Event()
    subscribers = [Subscriber() for _ in range(count)]
    reconnects: list[float] = []
    tasks = []
    for start in range(0, count, 500):
        tasks += [asyncio.create_task(follow(s, port, path, token, reconnects, stop)) for s in subscribers[start:start + 500]]
        await asyncio.sleep(0.05)
    try:
        await asyncio.wait_for(asyncio.gather(*(s.opened.wait() for s in subscribers)), 120)
    except TimeoutError:
        fail(f"only {sum(s.opened.is_set() for s in subscribers)} of {count} subscribers opened within 120 s")

    loop = asyncio.get_running_loop()
    made = 0

    async def make_changes(until: asyncio.Event):
        nonlocal made
        while not until.is_set():
            await loop.run_in_executor(None, change, port, token, made)
            made += 1
            await asyncio.sleep(0.1)

    changes_done = asyncio.Event()
    writer = asyncio.create_task(make_changes(changes_done))
    await asyncio.sleep(1)
    new = subprocess.Popen(new_command, stdout=open(new_log, "w"), stderr=subprocess.STDOUT)
    started.append(new)
    deadline = time.monotonic() + 30
    while listening_sockets(port) < 2:
        if new.poll() is not None or time.monotonic() > deadline:
            fail("the new Foyer did not listen within 30 s: " + open(new_log).read()[-2000:])
        await asyncio.sleep(0.05)
    signalled = time.monotonic()
    os.kill(old_pid, signal.SIGTERM)
    while os.path.exists(f"/proc/{old_pid}") and open(f"/proc/{old_pid}/stat").read().split()[2] != "Z":
        if time.monotonic() - signalled > 120:
            fail("the old Foyer did not exit within 120 s of SIGTERM")
        await asyncio.sleep(0.05)
    drained = time.monotonic() - signalled
    await asyncio.sleep(2)
    changes_done.set()
    await writer
    latest = max(s.last or 0 for s in subscribers)
    deadline = time.monotonic() + 60
    while any(s.last != latest for s in subscribers):
        if time.monotonic() > deadline:
            behind = sum(s.last != latest for s in subscribers)
            fail(f"{behind} subscribers did not reach event {latest} within 60 s")
        await asyncio.sleep(0.1)
    stop.set()
    for task in tasks:
        task.cancel()
    seconds = [int(moment - signalled) for moment in reconnects]
    peak = max((seconds.count(second) for second in set(seconds)), default=0)
    print(f"subscribers={count}")
    print(f"changes={made}")
    print(f"drain_seconds={drained:.1f}")
    print(f"reconnects={len(reconnects)}")
    print(f"peak_reconnects_per_second={peak}")
    print(f"reconnect_span_seconds={(max(reconnects) - min(reconnects)) if reconnects else 0:.1f}")
    # Every subscriber opened before the first change: each one's first event is the same.
    first = min(s.first for s in subscribers)
    print(f"events_lost={sum(s.lost + (s.first - first) for s in subscribers)}")
    print(f"events_twice={sum(s.twice for s in subscribers)}")
    print(f"reloads={sum(s.reloads for s in subscribers)}")
    print(f"new_pid={new.pid}")


asyncio.run(main())
