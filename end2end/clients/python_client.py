"""The official Python SDK (`mcp`) against a running Gatehouse.

Usage: python_client.py ENDPOINT TOKEN AGENT

Connects twice: in the SDK's default mode (which negotiates 2026-07-28:
server/discover, no session) and in legacy mode (initialize handshake,
2025-11-25); each time lists tools and calls gatehouse_status. Then checks that
a wrong token is refused. Exits non-zero on any failure.
"""

import asyncio
import sys

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def transport(endpoint: str, token: str):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    return streamable_http_client(endpoint, http_client=http)


async def exercise(endpoint: str, token: str, agent: str, mode: str) -> str:
    async with Client(transport(endpoint, token), mode=mode) as client:
        tools = (await client.list_tools()).tools
        status = next(t for t in tools if t.name == "gatehouse_status")
        assert status.annotations and status.annotations.read_only_hint is True, status
        result = await client.call_tool("gatehouse_status", {})
        assert not result.is_error, result
        assert result.structured_content["agent"] == agent, result.structured_content
        return client.protocol_version


async def main() -> None:
    endpoint, token, agent = sys.argv[1:4]
    modern = await exercise(endpoint, token, agent, "auto")
    assert modern == "2026-07-28", f"default mode negotiated {modern}"
    legacy = await exercise(endpoint, token, agent, "legacy")
    assert legacy == "2025-11-25", f"legacy mode negotiated {legacy}"
    try:
        await exercise(endpoint, "not-a-real-token", agent, "auto")
    except BaseException as e:  # the SDK wraps the 401 in exception groups of MCPError
        assert "MCPError" in repr(e), repr(e)
    else:
        raise AssertionError("a wrong token was accepted")
    print(f"python mcp client: ok ({modern} and {legacy})")


if __name__ == "__main__":
    asyncio.run(main())
