// Every client gets the approval its way (`/mcp?elicitation_mode=native`):
// the TypeScript SDK declaring form+url, form only, or nothing, and the Python
// SDK on 2026-07-28. Each completes approve and decline end to end — also for
// a tool that declares an outputSchema (the everything fixture's
// get-structured-content behind a require_approval rule): no pause may trip
// the SDK's check of structured results.
import { test, expect, type Page } from "@playwright/test";
import { execFileSync, spawnSync } from "node:child_process";
import { join, resolve } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { Client as ClientV2, StreamableHTTPClientTransport as TransportV2 } from "@modelcontextprotocol/client";
import { createTaskSessionFromClient, resultFromTaskOutcome } from "@modelcontextprotocol/ext-tasks/client";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  ElicitRequestSchema,
  ElicitationCompleteNotificationSchema,
  UrlElicitationRequiredError,
} from "@modelcontextprotocol/sdk/types.js";
import { root, signInPage, spawnGatehouse, type Gatehouse } from "./gatehouse";

const PW = "a long enough password";
let gh: Gatehouse;
let ada: string;

test.describe.configure({ mode: "serial" });
const STRUCTURED = "ev__get-structured-content";
/** What the fixture's get-structured-content answers for Chicago (server-everything's values). */
const CHICAGO = { temperature: 36, conditions: "Light rain / drizzle", humidity: 82 };
/** Where a result for a tool with an outputSchema carries Gatehouse's details. */
const DETAILS = "gatehouse/details";

test.beforeAll(async () => {
  const node = join(root, "tools", "node_modules", ".bin", "node");
  const fixture = join(root, "end2end", "fixtures", "everything_server.mjs");
  gh = await spawnGatehouse(
    {},
    `[[upstream]]\nname = "everything"\nprefix = "ev__"\ncommand = ${JSON.stringify(node)}\nargs = [${JSON.stringify(fixture)}, "--stdio"]\ntrust_annotations = true\n\n` +
      `[[policy]]\npattern = "${STRUCTURED}"\naction = "require_approval"\n`,
  );
  gh.addUser("ada", PW, true);
  ada = await gh.signIn("ada", PW);
});
test.afterAll(() => gh.stop());

async function decide(eid: string, action: string) {
  const r = await fetch(`${gh.url}/api/executions/${eid}/resume`, {
    method: "POST",
    headers: { "content-type": "application/json", origin: gh.url, cookie: ada },
    body: JSON.stringify({ action }),
  });
  expect(r.status).toBe(200);
}

/** Signs ada in on the approval page at `url` and approves, or declines with `reason`. */
async function decideOnPage(page: Page, url: string, action: "accept" | "decline", reason = "") {
  const link = new URL(url);
  await signInPage(page, gh, "ada", PW, link.pathname + link.search);
  await expect(page.locator(".live-status")).toHaveText("Live");
  if (action === "accept") {
    await page.getByRole("button", { name: "Approve" }).click();
  } else {
    await page.getByLabel("Reason for declining").fill(reason);
    await page.getByRole("button", { name: "Decline" }).click();
  }
}

type Elicitation = { form?: object; url?: object };

/** A TypeScript SDK client in native mode declaring `elicitation`. */
async function nativeClient(agent: string, elicitation: Elicitation | undefined) {
  const issued = gh.issueToken(agent, ["--owner", "ada"]);
  const client = new Client(
    { name: `ts-${agent}`, version: "1.0.0" },
    { capabilities: elicitation ? { elicitation } : {} },
  );
  const notifications: string[] = [];
  client.fallbackNotificationHandler = async (n) => {
    notifications.push(n.method);
  };
  const transport = new StreamableHTTPClientTransport(new URL(`${gh.url}/mcp?elicitation_mode=native`), {
    requestInit: { headers: { Authorization: `Bearer ${issued.token}` } },
  });
  await client.connect(transport);
  return { client, notifications };
}

const setRule = (pattern: string) => ({ name: "gatehouse_policy_set", arguments: { pattern, action: "allow" } });

test.describe("TypeScript SDK declaring form and url: URL elicitation, the call is held", () => {
  for (const action of ["accept", "decline"] as const) {
    test(action, async () => {
      const { client, notifications } = await nativeClient(`url-${action}`, { form: {}, url: {} });
      const urls: string[] = [];
      client.setRequestHandler(ElicitRequestSchema, async (request) => {
        expect(request.params.mode).toBe("url");
        const url = (request.params as { url: string }).url;
        urls.push(url);
        // The user opens the link and decides in the browser.
        const eid = url.match(/\/resume\/(exec_[0-9a-f]+)/)![1];
        setTimeout(() => decide(eid, action), 100);
        return { action: "accept" };
      });
      const result = await client.callTool(setRule(`url_${action}`), undefined, { timeout: 30_000 });
      expect(urls).toHaveLength(1);
      expect(urls[0]).toContain(`${gh.url}/resume/exec_`);
      // The completion notification may travel on the session's standalone
      // stream, so it can land just after the call's own response.
      await expect.poll(() => notifications).toContain("notifications/elicitation/complete");
      if (action === "accept") {
        expect(result.isError).toBe(false);
        expect((result.structuredContent as any).pattern).toBe("url_accept");
      } else {
        expect(result.isError).toBe(true);
        expect((result.structuredContent as any).error).toBe("execution_declined");
      }
      await client.close();
    });
  }
});

test.describe("TypeScript SDK declaring form only: a client form never decides; the browser answer", () => {
  for (const action of ["accept", "decline"] as const) {
    test(action, async () => {
      const { client } = await nativeClient(`form-${action}`, { form: {} });
      let asked = 0;
      // An agent can answer its own client's forms: Gatehouse must not ask there
      // (unless the operator sets trust_client_forms, and never for a human_only call).
      client.setRequestHandler(ElicitRequestSchema, async () => {
        asked++;
        return { action: "accept", content: { approve: true } };
      });
      const paused = await client.callTool(setRule(`form_${action}`));
      const s = paused.structuredContent as any;
      expect(s.status).toBe("user_approval_required");
      expect(asked).toBe(0);
      await decide(s.executionId, action);
      const result = await client.callTool({ name: "resume", arguments: { executionId: s.executionId } });
      expect(result.isError).toBe(action === "decline");
      if (action === "accept") expect((result.structuredContent as any).pattern).toBe("form_accept");
      await client.close();
    });
  }
});

test.describe("TypeScript SDK declaring no elicitation: the browser answer", () => {
  for (const action of ["accept", "decline"] as const) {
    test(action, async () => {
      const { client } = await nativeClient(`none-${action}`, undefined);
      const paused = await client.callTool(setRule(`none_${action}`));
      const s = paused.structuredContent as any;
      expect(s.status).toBe("user_approval_required");
      await decide(s.executionId, action);
      const result = await client.callTool({ name: "resume", arguments: { executionId: s.executionId } });
      expect(result.isError).toBe(action === "decline");
      await client.close();
    });
  }
});

test("Python SDK on 2026-07-28: input-required with a URL request, the retry runs once approved", async () => {
  const issued = gh.issueToken("py-native", ["--owner", "ada"]);
  const python = resolve(import.meta.dirname, "..", "..", "tools", ".venv", "bin", "python");
  const out = execFileSync(python, [resolve(import.meta.dirname, "..", "clients", "python_native.py"), gh.url, issued.token, ada], {
    encoding: "utf8",
    timeout: 120_000,
  });
  expect(out).toContain("approve and decline ok");
});

// The inspector 2.12 declares the tasks extension (SEP-2663) but its CLI prints
// the first answer and exits: the task's status message carries the approval
// page, and its taskId is the execution a later `resume` continues.
test.describe("inspector CLI (declares no elicitation, declares tasks): a task naming the page, then resume", () => {
  const inspector = resolve(import.meta.dirname, "..", "node_modules", ".bin", "mcp-inspector");
  // The CLI prints the result as JSON (and exits non-zero for an `isError` result).
  const cli = (token: string, tool: string, args: string[]) => {
    const run = spawnSync(
      inspector,
      ["--cli", `${gh.url}/mcp?elicitation_mode=native`, "--transport", "http", "--method", "tools/call",
        "--tool-name", tool, ...args.flatMap((a) => ["--tool-arg", a]), "--header", `Authorization: Bearer ${token}`],
      { encoding: "utf8", timeout: 60_000 },
    );
    return JSON.parse(run.stdout.slice(run.stdout.indexOf("{")));
  };
  for (const action of ["accept", "decline"] as const) {
    test(action, async () => {
      const issued = gh.issueToken(`inspector-${action}`, ["--owner", "ada"]);
      const paused = cli(issued.token, "gatehouse_policy_set", [`pattern=insp_${action}`, "action=allow"]);
      expect(paused.status).toBe("input_required");
      expect(paused.statusMessage).toContain(`${gh.url}/resume/${paused.taskId}`);
      await decide(paused.taskId, action);
      // A new invocation is a new session of the same agent: resume works from it.
      const result = cli(issued.token, "resume", [`executionId=${paused.taskId}`]);
      if (action === "accept") {
        expect(result.isError).toBe(false);
        expect(result.structuredContent.pattern).toBe("insp_accept");
      } else {
        expect(result.isError).toBe(true);
        expect(result.structuredContent.error).toBe("execution_declined");
      }
    });
  }
});

test.describe("native_url = \"error\": the -32042 URL-elicitation-required error, the retry continues", () => {
  let errGh: Gatehouse;
  let cookie: string;
  test.beforeAll(async () => {
    errGh = await spawnGatehouse({ GATEHOUSE_NATIVE_URL: "error" });
    errGh.addUser("ada", PW, true);
    cookie = await errGh.signIn("ada", PW);
  });
  test.afterAll(() => errGh.stop());

  test("approve, notified, retry runs the same execution", async () => {
    const issued = errGh.issueToken("err-agent", ["--owner", "ada"]);
    const client = new Client({ name: "ts-err", version: "1.0.0" }, { capabilities: { elicitation: { form: {}, url: {} } } });
    const completed: unknown[] = [];
    client.setNotificationHandler(ElicitationCompleteNotificationSchema, async (n) => {
      completed.push(n.params.elicitationId);
    });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${errGh.url}/mcp?elicitation_mode=native`), {
        requestInit: { headers: { Authorization: `Bearer ${issued.token}` } },
      }),
    );
    const request = { name: "gatehouse_policy_set", arguments: { pattern: "err_*", action: "allow" } };
    const first = await client.callTool(request).catch((e) => e);
    expect(first).toBeInstanceOf(UrlElicitationRequiredError);
    const [elicitation] = (first as UrlElicitationRequiredError).elicitations;
    expect(elicitation.url).toContain(`${errGh.url}/resume/${elicitation.elicitationId}`);
    // Retrying before anyone decided asks again, for the same execution.
    const again = await client.callTool(request).catch((e) => e);
    expect((again as UrlElicitationRequiredError).elicitations[0].elicitationId).toBe(elicitation.elicitationId);

    const r = await fetch(`${errGh.url}/api/executions/${elicitation.elicitationId}/resume`, {
      method: "POST",
      headers: { "content-type": "application/json", origin: errGh.url, cookie },
      body: JSON.stringify({ action: "accept" }),
    });
    expect(r.status).toBe(200);
    await expect.poll(() => completed).toContain(elicitation.elicitationId);
    const result = await client.callTool(request);
    expect(result.isError).toBe(false);
    expect((result.structuredContent as any).pattern).toBe("err_*");
    await client.close();
  });
});

test.describe("a tool with an outputSchema: the pause never trips the SDK's check of structured results", () => {
  type Details = { status?: string; error?: string; executionId: string; approvalUrl?: string; reason?: string };

  /** A TypeScript SDK v1 client at `path` that has listed the structured tool (so it checks its results). */
  async function schemaClient(agent: string, path: string, elicitation?: Elicitation) {
    const issued = gh.issueToken(agent, ["--owner", "ada"]);
    const client = new Client(
      { name: `ts-${agent}`, version: "1.0.0" },
      { capabilities: elicitation ? { elicitation } : {} },
    );
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${gh.url}${path}`), {
        requestInit: { headers: { Authorization: `Bearer ${issued.token}` } },
      }),
    );
    await listed(() => client.listTools());
    return client;
  }

  /** Lists until the structured tool is there (the upstream may still be starting); the SDK caches its schema. */
  async function listed(list: () => Promise<{ tools: { name: string; outputSchema?: { required?: unknown } }[] }>) {
    for (let i = 0; i < 100; i++) {
      const tool = (await list()).tools.find((t) => t.name === STRUCTURED);
      if (tool) {
        expect(tool.outputSchema?.required).toEqual(["temperature", "conditions", "humidity"]);
        return;
      }
      await new Promise((r) => setTimeout(r, 200));
    }
    throw new Error(`${STRUCTURED} never appeared`);
  }

  const call = { name: STRUCTURED, arguments: { location: "Chicago" } };
  const details = (result: { _meta?: Record<string, unknown> }) => result._meta?.[DETAILS] as Details;
  const pathOf = (url: string) => new URL(url).pathname + new URL(url).search;

  test("browser mode: the link arrives without a throw; approved on the page, resume returns the conforming result", async ({
    page,
  }) => {
    const client = await schemaClient("schema-browser", "/mcp");
    const paused = await client.callTool(call);
    expect(paused.isError).toBe(true);
    expect(paused.structuredContent).toBeUndefined();
    const pause = details(paused);
    expect(pause.status).toBe("user_approval_required");
    expect(JSON.stringify(paused.content)).toContain(pause.approvalUrl);

    await signInPage(page, gh, "ada", PW, pathOf(pause.approvalUrl!));
    await expect(page.locator(".live-status")).toHaveText("Live");
    await page.getByRole("button", { name: "Approve" }).click();
    await expect(page.getByRole("status")).toContainText("Approved");
    const result = await client.callTool({ name: "resume", arguments: { executionId: pause.executionId } });
    expect(result.isError).toBeFalsy();
    expect(result.structuredContent).toEqual(CHICAGO);
    await client.close();
  });

  // Declaring URL elicitation: the call itself is held and returns the tool's
  // result, which the SDK checks against the schema; a decline is an error
  // result without structuredContent, which it does not check.
  for (const action of ["accept", "decline"] as const) {
    test(`native mode, URL elicitation: decided on the page (${action}), the held call answers`, async ({ page }) => {
      const client = await schemaClient(`schema-url-${action}`, "/mcp?elicitation_mode=native", { form: {}, url: {} });
      let shown!: (url: string) => void;
      const url = new Promise<string>((r) => (shown = r));
      client.setRequestHandler(ElicitRequestSchema, async (request) => {
        shown((request.params as { url: string }).url);
        return { action: "accept" };
      });
      const held = client.callTool(call, undefined, { timeout: 60_000 });
      await decideOnPage(page, await url, action, "ask for New York");
      const result = await held;
      if (action === "accept") {
        expect(result.isError).toBeFalsy();
        expect(result.structuredContent).toEqual(CHICAGO);
      } else {
        expect(result.isError).toBe(true);
        expect(result.structuredContent).toBeUndefined();
        expect(details(result).error).toBe("execution_declined");
        expect(details(result).reason).toBe("ask for New York");
        expect(JSON.stringify(result.content)).toContain("ask for New York");
      }
      await client.close();
    });
  }

  test("TypeScript SDK v2 (2026-07-28): the pause without a throw; approved, resume returns the conforming result; declined", async () => {
    const issued = gh.issueToken("schema-v2", ["--owner", "ada"]);
    const client = new ClientV2(
      { name: "ts-v2-schema", version: "1.0.0" },
      { versionNegotiation: { mode: { pin: "2026-07-28" } } },
    );
    await client.connect(
      new TransportV2(new URL(`${gh.url}/mcp`), { requestInit: { headers: { Authorization: `Bearer ${issued.token}` } } }),
    );
    await listed(() => client.listTools());
    for (const action of ["accept", "decline"] as const) {
      const paused = await client.callTool(call);
      expect(paused.isError).toBe(true);
      expect(paused.structuredContent).toBeUndefined();
      const pause = details(paused as { _meta?: Record<string, unknown> });
      expect(pause.status).toBe("user_approval_required");
      await decide(pause.executionId, action);
      const result = await client.callTool({ name: "resume", arguments: { executionId: pause.executionId } });
      if (action === "accept") {
        expect(result.isError).toBeFalsy();
        expect(result.structuredContent).toEqual(CHICAGO);
      } else {
        expect(result.isError).toBe(true);
        expect((result.structuredContent as Details).error).toBe("execution_declined");
      }
    }
    await client.close();
  });

  test("Python SDK (2026-07-28 and 2025-11-25): the pause, approve and decline", async () => {
    const issued = gh.issueToken("py-schema", ["--owner", "ada"]);
    const python = resolve(import.meta.dirname, "..", "..", "tools", ".venv", "bin", "python");
    const script = resolve(import.meta.dirname, "..", "clients", "python_output_schema.py");
    const out = execFileSync(python, [script, gh.url, issued.token, ada], { encoding: "utf8", timeout: 120_000 });
    expect(out).toContain("output schema: ok");
  });
});

// The TypeScript SDK v2 (its stable line, pinned to 2026-07-28) as most new
// agents embed it: no session, `input_required` fulfilled automatically through
// the client's own `elicitation/create` handler, then retried with Gatehouse's
// sealed requestState until a person has decided.
test.describe("TypeScript SDK v2 (2026-07-28): connect, list, call, a gated call approved and declined in the browser", () => {
  async function v2Client(agent: string, onUrl?: (url: string) => void) {
    const issued = gh.issueToken(agent, ["--owner", "ada"]);
    const client = new ClientV2(
      { name: `ts-v2-${agent}`, version: "1.0.0" },
      { versionNegotiation: { mode: { pin: "2026-07-28" } }, capabilities: { elicitation: { form: {}, url: {} } } },
    );
    if (onUrl) {
      client.setRequestHandler("elicitation/create", async (request) => {
        const params = request.params as { mode?: string; url?: string };
        expect(params.mode).toBe("url");
        onUrl(params.url!);
        return { action: "accept" };
      });
    }
    await client.connect(
      new TransportV2(new URL(`${gh.url}/mcp?elicitation_mode=native`), {
        requestInit: { headers: { Authorization: `Bearer ${issued.token}` } },
      }),
    );
    return client;
  }

  test("connects on 2026-07-28, lists Gatehouse's and the upstream's tools, calls one that runs at once", async () => {
    const client = await v2Client("plain");
    expect(client.getServerVersion()?.name).toBe("gatehouse");
    let names: string[] = [];
    for (let i = 0; i < 100 && !names.includes("ev__test_simple_text"); i++) {
      names = (await client.listTools()).tools.map((t) => t.name);
      if (!names.includes("ev__test_simple_text")) await new Promise((r) => setTimeout(r, 200));
    }
    expect(names).toContain("gatehouse_status");
    expect(names).toContain("ev__test_simple_text");
    const status = await client.callTool({ name: "gatehouse_status", arguments: {} });
    expect(status.isError).toBeFalsy();
    expect(JSON.stringify(status.content)).toContain("plain");
    await client.close();
  });

  for (const action of ["accept", "decline"] as const) {
    test(`a gated call: the approval link through input_required, decided on the page (${action})`, async ({ page }) => {
      let shown!: (url: string) => void;
      const url = new Promise<string>((r) => (shown = r));
      const client = await v2Client(`gated-${action}`, shown);
      const held = client.callTool({ name: STRUCTURED, arguments: { location: "Chicago" } }, { timeout: 120_000 });
      await decideOnPage(page, await url, action, "not this city");
      const result = await held;
      if (action === "accept") {
        expect(result.isError).toBeFalsy();
        expect(result.structuredContent).toEqual(CHICAGO);
      } else {
        expect(result.isError).toBe(true);
        expect(result.structuredContent).toBeUndefined();
        expect(JSON.stringify(result.content)).toContain("not this city");
      }
      await client.close();
    });
  }

  // A long approval as a task (SEP-2663) through the SDK's tasks package: the
  // call answers at once, the client polls, answers the approval's URL input
  // request, and settles with the tool's real result once a person approved.
  test("a gated call as a task: polled until approved on the page, then the real result", async ({ page }) => {
    const issued = gh.issueToken("v2-task", ["--owner", "ada"]);
    const endpoint = `${gh.url}/mcp`;
    const capabilities = { elicitation: { url: {} }, extensions: { "io.modelcontextprotocol/tasks": {} } };
    const client = new ClientV2(
      { name: "ts-v2-task", version: "1.0.0" },
      { versionNegotiation: { mode: { pin: "2026-07-28" } }, capabilities },
    );
    await client.connect(
      new TransportV2(new URL(endpoint), { requestInit: { headers: { Authorization: `Bearer ${issued.token}` } } }),
    );
    // The SDK's own codecs refuse task traffic, so the tasks package takes a
    // raw dispatch: one 2026-07-28 request with the standard headers.
    let nextId = 0;
    const rawDispatch = async (request: any) => {
      const id = ++nextId;
      const name = request.params?.name ?? request.params?.uri ?? request.params?.taskId;
      const r = await fetch(endpoint, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          accept: "application/json, text/event-stream",
          authorization: `Bearer ${issued.token}`,
          "mcp-protocol-version": "2026-07-28",
          "mcp-method": request.method,
          ...(name ? { "mcp-name": String(name) } : {}),
        },
        body: JSON.stringify({ jsonrpc: "2.0", id, ...request }),
      });
      const text = await r.text();
      if (!(r.headers.get("content-type") ?? "").includes("event-stream")) return JSON.parse(text);
      for (const line of text.split("\n")) {
        if (!line.startsWith("data:")) continue;
        const message = JSON.parse(line.slice(5));
        if (message.id === id) return message;
      }
      throw new Error(`no answer to ${request.method}: ${text}`);
    };
    let shown!: (url: string) => void;
    const url = new Promise<string>((r) => (shown = r));
    const session = createTaskSessionFromClient(client, {
      endpointId: "gatehouse",
      rawDispatch,
      v2RequestFraming: { protocolVersion: "2026-07-28", clientInfo: { name: "ts-v2-task", version: "1.0.0" }, clientCapabilities: capabilities },
      onInputRequest: async (request: any) => {
        expect(request.kind).toBe("elicitation");
        shown(request.params.url);
        return { action: "accept" } as any;
      },
    });
    const execution = await session.callTool(STRUCTURED, { location: "Chicago" });
    const settled = execution.settle();
    const link = await url;
    expect(new URL(link).pathname).toMatch(/^\/resume\/exec_/);
    await decideOnPage(page, link, "accept");
    const { outcome } = await settled;
    const result = resultFromTaskOutcome(outcome) as { isError?: boolean; structuredContent?: unknown };
    expect(result.isError).toBeFalsy();
    expect(result.structuredContent).toEqual(CHICAGO);
    await session.close();
    await client.close();
  });
});
