#!/usr/bin/env python3
"""The benchmark upstream's task feed: a legacy `graphql-ws` websocket that accepts Foyer's three task
subscriptions and never reports a change, as an upstream whose tasks do not change would. With it, Foyer follows a
feed and keeps query answers; without one it keeps none that read tasks. Standard library only (no venv for the
benchmark); answers pings; serves until killed. Usage: bench-task-feed.py PORT"""
import asyncio
import base64
import hashlib
import json
import struct
import sys

ACCEPT_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


async def read_frame(reader):
    first, second = await reader.readexactly(2)
    opcode, length = first & 0x0F, second & 0x7F
    if length == 126:
        length = struct.unpack("!H", await reader.readexactly(2))[0]
    elif length == 127:
        length = struct.unpack("!Q", await reader.readexactly(8))[0]
    mask = await reader.readexactly(4) if second & 0x80 else b"\0\0\0\0"
    payload = bytes(byte ^ mask[index % 4] for index, byte in enumerate(await reader.readexactly(length)))
    return opcode, payload


def frame(opcode: int, payload: bytes) -> bytes:
    length = len(payload)
    if length < 126:
        head = struct.pack("!BB", 0x80 | opcode, length)
    elif length < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, length)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, length)
    return head + payload


async def serve(reader, writer):
    try:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in head.split("\r\n")[1:] if line)}
        accept = base64.b64encode(hashlib.sha1(headers["sec-websocket-key"].encode() + ACCEPT_GUID).digest()).decode()
        writer.write((
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Protocol: graphql-ws\r\n\r\n"
        ).encode())
        while True:
            opcode, payload = await read_frame(reader)
            if opcode == 0x8:  # close
                writer.write(frame(0x8, payload[:2]))
                break
            if opcode == 0x9:  # ping
                writer.write(frame(0xA, payload))
            elif opcode == 0x1 and json.loads(payload).get("type") == "connection_init":
                writer.write(frame(0x1, json.dumps({"type": "connection_ack"}).encode()))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, KeyError):
        pass
    finally:
        writer.close()


async def main(port: int):
    server = await asyncio.start_server(serve, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
