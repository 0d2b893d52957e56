// Gated calls in browser mode, end to end: the TypeScript SDK client makes
// the call, a person decides (through the API or on the page in chromium),
// and the client's `resume` returns the real result.
import { test, expect, type Page } from "@playwright/test";
import { spawnGatehouse, connectClient, type Gatehouse } from "./gatehouse";

const PW = "a long enough password";
let gh: Gatehouse;
let ada: string; // admin cookie
let bob: string; // plain user cookie

test.describe.configure({ mode: "serial" });

test.beforeAll(async () => {
  gh = await spawnGatehouse();
  gh.addUser("ada", PW, true);
  gh.addUser("bob", PW);
  ada = await gh.signIn("ada", PW);
  bob = await gh.signIn("bob", PW);
});
test.afterAll(() => gh.stop());

type Paused = { status: string; executionId: string; approvalUrl: string; expiresAt: string };

async function pausedCall(gh: Gatehouse, agent: string, args: Record<string, unknown>) {
  const issued = gh.issueToken(agent, ["--owner", "ada"]);
  const { client, transport } = await connectClient(issued.endpoint, issued.token);
  const result = await client.callTool({ name: "gatehouse_policy_set", arguments: args });
  expect(result.isError).toBe(false);
  const paused = result.structuredContent as Paused;
  expect(paused.status).toBe("user_approval_required");
  return { client, transport, paused, issued };
}

async function decide(gh: Gatehouse, cookie: string | undefined, eid: string, action: string) {
  return fetch(`${gh.url}/api/executions/${eid}/resume`, {
    method: "POST",
    headers: { "content-type": "application/json", origin: gh.url, ...(cookie ? { cookie } : {}) },
    body: JSON.stringify({ action }),
  });
}

async function signInPage(page: Page, user: string, at: Gatehouse = gh) {
  await page.goto(`${at.url}/sign-in`);
  await page.getByLabel("Username").fill(user);
  await page.getByLabel("Password").fill(PW);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page).toHaveURL(`${at.url}/`);
}

test.describe("TypeScript SDK client in browser mode", () => {
  test("approve: resume returns the real result; repeats are idempotent and conflicts 409", async () => {
    const { client, paused } = await pausedCall(gh, "ts-approve", { pattern: "ts_*", action: "allow" });
    expect(paused.approvalUrl).toContain(`/resume/${paused.executionId}?mcp_session_id=`);
    const resumed = client.callTool({ name: "resume", arguments: { executionId: paused.executionId } });
    await new Promise((r) => setTimeout(r, 200));
    const r = await decide(gh, ada, paused.executionId, "accept");
    expect(r.status).toBe(200);
    expect((await r.json()).state).toBe("approved");
    const result = await resumed;
    expect(result.isError).toBe(false);
    expect((result.structuredContent as any).pattern).toBe("ts_*");
    expect((await decide(gh, ada, paused.executionId, "accept")).status).toBe(200);
    const conflict = await decide(gh, ada, paused.executionId, "decline");
    expect(conflict.status).toBe(409);
    expect((await conflict.json()).error).toBe("conflict");
    await client.close();
  });

  test("decline: resume returns an error result naming the decline", async () => {
    const { client, paused } = await pausedCall(gh, "ts-decline", { pattern: "never", action: "allow" });
    expect((await decide(gh, ada, paused.executionId, "decline")).status).toBe(200);
    const result = await client.callTool({ name: "resume", arguments: { executionId: paused.executionId } });
    expect(result.isError).toBe(true);
    expect((result.structuredContent as any).error).toBe("execution_declined");
    expect(JSON.stringify(result.content)).toContain("declined");
    await client.close();
  });

  test("the API answers 401, 403 and 404", async () => {
    const { client, paused } = await pausedCall(gh, "ts-codes", { pattern: "codes", action: "allow" });
    const url = `${gh.url}/api/executions/${paused.executionId}`;
    expect((await fetch(url)).status).toBe(401);
    expect((await fetch(url, { headers: { cookie: bob } })).status).toBe(403);
    expect((await decide(gh, bob, paused.executionId, "accept")).status).toBe(403);
    expect((await decide(gh, undefined, paused.executionId, "accept")).status).toBe(401);
    expect((await fetch(`${gh.url}/api/executions/exec_missing`, { headers: { cookie: ada } })).status).toBe(404);
    const detail = await (await fetch(url, { headers: { cookie: ada } })).json();
    expect(detail.state).toBe("pending");
    expect(detail.tool).toBe("gatehouse_policy_set");
    await client.close();
  });

  test("resume works from a second session of the same agent, and is refused to another agent", async () => {
    const { client, paused, issued } = await pausedCall(gh, "ts-multi", { pattern: "multi", action: "allow" });
    const other = gh.issueToken("ts-intruder", ["--owner", "ada"]);
    const intruder = await connectClient(other.endpoint, other.token);
    const refused = await intruder.client.callTool({ name: "resume", arguments: { executionId: paused.executionId } });
    expect(refused.isError).toBe(true);
    expect((refused.structuredContent as any).error).toBe("execution_forbidden");

    await decide(gh, ada, paused.executionId, "accept");
    const second = await connectClient(issued.endpoint, issued.token, "second-session");
    const result = await second.client.callTool({ name: "resume", arguments: { executionId: paused.executionId } });
    expect(result.isError).toBe(false);
    expect((result.structuredContent as any).pattern).toBe("multi");
    await Promise.all([client.close(), second.client.close(), intruder.client.close()]);
  });
});

test.describe("the resume page in chromium", () => {
  test("approve on the page: the state moves to completed live", async ({ page }) => {
    const errors: string[] = [];
    page.on("pageerror", (e) => errors.push(e.message));
    await signInPage(page, "ada");
    const { client, paused } = await pausedCall(gh, "page-agent", { pattern: "page_*", action: "allow" });
    await page.goto(paused.approvalUrl);
    // Other tests' calls may still be pending: the title then starts with their count.
    await expect(page).toHaveTitle(/^(\(\d+\) )?Approve gatehouse_policy_set\? — Gatehouse$/);
    await expect(page.getByRole("heading", { name: "gatehouse_policy_set" })).toBeVisible();
    await expect(page.getByText("page-agent").first()).toBeVisible();
    await expect(page.getByLabel("Arguments")).toContainText('"pattern": "page_*"');
    await expect(page.locator(".countdown")).toHaveText(/^\d+:\d\d$/);
    await expect(page.locator(".live-status")).toHaveText("Live");
    await page.evaluate(() => ((window as any).__noReload = true));

    const resumed = client.callTool({ name: "resume", arguments: { executionId: paused.executionId } });
    await page.getByRole("button", { name: "Approve" }).click();
    await expect(page.getByRole("status")).toContainText("Completed");
    expect((await resumed).isError).toBe(false);
    await page.screenshot({ path: "test-results/resume-completed.png", fullPage: true });
    expect(await page.evaluate(() => (window as any).__noReload)).toBe(true);
    expect(errors).toEqual([]);
    await client.close();
  });

  test("decline on the page, and a decision made elsewhere arrives live", async ({ page }) => {
    await signInPage(page, "ada");
    const first = await pausedCall(gh, "decliner", { pattern: "d1", action: "allow" });
    await page.goto(first.paused.approvalUrl);
    await expect(page.locator(".live-status")).toHaveText("Live");
    await page.getByRole("button", { name: "Decline" }).click();
    await expect(page.getByRole("status")).toContainText("Declined");
    await expect(page.getByRole("status")).toContainText("ada");

    const second = await pausedCall(gh, "decliner", { pattern: "d2", action: "allow" });
    await page.goto(second.paused.approvalUrl);
    await expect(page.locator(".live-status")).toHaveText("Live");
    await page.evaluate(() => ((window as any).__noReload = true));
    expect((await decide(gh, ada, second.paused.executionId, "decline")).status).toBe(200);
    await expect(page.getByRole("status")).toContainText("Declined");
    await expect(page.getByRole("button", { name: "Approve" })).toHaveCount(0);
    expect(await page.evaluate(() => (window as any).__noReload)).toBe(true);
    await Promise.all([first.client.close(), second.client.close()]);
  });

  test("Approve works before hydration (no JavaScript)", async ({ browser }) => {
    const context = await browser.newContext({ javaScriptEnabled: false });
    const page = await context.newPage();
    await signInPage(page, "ada");
    const { client, paused } = await pausedCall(gh, "no-js", { pattern: "nojs", action: "allow" });
    await page.goto(paused.approvalUrl);
    await page.getByRole("button", { name: "Approve" }).click();
    await expect(page).toHaveURL(paused.approvalUrl);
    await expect(page.getByRole("status")).toContainText("Approved");
    const result = await client.callTool({ name: "resume", arguments: { executionId: paused.executionId } });
    expect((result.structuredContent as any).pattern).toBe("nojs");
    await client.close();
    await context.close();
  });

  test("not signed in: sign-in first, then back to the page", async ({ page }) => {
    const { client, paused } = await pausedCall(gh, "redirected", { pattern: "r", action: "allow" });
    await page.goto(paused.approvalUrl);
    await expect(page).toHaveURL(/\/sign-in\?next=%2Fresume%2Fexec_/);
    await page.getByLabel("Username").fill("ada");
    await page.getByLabel("Password").fill(PW);
    await page.getByRole("button", { name: "Sign in" }).click();
    await expect(page).toHaveURL(paused.approvalUrl);
    await expect(page.getByRole("button", { name: "Approve" })).toBeVisible();
    await client.close();
  });

  test("another user gets a 403 page; an unknown execution a 404 page", async ({ page }) => {
    const { client, paused } = await pausedCall(gh, "not-bobs", { pattern: "nb", action: "allow" });
    await signInPage(page, "bob");
    const response = await page.goto(paused.approvalUrl);
    expect(response?.status()).toBe(403);
    await expect(page.getByRole("heading", { name: /403/ })).toBeVisible();
    await expect(page.getByRole("button", { name: "Approve" })).toHaveCount(0);
    const missing = await page.goto(`${gh.url}/resume/exec_does_not_exist`);
    expect(missing?.status()).toBe(404);
    await expect(page.getByRole("heading", { name: /404/ })).toBeVisible();
    await client.close();
  });

  test("hidden characters in arguments are shown visibly", async ({ page }) => {
    await signInPage(page, "ada");
    const sneaky = "safe\u202Etxt.exe\u200B\u200Dend";
    const { client, paused } = await pausedCall(gh, "sneaky", { pattern: sneaky, action: "allow" });
    await page.goto(paused.approvalUrl);
    const args = page.getByLabel("Arguments");
    await expect(args).toContainText("⟨U+202E⟩");
    await expect(args).toContainText("⟨U+200B⟩");
    await expect(args).toContainText("⟨U+200D⟩");
    expect(await args.innerText()).not.toContain("\u202E");
    await expect(page.getByRole("note")).toContainText("3 invisible or direction-changing characters");
    await client.close();
  });

  test("the inbox shows a new pending call without reload, and drops it once decided", async ({ page }) => {
    await signInPage(page, "ada");
    await page.goto(`${gh.url}/approvals`);
    await expect(page.locator(".live-status")).toHaveText("Live");
    await page.evaluate(() => ((window as any).__noReload = true));
    const { client, paused } = await pausedCall(gh, "inbox-agent", { pattern: "inbox", action: "allow" });
    const item = page.getByRole("list", { name: "Pending approvals" }).getByRole("listitem").filter({ hasText: "inbox-agent" });
    await expect(item).toBeVisible();
    await expect(item.getByRole("link", { name: "gatehouse_policy_set" })).toHaveAttribute("href", `/resume/${paused.executionId}`);
    await decide(gh, ada, paused.executionId, "decline");
    await expect(item).toHaveCount(0);
    expect(await page.evaluate(() => (window as any).__noReload)).toBe(true);
    await client.close();
  });
});

test.describe("pending count", () => {
  let fresh: Gatehouse;
  let freshAda: string;
  test.beforeAll(async () => {
    fresh = await spawnGatehouse();
    fresh.addUser("ada", PW, true);
    freshAda = await fresh.signIn("ada", PW);
  });
  test.afterAll(() => fresh.stop());

  test("every page's navigation and tab title count the pending calls live", async ({ page }) => {
    await signInPage(page, "ada", fresh);
    await page.goto(`${fresh.url}/upstreams`);
    await expect(page.locator(".live-status")).toHaveText("Live");
    const count = page.getByRole("navigation", { name: "Main" }).getByTestId("pending-count");
    await expect(count).toHaveCount(0);
    await expect(page).toHaveTitle("Upstreams — Gatehouse");
    const one = await pausedCall(fresh, "count-one", { pattern: "c1", action: "allow" });
    const two = await pausedCall(fresh, "count-two", { pattern: "c2", action: "allow" });
    await expect(count).toHaveText("2");
    await expect(page).toHaveTitle("(2) Upstreams — Gatehouse");
    // On a call's own page too (its stream carries the inbox beside the call).
    await page.goto(`${fresh.url}/resume/${one.paused.executionId}`);
    await expect(count).toHaveText("2");
    await decide(fresh, freshAda, two.paused.executionId, "decline");
    await expect(count).toHaveText("1");
    await expect(page).toHaveTitle(/^\(1\) Approve gatehouse_policy_set\? — Gatehouse$/);
    await decide(fresh, freshAda, one.paused.executionId, "decline");
    await expect(count).toHaveCount(0);
    await expect(page).toHaveTitle(/^gatehouse_policy_set: declined — Gatehouse$/);
    await one.client.close();
    await two.client.close();
  });
});

test.describe("expiry", () => {
  let short: Gatehouse;
  test.beforeAll(async () => {
    short = await spawnGatehouse({ GATEHOUSE_APPROVAL_TTL: "4s" });
    short.addUser("ada", PW, true);
  });
  test.afterAll(() => short.stop());

  test("a pending call expires: the page shows it live and resume says execution_expired", async ({ page }) => {
    await page.goto(`${short.url}/sign-in`);
    await page.getByLabel("Username").fill("ada");
    await page.getByLabel("Password").fill(PW);
    await page.getByRole("button", { name: "Sign in" }).click();
    await expect(page).toHaveURL(`${short.url}/`);
    const { client, paused } = await pausedCall(short, "slow-human", { pattern: "late", action: "allow" });
    await page.goto(paused.approvalUrl);
    await expect(page.getByRole("status")).toContainText("Waiting");
    await expect(page.getByRole("status")).toContainText("Expired", { timeout: 10_000 });
    const result = await client.callTool({ name: "resume", arguments: { executionId: paused.executionId } });
    expect(result.isError).toBe(true);
    expect((result.structuredContent as any).error).toBe("execution_expired");
    expect((result.structuredContent as any).recovery).toBe("re_execute");
    await client.close();
  });
});
