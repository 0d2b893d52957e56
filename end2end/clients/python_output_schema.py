"""The Python SDK (`mcp`) and a gated tool that declares an outputSchema.

Usage: python_output_schema.py BASE_URL TOKEN COOKIE

Gatehouse fronts the everything fixture under `ev__`, whose
`get-structured-content` declares an outputSchema and waits for approval.
The SDK checks the structuredContent of every result that is not an error
against that schema, so Gatehouse's pause and its other answers for the tool
are error results with no structuredContent (the details in
`_meta["gatehouse/details"]`, the link in the text). COOKIE is a signed-in
owner's session: the script plays the person who decides over the approval
API. Checked:

- browser mode, 2026-07-28 (the SDK's default) and 2025-11-25 (legacy): the
  pause arrives without an exception; approved, `resume` returns the tool's
  own result; declined, `resume` says so;
- native mode, 2026-07-28: the input-required URL request is shown, the
  person decides, the SDK's retry returns the tool's result (checked by the
  SDK against the schema) or the decline, again without structuredContent.

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

TOOL = "ev__get-structured-content"
ARGS = {"location": "Chicago"}
CHICAGO = {"temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82}
DETAILS = "gatehouse/details"


async def decide(base: str, cookie: str, eid: str, action: str) -> None:
    async with httpx2.AsyncClient() as http:
        r = await http.post(
            f"{base}/api/executions/{eid}/resume",
            json={"action": action},
            headers={"cookie": cookie, "origin": base},
        )
        assert r.status_code == 200, r.text


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def gate_answer(result: types.CallToolResult) -> dict:
    """Gatehouse's own answer for the tool: an error without structuredContent; its details."""
    assert result.is_error, result
    assert result.structured_content is None, result
    assert result.meta and DETAILS in result.meta, result
    return result.meta[DETAILS]


def client(base: str, token: str, path: str, mode: str, **kwargs) -> Client:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    return Client(streamable_http_client(f"{base}{path}", http_client=http), mode=mode, **kwargs)


async def browser(base: str, token: str, cookie: str, mode: str, action: str) -> str:
    async with client(base, token, "/mcp", mode) as c:
        tool = next(t for t in (await c.list_tools()).tools if t.name == TOOL)
        assert tool.output_schema and tool.output_schema["required"] == ["temperature", "conditions", "humidity"], tool
        paused = await c.call_tool(TOOL, ARGS)
        pause = gate_answer(paused)
        assert pause["status"] == "user_approval_required", pause
        assert pause["approvalUrl"] in text(paused), paused
        await decide(base, cookie, pause["executionId"], action)
        resumed = await c.call_tool("resume", {"executionId": pause["executionId"]})
        if action == "accept":
            assert not resumed.is_error, resumed
            assert resumed.structured_content == CHICAGO, resumed
        else:
            # `resume` declares no output schema: its own answers stay structured.
            assert resumed.is_error, resumed
            assert resumed.structured_content["error"] == "execution_declined", resumed
        return c.protocol_version


async def native(base: str, token: str, cookie: str, action: str) -> types.CallToolResult:
    seen: list[str] = []

    async def on_elicit(context, params):
        assert isinstance(params, types.ElicitRequestURLParams), params
        seen.append(params.url)
        await decide(base, cookie, re.search(r"/resume/(exec_[0-9a-f]+)", params.url).group(1), action)
        return types.ElicitResult(action="accept")

    async with client(base, token, "/mcp?elicitation_mode=native", "auto", elicitation_callback=on_elicit) as c:
        assert c.protocol_version == "2026-07-28", c.protocol_version
        await c.list_tools()
        result = await c.call_tool(TOOL, ARGS)
        assert len(seen) == 1 and f"{base}/resume/exec_" in seen[0], seen
        return result


async def main() -> None:
    base, token, cookie = sys.argv[1:4]
    modern = await browser(base, token, cookie, "auto", "accept")
    assert modern == "2026-07-28", modern
    legacy = await browser(base, token, cookie, "legacy", "decline")
    assert legacy == "2025-11-25", legacy

    approved = await native(base, token, cookie, "accept")
    assert not approved.is_error, approved
    assert approved.structured_content == CHICAGO, approved
    declined = gate_answer(await native(base, token, cookie, "decline"))
    assert declined["error"] == "execution_declined", declined
    print("python mcp client and a tool with an output schema: ok (browser 2026-07-28 and 2025-11-25, native)")


if __name__ == "__main__":
    asyncio.run(main())
