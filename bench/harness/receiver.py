"""A webhook receiver for the benchmarks, in a process of its own on the client's core: asyncio,
answering every request 204, at once or after a delay (from some seconds after it starts), on
kept-alive connections."""

from __future__ import annotations

import subprocess
import sys

from bench.harness import CLIENT_CPU

SCRIPT = r"""
import asyncio, sys, time

DELAY, AFTER = float(sys.argv[2]), float(sys.argv[3])
STARTED = time.monotonic()

async def answer(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            if DELAY and time.monotonic() - STARTED >= AFTER:
                await asyncio.sleep(DELAY)
            writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    writer.close()

async def main():
    server = await asyncio.start_server(answer, "127.0.0.1", int(sys.argv[1]), backlog=1024)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()

asyncio.run(main())
"""


def start_receiver(port: int, delay: float = 0.0, after: float = 0.0) -> subprocess.Popen:
    """The receiver on 127.0.0.1:`port`, every path, answering after `delay` seconds once it has
    run for `after` seconds (at once before); returned once it listens."""
    process = subprocess.Popen(
        ["taskset", "-c", CLIENT_CPU, sys.executable, "-c", SCRIPT, str(port), str(delay), str(after)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    return process
