// OAuth 2.1 end to end: MCP clients connect to Gatehouse with no pasted
// token. The TypeScript SDK client (end2end/clients/oauth_client.mjs) and
// mcp-remote start with nothing, discover Gatehouse as their authorization
// server, send a person to the consent page in chromium, and then work as an
// agent credential owned by that person: tools listed, a gated call waits in
// their inbox under the agent name they chose, /agents says it came from OAuth.
// Registered dynamically (RFC 7591) or by a client ID metadata document
// served by the test; denied; without JavaScript; and bearer tokens still work.
import { test, expect, type Page } from "@playwright/test";
import { spawn, type ChildProcess } from "node:child_process";
import { createServer, type IncomingMessage, type Server } from "node:http";
import { createServer as createNetServer, type AddressInfo } from "node:net";
import { createInterface } from "node:readline";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawnGatehouse, connectClient, signInPage, root, type Gatehouse } from "./gatehouse";

const PW = "a long enough password";
const GATED = "ev__test_simple_text";
const CLIENT = join(root, "end2end", "clients", "oauth_client.mjs");
const MCP_REMOTE = join(root, "end2end", "node_modules", "mcp-remote", "dist", "proxy.js");
let gh: Gatehouse;

test.beforeAll(async () => {
  const node = join(root, "tools", "node_modules", ".bin", "node");
  const fixture = join(root, "end2end", "fixtures", "everything_server.mjs");
  gh = await spawnGatehouse(
    {},
    `[oauth]\nallow_private_client_metadata = true\n\n` +
      `[[upstream]]\nname = "everything"\nprefix = "ev__"\ncommand = ${JSON.stringify(node)}\nargs = [${JSON.stringify(fixture)}, "--stdio"]\n`,
  );
  for (const user of ["olive", "oscar", "nadia", "dave", "mira", "bob"]) gh.addUser(user, PW);
});
test.afterAll(() => gh.stop());

// ---------------------------------------------------------------- helpers

type Event = { event: string; [k: string]: any };

/** The SDK client as a child process speaking JSON lines (see oauth_client.mjs). */
class OAuthClient {
  events: Event[] = [];
  stderr = "";
  exit: Promise<number | null>;
  private waiters: (() => void)[] = [];
  private nextId = 1;
  constructor(private proc: ChildProcess) {
    createInterface({ input: proc.stdout! }).on("line", (line) => {
      try {
        this.events.push(JSON.parse(line));
      } catch {
        this.events.push({ event: "garbage", line });
      }
      for (const w of this.waiters.splice(0)) w();
    });
    proc.stderr!.on("data", (d) => (this.stderr += d.toString()));
    this.exit = new Promise((ok) => proc.on("exit", (code) => {
      ok(code);
      for (const w of this.waiters.splice(0)) w();
    }));
  }
  static start(args: string[]) {
    return new OAuthClient(spawn(process.execPath, [CLIENT, `${gh.url}/mcp`, ...args], { stdio: ["pipe", "pipe", "pipe"] }));
  }
  /** The first event matching `pred`, waiting for it if needed. */
  async next(pred: (e: Event) => boolean, what: string, timeout = 20_000): Promise<Event> {
    const deadline = Date.now() + timeout;
    for (;;) {
      const found = this.events.find(pred);
      if (found) return found;
      if (this.proc.exitCode !== null || Date.now() > deadline)
        throw new Error(`no ${what} from the client; events: ${JSON.stringify(this.events)}; stderr: ${this.stderr}`);
      await new Promise<void>((ok) => {
        this.waiters.push(ok);
        setTimeout(ok, 250);
      });
    }
  }
  event(name: string, timeout?: number) {
    return this.next((e) => e.event === name, `"${name}" event`, timeout);
  }
  /** Sends one command; resolves with its result, rejects with its error. */
  async send(cmd: Record<string, unknown>): Promise<any> {
    const id = this.nextId++;
    this.proc.stdin!.write(JSON.stringify({ id, ...cmd }) + "\n");
    const e = await this.next((e) => (e.event === "result" || e.event === "error") && e.id === id, `answer to ${JSON.stringify(cmd)}`, 60_000);
    if (e.event === "error") throw new Error(`${e.name}: ${e.message}`);
    return e.result;
  }
  call(name: string, args: Record<string, unknown> = {}) {
    return this.send({ call: { name, arguments: args } });
  }
  stop() {
    this.proc.stdin!.end();
    if (this.proc.exitCode === null) setTimeout(() => this.proc.kill(), 2_000).unref();
  }
}

/** A free loopback port. */
async function freePort(): Promise<number> {
  const s = createNetServer();
  await new Promise<void>((ok) => s.listen(0, "127.0.0.1", ok));
  const port = (s.address() as AddressInfo).port;
  await new Promise((ok) => s.close(ok));
  return port;
}

/** Opens the authorization URL, signs in on the way, and lands on the consent page. */
async function signInToConsent(page: Page, authorizeUrl: string, user: string) {
  await page.goto(authorizeUrl);
  // Not signed in: the sign-in page first, which comes back to the same request.
  await expect(page).toHaveURL(/\/sign-in\?next=%2Foauth%2Fauthorize/);
  await page.getByLabel("Username").fill(user);
  await page.getByLabel("Password").fill(PW);
  await page.getByRole("button", { name: "Sign in" }).click();
  const asked = new URL(authorizeUrl);
  await expect(page).toHaveURL(
    (u) =>
      u.origin === gh.url &&
      u.pathname === "/oauth/authorize" &&
      [...asked.searchParams].every(([k, v]) => u.searchParams.get(k) === v),
  );
  await expect(page.getByRole("button", { name: "Allow" })).toBeVisible();
}

async function waitForGatedTool(c: OAuthClient) {
  for (let i = 0; i < 100; i++) {
    const { tools } = await c.send({ list: true });
    if (tools.some((t: { name: string }) => t.name === GATED)) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${GATED} never appeared`);
}

async function cookieFor(user: string) {
  return gh.signIn(user, PW);
}

// ---------------------------------------------------------------- tests

test("discovery: /mcp without a token points at the protected resource metadata, which names Gatehouse as its authorization server", async () => {
  const r = await fetch(`${gh.url}/mcp`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" }),
  });
  expect(r.status).toBe(401);
  const challenge = r.headers.get("www-authenticate") ?? "";
  expect(challenge).toMatch(/^Bearer /);
  const prmUrl = challenge.match(/resource_metadata="([^"]+)"/)?.[1];
  expect(prmUrl).toBe(`${gh.url}/.well-known/oauth-protected-resource/mcp`);

  for (const url of [prmUrl!, `${gh.url}/.well-known/oauth-protected-resource`]) {
    const prm = await (await fetch(url)).json();
    expect(prm.authorization_servers).toEqual([gh.url]);
    expect(prm.resource).toBe(`${gh.url}/mcp`);
  }

  const as = await fetch(`${gh.url}/.well-known/oauth-authorization-server`);
  expect(as.status).toBe(200);
  const meta = await as.json();
  expect(meta).toMatchObject({
    issuer: gh.url,
    authorization_endpoint: `${gh.url}/oauth/authorize`,
    token_endpoint: `${gh.url}/oauth/token`,
    registration_endpoint: `${gh.url}/oauth/register`,
    revocation_endpoint: `${gh.url}/oauth/revoke`,
    code_challenge_methods_supported: ["S256"],
    client_id_metadata_document_supported: true,
    scopes_supported: ["mcp"],
  });
  expect([...meta.token_endpoint_auth_methods_supported].sort()).toEqual(
    ["client_secret_basic", "client_secret_post", "none"],
  );
});

test("TypeScript SDK, registered dynamically: sign in, consent under a chosen agent name, tools, a gated call in that user's inbox, OAuth on /agents, refresh rotates, a replayed refresh token revokes it", async ({ page }) => {
  test.setTimeout(120_000);
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  const c = OAuthClient.start(["--client-name", "Olive's Editor"]);
  try {
    const { url } = await c.event("authorize");
    const authorize = new URL(url);
    expect(authorize.origin + authorize.pathname).toBe(`${gh.url}/oauth/authorize`);
    expect(authorize.searchParams.get("code_challenge_method")).toBe("S256");
    const redirectUri = authorize.searchParams.get("redirect_uri")!;
    expect(redirectUri).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/callback$/);

    await signInToConsent(page, url, "olive");
    const consent = page.locator("main");
    await expect(consent).toContainText("Olive's Editor");
    await expect(consent).toContainText(redirectUri);
    await expect(consent).toContainText("Signed in as olive");
    // A registered name is only the client's own claim, and the page says so.
    await expect(consent).toContainText("the name is the client's own claim");
    const agentName = page.getByLabel("Agent name");
    await expect(agentName).toHaveValue("Olive's Editor");
    await agentName.fill("olive-laptop");
    await page.getByRole("button", { name: "Allow" }).click();

    // Back at the client's loopback callback, with the code, our state, and the issuer (RFC 9207).
    await expect(page.getByRole("heading", { name: /Authorized/ })).toBeVisible();
    const back = new URL(page.url());
    expect(back.origin + back.pathname).toBe(redirectUri);
    expect(back.searchParams.get("iss")).toBe(gh.url);
    const cb = await c.event("callback");
    expect(cb).toMatchObject({ state_ok: true, iss: gh.url, code: true });
    const ready = await c.event("ready");
    expect(ready.tools).toContain("gatehouse_status");

    // It is the agent the person named, acting for them.
    const status = await c.call("gatehouse_status");
    expect(status.isError).toBeFalsy();
    expect(status.structuredContent.agent).toBe("olive-laptop");

    // A gated call waits in olive's inbox under that name; not for bob.
    await waitForGatedTool(c);
    const paused = (await c.call(GATED)).structuredContent;
    expect(paused.status).toBe("user_approval_required");
    await page.goto(`${gh.url}/approvals`);
    const item = page.getByRole("list", { name: "Pending approvals" }).getByRole("listitem").filter({ hasText: "olive-laptop" });
    await expect(item).toBeVisible();
    const bob = await cookieFor("bob");
    expect((await fetch(`${gh.url}/api/executions/${paused.executionId}`, { headers: { cookie: bob } })).status).toBe(403);
    await item.getByRole("link", { name: GATED }).click();
    await expect(page).toHaveURL(new RegExp(`/resume/${paused.executionId}`));
    await page.getByRole("button", { name: "Approve", exact: true }).click();
    await expect(page.getByRole("status")).toContainText(/Approved|Running|Completed/);
    const resumed = await c.call("resume", { executionId: paused.executionId });
    expect(resumed.isError).toBeFalsy();
    expect(JSON.stringify(resumed.content)).toContain("simple text response");

    // /agents says where the credential came from.
    await page.goto(`${gh.url}/agents`);
    const agent = page.getByRole("region", { name: "Agent olive-laptop" });
    await expect(agent).toContainText("OAuth");
    await expect(agent).toContainText("owner olive");

    // Refresh: a new access token and a new refresh token; the old refresh token is spent.
    const before = await c.send({ tokens: true });
    expect(before.refresh_token).toBeTruthy();
    const refreshed = await c.send({ refresh: true });
    expect(refreshed).toEqual({ outcome: "AUTHORIZED", changed: true });
    const after = await c.send({ tokens: true });
    expect(after.refresh_token).toBeTruthy();
    expect(after.refresh_token).not.toBe(before.refresh_token);
    await c.send({ reconnect: true });
    expect((await c.call("gatehouse_status")).structuredContent.agent).toBe("olive-laptop");
    const replay = await fetch(`${gh.url}/oauth/token`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ grant_type: "refresh_token", refresh_token: before.refresh_token, client_id: ready.clientId }),
    });
    expect(replay.status).toBe(400);
    expect((await replay.json()).error).toBe("invalid_grant");

    // A spent refresh token presented again means it leaked: the credential is revoked
    // (OAuth 2.1 §4.3.1), so the client's next call fails and /agents says so.
    await expect(c.call("gatehouse_status")).rejects.toThrow();
    await page.reload();
    await expect(page.getByRole("region", { name: "Agent olive-laptop" })).toContainText("revoked");
    expect(errors).toEqual([]);
  } finally {
    c.stop();
  }
});

test("TypeScript SDK with a client ID metadata document: Gatehouse fetches it, the consent page shows its name; revoked on /agents it stops working", async ({ page }) => {
  const hits: string[] = [];
  let docUrl = "";
  const docServer: Server = createServer((req: IncomingMessage, res) => {
    hits.push(req.url ?? "");
    if (req.url !== "/oauth/client.json") return void res.writeHead(404).end();
    res.writeHead(200, { "content-type": "application/json" });
    res.end(
      JSON.stringify({
        client_id: docUrl,
        client_name: "Metadata Doc Client",
        // No port: a native app's loopback callback may use any (RFC 8252 §7.3).
        redirect_uris: ["http://127.0.0.1/callback"],
        grant_types: ["authorization_code", "refresh_token"],
        response_types: ["code"],
        token_endpoint_auth_method: "none",
      }),
    );
  });
  await new Promise<void>((ok) => docServer.listen(0, "127.0.0.1", ok));
  docUrl = `http://127.0.0.1:${(docServer.address() as AddressInfo).port}/oauth/client.json`;
  const c = OAuthClient.start(["--client-metadata-url", docUrl]);
  try {
    const { url } = await c.event("authorize");
    const authorize = new URL(url);
    expect(authorize.searchParams.get("client_id")).toBe(docUrl);
    await signInToConsent(page, url, "oscar");
    expect(hits).toContain("/oauth/client.json");
    await expect(page.locator("main")).toContainText("Metadata Doc Client");
    // The name is vouched for by the host that serves the document.
    await expect(page.locator("main")).toContainText("127.0.0.1");
    await expect(page.locator("main")).not.toContainText("the name is the client's own claim");
    await expect(page.locator("main")).toContainText(authorize.searchParams.get("redirect_uri")!);
    await expect(page.getByLabel("Agent name")).toHaveValue("Metadata Doc Client");
    await page.getByRole("button", { name: "Allow" }).click();
    await expect(page.getByRole("heading", { name: /Authorized/ })).toBeVisible();
    const ready = await c.event("ready");
    expect(ready.clientId).toBe(docUrl);
    expect(ready.tools).toContain("gatehouse_status");
    const status = await c.call("gatehouse_status");
    expect(status.structuredContent.agent).toBe("Metadata Doc Client");
    await page.goto(`${gh.url}/agents`);
    const agent = page.getByRole("region", { name: "Agent Metadata Doc Client" });
    await expect(agent).toContainText("OAuth");
    // Revoked on /agents like any credential: the next call is refused and no refresh brings it back.
    await expect(page.locator(".live-status")).toHaveText("Live");
    await agent.getByRole("button", { name: "Revoke", exact: true }).first().click();
    await expect(agent).toContainText("revoked");
    await expect(c.call("gatehouse_status")).rejects.toThrow();
  } finally {
    c.stop();
    docServer.close();
  }
});

test("a client ID metadata document whose client_id is not its own URL is refused", async ({ page }) => {
  const docServer = createServer((_req, res) => {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({
      client_id: "https://somebody-else.example/client.json",
      client_name: "Impostor",
      redirect_uris: ["http://127.0.0.1/callback"],
      token_endpoint_auth_method: "none",
    }));
  });
  await new Promise<void>((ok) => docServer.listen(0, "127.0.0.1", ok));
  const docUrl = `http://127.0.0.1:${(docServer.address() as AddressInfo).port}/client.json`;
  const c = OAuthClient.start(["--client-metadata-url", docUrl]);
  try {
    const { url } = await c.event("authorize");
    await signInPage(page, gh, "oscar", PW, "/");
    const response = await page.goto(url);
    // An unverifiable client gets no consent page, and the browser is not
    // sent to the redirect URI it claims: the person is told it cannot be used.
    expect(response?.status()).toBe(400);
    expect(page.url()).toBe(url);
    await expect(page.getByRole("heading", { level: 1 })).toHaveText("This sign-in request cannot be used");
    await expect(page.getByRole("alert")).toContainText("not its own URL");
    await expect(page.getByRole("button", { name: "Allow" })).toHaveCount(0);
    await expect(page.locator("body")).not.toContainText("Impostor");
  } finally {
    c.stop();
    docServer.close();
  }
});

test("Deny: the client is sent back with access_denied, its sign-in fails, and no credential is made", async ({ page }) => {
  const c = OAuthClient.start(["--client-name", "Unwanted Tool"]);
  try {
    const { url } = await c.event("authorize");
    // Signed out, the authorization endpoint sends the browser to sign in first (303).
    const signedOut = await fetch(url, { redirect: "manual" });
    expect(signedOut.status).toBe(303);
    expect(signedOut.headers.get("location")).toMatch(/^\/sign-in\?next=%2Foauth%2Fauthorize%3F/);
    await signInToConsent(page, url, "nadia");
    await page.getByRole("button", { name: "Deny" }).click();
    await expect(page.getByRole("heading", { name: /Authorization failed: access_denied/ })).toBeVisible();
    expect(new URL(page.url()).searchParams.get("iss")).toBe(gh.url);
    const cb = await c.event("callback");
    expect(cb).toMatchObject({ state_ok: true, error: "access_denied" });
    const failed = await c.event("failed");
    expect(failed.message).toContain("access_denied");
    expect(await c.exit).toBe(1);
    await page.goto(`${gh.url}/agents`);
    await expect(page.locator("main")).not.toContainText("Unwanted Tool");
  } finally {
    c.stop();
  }
});

test("the consent page works without JavaScript", async ({ browser }) => {
  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  const c = OAuthClient.start(["--client-name", "No Script Client"]);
  try {
    const { url } = await c.event("authorize");
    await signInToConsent(page, url, "dave");
    await expect(page.locator("main")).toContainText("No Script Client");
    await page.getByLabel("Agent name").fill("dave-nojs");
    await page.getByRole("button", { name: "Allow" }).click();
    await expect(page.getByRole("heading", { name: /Authorized/ })).toBeVisible();
    await c.event("ready");
    expect((await c.call("gatehouse_status")).structuredContent.agent).toBe("dave-nojs");
  } finally {
    c.stop();
    await context.close();
  }
});

test("mcp-remote: signs in through the browser, then serves Gatehouse's tools over stdio", async ({ page }) => {
  test.setTimeout(120_000);
  const configDir = mkdtempSync(join(tmpdir(), "gatehouse-mcp-remote-"));
  const port = await freePort();
  const env: Record<string, string | undefined> = {
    ...process.env,
    MCP_REMOTE_CONFIG_DIR: configDir,
    // Never a real browser: xdg-open runs $BROWSER, here a no-op; the test opens the URL itself.
    BROWSER: "true",
    DISPLAY: undefined,
    WAYLAND_DISPLAY: undefined,
    XDG_CURRENT_DESKTOP: undefined,
  };
  const proc = spawn(
    process.execPath,
    [MCP_REMOTE, `${gh.url}/mcp`, String(port), "--allow-http", "--transport", "http-only", "--auth-timeout", "90"],
    { stdio: ["pipe", "pipe", "pipe"], env: env as NodeJS.ProcessEnv },
  );
  let stderr = "";
  const replies: any[] = [];
  createInterface({ input: proc.stdout! }).on("line", (line) => {
    try {
      replies.push(JSON.parse(line));
    } catch {
      /* not JSON-RPC */
    }
  });
  proc.stderr!.on("data", (d) => (stderr += d.toString()));
  const reply = async (id: number) => {
    await expect.poll(() => replies.find((r) => r.id === id), { timeout: 30_000, message: `reply ${id}; stderr: ${stderr}` }).toBeTruthy();
    return replies.find((r) => r.id === id);
  };
  try {
    await expect.poll(() => stderr, { timeout: 30_000 }).toMatch(/Please authorize this client by visiting:\s*\n\S+/);
    const url = stderr.match(/Please authorize this client by visiting:\s*\n(\S+)/)![1];
    expect(new URL(url).searchParams.get("redirect_uri")).toBe(`http://localhost:${port}/oauth/callback`);

    await signInToConsent(page, url, "mira");
    await expect(page.locator("main")).toContainText("MCP CLI Proxy");
    await page.getByLabel("Agent name").fill("mira-desktop");
    await page.getByRole("button", { name: "Allow" }).click();
    await expect(page).toHaveURL(new RegExp(`^http://localhost:${port}/oauth/callback`));

    const send = (msg: object) => proc.stdin!.write(JSON.stringify({ jsonrpc: "2.0", ...msg }) + "\n");
    send({
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "stdio-host", version: "1.0.0" } },
    });
    const init = await reply(1);
    expect(init.result?.serverInfo?.name).toBe("gatehouse");
    send({ method: "notifications/initialized" });
    send({ id: 2, method: "tools/list", params: {} });
    const list = await reply(2);
    const names = list.result.tools.map((t: { name: string }) => t.name);
    expect(names).toContain("gatehouse_status");
    send({ id: 3, method: "tools/call", params: { name: "gatehouse_status", arguments: {} } });
    const status = await reply(3);
    expect(status.result.structuredContent.agent).toBe("mira-desktop");
    // It kept its tokens where it was told to, not in ~/.mcp-auth.
    expect(readdirSync(configDir, { recursive: true }).some((f) => String(f).endsWith("tokens.json"))).toBe(true);

    await page.goto(`${gh.url}/agents`);
    await expect(page.getByRole("region", { name: "Agent mira-desktop" })).toContainText("OAuth");
  } finally {
    proc.kill();
    if (existsSync(configDir)) rmSync(configDir, { recursive: true, force: true });
  }
});

test("a bearer token from the CLI still works, and its credential is not marked OAuth", async ({ page }) => {
  const issued = gh.issueToken("cli-agent", ["--owner", "olive"]);
  const { client } = await connectClient(issued.endpoint, issued.token, "cli-client");
  const status = await client.callTool({ name: "gatehouse_status", arguments: {} });
  expect((status.structuredContent as any).agent).toBe("cli-agent");
  await client.close();
  await signInPage(page, gh, "olive", PW, "/agents");
  const agent = page.getByRole("region", { name: "Agent cli-agent" });
  await expect(agent).toContainText("active");
  await expect(agent).not.toContainText("OAuth");
});
