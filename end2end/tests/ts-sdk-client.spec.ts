// The official TypeScript SDK client against the real binary.
import { test, expect } from "@playwright/test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { spawnGatehouse, connectClient, type Gatehouse } from "./gatehouse";

let gh: Gatehouse;
test.beforeAll(async () => {
  gh = await spawnGatehouse();
});
test.afterAll(() => gh.stop());

test("connects with a token, lists tools and calls gatehouse_status", async () => {
  const issued = gh.issueToken("ts-agent", ["--thread", "ts-thread"]);
  const { client, transport } = await connectClient(issued.endpoint, issued.token);
  expect(transport.sessionId).toBeTruthy();
  expect(client.getServerVersion()?.name).toBe("gatehouse");

  const { tools } = await client.listTools();
  const status = tools.find((t) => t.name === "gatehouse_status");
  expect(status?.annotations?.readOnlyHint).toBe(true);

  const result = await client.callTool({ name: "gatehouse_status", arguments: {} });
  expect(result.isError).toBe(false);
  const s = result.structuredContent as Record<string, unknown>;
  expect(s.agent).toBe("ts-agent");
  expect(s.thread).toBe("ts-thread");
  expect(s.sessionId).toBe(transport.sessionId);
  expect(Date.parse(s.lapsesAt as string)).toBeGreaterThan(Date.parse(s.lastSignOfLife as string));

  await transport.terminateSession();
  await client.close();
});

test("a wrong token is refused with 401", async () => {
  const client = new Client({ name: "bad", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(`${gh.url}/mcp`), {
    requestInit: { headers: { Authorization: "Bearer not-a-real-token" } },
  });
  await expect(client.connect(transport)).rejects.toThrow(/401|Unauthorized|invalid/i);
});

test("a revoked token stops working", async () => {
  const issued = gh.issueToken("short-lived");
  const { client } = await connectClient(issued.endpoint, issued.token);
  await client.listTools();
  gh.cli("token", "revoke", issued.id);
  await expect(client.listTools()).rejects.toThrow();
  await client.close();
});
