"""The Python SDK (`mcp`, protocol 2026-07-28) in native mode.

Usage: python_native.py BASE_URL TOKEN COOKIE

Gatehouse answers a gated call with an input-required result carrying a URL
input request and a sealed requestState. The SDK hands the URL request to our
elicitation callback, which plays the human: it opens the approval API with
the signed-in COOKIE and approves (or declines), then answers "accept". The SDK
retries the call with the requestState; Gatehouse runs it once approved.
Exits non-zero on any failure.
"""

import asyncio
import re
import sys

import httpx2
from mcp import Client
from mcp import types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def run(base: str, token: str, cookie: str, decision: str, pattern: str):
    seen: list[str] = []

    async def on_elicit(context, params):
        assert isinstance(params, types.ElicitRequestURLParams), params
        seen.append(params.url)
        eid = re.search(r"/resume/(exec_[0-9a-f]+)", params.url).group(1)
        async with httpx2.AsyncClient() as http:
            r = await http.post(
                f"{base}/api/executions/{eid}/resume",
                json={"action": decision},
                headers={"cookie": cookie, "origin": base},
            )
            assert r.status_code == 200, r.text
        return types.ElicitResult(action="accept")

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    transport = streamable_http_client(f"{base}/mcp?elicitation_mode=native", http_client=http)
    async with Client(transport, elicitation_callback=on_elicit) as client:
        assert client.protocol_version == "2026-07-28", client.protocol_version
        result = await client.call_tool("gatehouse_policy_set", {"pattern": pattern, "action": "allow"})
        assert len(seen) == 1 and f"{base}/resume/exec_" in seen[0], seen
        return result


async def main() -> None:
    base, token, cookie = sys.argv[1:4]
    approved = await run(base, token, cookie, "accept", "py_native_*")
    assert not approved.is_error, approved
    assert approved.structured_content["pattern"] == "py_native_*", approved
    declined = await run(base, token, cookie, "decline", "py_declined")
    assert declined.is_error, declined
    assert declined.structured_content["error"] == "execution_declined", declined
    print("python mcp client (2026-07-28, native): approve and decline ok")


if __name__ == "__main__":
    asyncio.run(main())
