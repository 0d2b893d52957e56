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

test("rules on arguments, rate limits and shadow rules decide each call, for the SDK as for any client", async () => {
  const config = [
    "[[policy]]",
    'name = "no long audits"',
    'pattern = "gatehouse_audit_recent"',
    'action = "block"',
    'when = "has(args.limit) && args.limit > 50"',
    "",
    "[[policy]]",
    'name = "two statuses a day"',
    'pattern = "gatehouse_status"',
    'action = "allow"',
    'rate = "2/day"',
    "",
    "[[policy]]",
    'name = "try: no audits at all"',
    'pattern = "gatehouse_audit_recent"',
    'action = "block"',
    "shadow = true",
    "",
  ].join("\n");
  const g = await spawnGatehouse({}, config);
  try {
    const issued = g.issueToken("ts-rules");
    const { client } = await connectClient(issued.endpoint, issued.token);
    const short = await client.callTool({ name: "gatehouse_audit_recent", arguments: { limit: 5 } });
    expect(short.isError).toBe(false); // the shadow rule blocks nothing
    const long = await client.callTool({ name: "gatehouse_audit_recent", arguments: { limit: 100 } });
    expect(long.isError).toBe(true);
    expect(JSON.stringify(long.content)).toContain('policy rule \\"no long audits\\"');

    for (let i = 0; i < 2; i++) {
      expect((await client.callTool({ name: "gatehouse_status", arguments: {} })).isError).toBe(false);
    }
    const over = await client.callTool({ name: "gatehouse_status", arguments: {} });
    expect(over.isError).toBe(true);
    const details = over.structuredContent as Record<string, unknown>;
    expect(details.error).toBe("rate_limited");
    expect(details.rule).toBe("two statuses a day");
    expect(details.retryAfter as number).toBeGreaterThan(0);

    // What ran at once, what was refused and what the shadow rule would have done are on the record.
    const recent = await client.callTool({ name: "gatehouse_audit_recent", arguments: { limit: 20 } });
    type Step = { state: string; actor: string | null };
    const calls = (recent.structuredContent as { calls: { latest: Step; steps: Step[] }[] }).calls;
    const states = calls.flatMap((c) => c.steps).map((e) => `${e.state} ${e.actor}`);
    expect(states).toContain("blocked rule:no long audits");
    expect(states).toContain("limited rule:two statuses a day");
    expect(states).toContain("shadow shadow:try: no audits at all");
    expect(states).toContain("completed annotation:readOnlyHint");
    await client.close();
  } finally {
    g.stop();
  }
});
