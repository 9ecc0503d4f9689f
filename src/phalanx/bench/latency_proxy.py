"""A TCP proxy that adds network latency, for measuring a store as if it were remote.

Every chunk is forwarded ``delay`` after it arrived, in each direction, without
holding back the chunks behind it: a round trip costs ``2 × delay`` more, and
throughput is not capped (as a long link behaves, unlike a sleep per chunk).

    python -m phalanx.bench.latency_proxy LISTEN_PORT UPSTREAM_PORT ONE_WAY_DELAY_MS

It prints ``ready`` once it listens. This machine's kernel has no ``netem``,
hence a user-space proxy; its own CPU time is counted with the store's.
"""

from __future__ import annotations

import asyncio
import sys


async def _forward(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float
) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def receive() -> None:
        while data := await reader.read(1 << 16):
            queue.put_nowait((loop.time() + delay, data))
        queue.put_nowait((loop.time() + delay, b""))

    receiving = asyncio.create_task(receive())
    try:
        while True:
            due, data = await queue.get()
            if (wait := due - loop.time()) > 0:
                await asyncio.sleep(wait)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        receiving.cancel()
        writer.close()


def main() -> None:
    listen, upstream, delay_ms = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    delay = delay_ms / 1000

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream)
        except OSError:
            writer.close()
            return
        await asyncio.gather(
            _forward(reader, up_writer, delay),
            _forward(up_reader, writer, delay),
            return_exceptions=True,
        )

    async def run() -> None:
        server = await asyncio.start_server(serve, "127.0.0.1", listen)
        print("ready", flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(run())


if __name__ == "__main__":
    main()
