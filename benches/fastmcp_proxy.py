"""FastMCP's proxy (the `fastmcp` package, pinned in tools/requirements-bench.txt)
fronting one Streamable HTTP MCP server, for scripts/bench-upstream.sh.

    python benches/fastmcp_proxy.py UPSTREAM_URL [--one-session]

By default built the way FastMCP's documentation builds a proxy to a remote
server, `create_proxy(url)`: the upstream's tools under their own names, and a
fresh upstream session for every request (FastMCP's choice for a URL target,
so concurrent clients' contexts cannot mix). With --one-session the proxy is
given a connected `Client` instead and sends every request over that one
upstream session (FastMCP warns that this may mix concurrent clients'
contexts; Gatehouse keeps one upstream session per agent session). Served
over Streamable HTTP (stateful, FastMCP's default) at /mcp on 127.0.0.1, on a
port the kernel picks; prints "listening on http://127.0.0.1:PORT" once the
socket listens (lib.sh's `start` waits for that line; connections queue until
the server accepts them).
"""

import asyncio
import socket
import sys

from fastmcp import Client
from fastmcp.server import create_proxy


async def serve(proxy) -> None:
    # IPPROTO_TCP named explicitly: asyncio sets TCP_NODELAY only on sockets
    # whose proto says TCP, and socket.socket() says 0; without it every
    # answer on a kept-alive connection waits ~40 ms for a delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    port = sock.getsockname()[1]
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    await proxy.run_http_async(
        show_banner=False,
        host="127.0.0.1",
        port=port,
        path="/mcp",
        log_level="WARNING",
        sockets=[sock],
    )


async def main() -> None:
    upstream = sys.argv[1]
    if sys.argv[2:] == ["--one-session"]:
        async with Client(upstream) as client:
            await serve(create_proxy(client, name="fastmcp-proxy"))
    elif sys.argv[2:] == []:
        await serve(create_proxy(upstream, name="fastmcp-proxy"))
    else:
        sys.exit("usage: fastmcp_proxy.py UPSTREAM_URL [--one-session]")


if __name__ == "__main__":
    asyncio.run(main())
