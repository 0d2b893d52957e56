// Scoped grants and decline reasons end to end: the TypeScript SDK client
// makes a gated call, a person allows the tool for the agent on the resume
// page, the next identical call runs without a pause, the grant is revoked
// on /grants and the next call waits again. A reason typed when declining
// reaches the client's result. Screenshots of both pages, light and dark.
import { test, expect, type Page } from "@playwright/test";
import AxeBuilder from "@axe-core/playwright";
import { join } from "node:path";
import { spawnGatehouse, connectClient, root, signInPage, type Gatehouse } from "./gatehouse";

const PW = "a long enough password";
const TOOL = "ev__test_simple_text";
const shots = join(root, "end2end", "test-results", "screenshots");
let gh: Gatehouse;

test.describe.configure({ mode: "serial" });

test.beforeAll(async () => {
  const node = join(root, "tools", "node_modules", ".bin", "node");
  const fixture = join(root, "end2end", "fixtures", "everything_server.mjs");
  gh = await spawnGatehouse(
    {},
    `[[upstream]]\nname = "everything"\nprefix = "ev__"\ncommand = ${JSON.stringify(node)}\nargs = [${JSON.stringify(fixture)}, "--stdio"]\n`,
  );
  gh.addUser("carol", PW);
});
test.afterAll(() => gh.stop());

type Paused = { status: string; executionId: string; approvalUrl: string };

async function waitForTool(client: Awaited<ReturnType<typeof connectClient>>["client"]) {
  for (let i = 0; i < 100; i++) {
    const { tools } = await client.listTools();
    if (tools.some((t) => t.name === TOOL)) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${TOOL} never appeared`);
}

/** Fails on any serious or critical accessibility violation, as console.spec.ts does. */
async function axe(page: Page) {
  const scan = await new AxeBuilder({ page }).analyze();
  const bad = scan.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
  expect(bad.map((v) => `${v.id}: ${v.nodes.map((n) => n.target).join(", ")}`)).toEqual([]);
}

async function shoot(page: Page, name: string) {
  for (const scheme of ["light", "dark"] as const) {
    await page.emulateMedia({ colorScheme: scheme });
    for (const [w, h] of [[390, 844], [1280, 800]]) {
      await page.setViewportSize({ width: w, height: h });
      await page.screenshot({ path: join(shots, `${name}-${w}-${scheme}.png`), fullPage: true });
    }
  }
  await page.emulateMedia({ colorScheme: "light" });
  await page.setViewportSize({ width: 1280, height: 800 });
}

test("grant on the resume page: the next call runs at once; revoked on /grants, it waits again", async ({ page }) => {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  const issued = gh.issueToken("grantee", ["--owner", "carol"]);
  const { client } = await connectClient(issued.endpoint, issued.token);
  await waitForTool(client);
  const args = { path: "/tmp/report.txt", mode: "w" };

  const first = await client.callTool({ name: TOOL, arguments: args });
  const paused = first.structuredContent as Paused;
  expect(paused.status).toBe("user_approval_required");

  await signInPage(page, gh, "carol", PW, new URL(paused.approvalUrl).pathname + new URL(paused.approvalUrl).search);
  await expect(page.locator(".live-status")).toHaveText("Live");
  // One note per approval: opening the grant panel carries what was typed
  // into its own field, and the note above goes out of sight.
  const notes = page.getByLabel("Note on approving (optional)").filter({ visible: true });
  await notes.fill("weekly report");
  await page.getByText("Allow this tool for this agent…").click();
  await expect(notes).toHaveCount(1);
  await expect(notes).toHaveValue("weekly report");
  await page.getByLabel("8 hours").check();
  await page.getByLabel("or path starts with").fill("/tmp/");
  await shoot(page, "resume-grant");
  await axe(page);
  await page.evaluate(() => ((window as any).__noReload = true));
  const resumed = client.callTool({ name: "resume", arguments: { executionId: paused.executionId } });
  await page.getByRole("button", { name: "Approve and allow" }).click();
  await expect(page.getByRole("status")).toContainText(/Approved|Running|Completed/);
  expect((await resumed).isError).toBeFalsy();
  expect(await page.evaluate(() => (window as any).__noReload)).toBe(true);
  await expect(page.locator(".timeline")).toContainText("weekly report");

  // The next identical call runs without a pause; one outside /tmp/ waits.
  const again = await client.callTool({ name: TOOL, arguments: { ...args, path: "/tmp/other.txt" } });
  expect(again.structuredContent).toBeUndefined();
  expect(JSON.stringify(again.content)).toContain("simple text response");
  const outside = await client.callTool({ name: TOOL, arguments: { ...args, path: "/etc/passwd" } });
  expect((outside.structuredContent as Paused).status).toBe("user_approval_required");

  // The console lists it with its use; revoking it works at once.
  await page.goto(`${gh.url}/grants`);
  const row = page.locator("tr[data-tool='ev__test_simple_text']");
  await expect(row).toContainText("grantee");
  await expect(row).toContainText('path starts with "/tmp/"');
  await expect(row.locator(".uses")).toHaveText("1");
  await shoot(page, "grants");
  await axe(page);
  await row.getByRole("button", { name: /Revoke the grant/ }).click();
  await expect(page.getByText("No grants.")).toBeVisible();
  const after = await client.callTool({ name: TOOL, arguments: args });
  expect((after.structuredContent as Paused).status).toBe("user_approval_required");
  expect(errors).toEqual([]);
  await client.close();
});

test("a suggested grant accepted: after three approvals alike, one tap approves and allows the like", async ({ page }) => {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  const issued = gh.issueToken("suggestee", ["--owner", "carol"]);
  const { client } = await connectClient(issued.endpoint, issued.token);
  await waitForTool(client);
  const pause = async (path: string) => {
    const r = await client.callTool({ name: TOOL, arguments: { path } });
    const paused = r.structuredContent as Paused;
    expect(paused.status).toBe("user_approval_required");
    const url = new URL(paused.approvalUrl);
    return url.pathname + url.search;
  };
  let signedIn = false;
  for (const path of ["/tmp/build/a.o", "/tmp/build/lib/b.o", "/tmp/build/c.o"]) {
    const at = await pause(path);
    if (!signedIn) {
      await signInPage(page, gh, "carol", PW, at);
      signedIn = true;
    } else {
      await page.goto(`${gh.url}${at}`);
    }
    await expect(page.getByTestId("suggestion")).toHaveCount(0);
    await page.getByRole("button", { name: "Approve", exact: true }).click();
    await expect(page.getByRole("status")).toContainText(/Approved/);
  }

  await page.goto(`${gh.url}${await pause("/tmp/build/d.o")}`);
  const offer = page.getByTestId("suggestion");
  await expect(offer).toContainText("approved 3 times in the last 7 days");
  await expect(offer).toContainText("for 8 hours");
  await expect(offer).toContainText("/tmp/build/");
  await expect(page.locator(".live-status")).toHaveText("Live");
  await shoot(page, "resume-suggestion");
  await axe(page);
  await offer.getByRole("button", { name: "Approve and allow" }).click();
  await expect(page.getByRole("status")).toContainText(/Approved|Running|Completed/);

  // Under /tmp/build/ the next call runs at once; elsewhere it still asks.
  const inside = await client.callTool({ name: TOOL, arguments: { path: "/tmp/build/sub/e.o" } });
  expect(inside.structuredContent).toBeUndefined();
  expect(JSON.stringify(inside.content)).toContain("simple text response");
  await pause("/tmp/elsewhere.o");
  await page.goto(`${gh.url}/grants`);
  await expect(page.locator("tr[data-tool='ev__test_simple_text']").filter({ hasText: "suggestee" })).toContainText(
    'path starts with "/tmp/build/"',
  );
  expect(errors).toEqual([]);
  await client.close();
});

test("a reason typed when declining reaches the TypeScript SDK client", async ({ page }) => {
  const issued = gh.issueToken("decline-reader", ["--owner", "carol"]);
  const { client } = await connectClient(issued.endpoint, issued.token);
  await waitForTool(client);
  const paused = (await client.callTool({ name: TOOL, arguments: { path: "/srv/data" } })).structuredContent as Paused;
  await signInPage(page, gh, "carol", PW, "/");
  await page.goto(paused.approvalUrl);
  await expect(page.locator(".live-status")).toHaveText("Live");
  const reason = "Not in /srv: write under /tmp instead";
  await page.getByLabel("Reason for declining").fill(reason);
  await page.getByRole("button", { name: "Decline" }).click();
  await expect(page.getByRole("status")).toContainText("Declined");
  await expect(page.locator(".timeline")).toContainText(reason);
  const result = await client.callTool({ name: "resume", arguments: { executionId: paused.executionId } });
  expect(result.isError).toBe(true);
  const structured = result.structuredContent as { error: string; reason: string };
  expect(structured.error).toBe("execution_declined");
  expect(structured.reason).toBe(reason);
  expect(JSON.stringify(result.content)).toContain(reason);
  await client.close();
});

test("grant and decline with a reason work without JavaScript", async ({ browser }) => {
  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  const issued = gh.issueToken("no-js-grantee", ["--owner", "carol"]);
  const { client } = await connectClient(issued.endpoint, issued.token);
  await waitForTool(client);
  await signInPage(page, gh, "carol", PW, "/");

  const declined = (await client.callTool({ name: TOOL, arguments: { path: "/a" } })).structuredContent as Paused;
  await page.goto(declined.approvalUrl);
  await page.getByLabel("Reason for declining").fill("no JS, still heard");
  await page.getByRole("button", { name: "Decline" }).click();
  await expect(page.getByRole("status")).toContainText("Declined");
  const answer = await client.callTool({ name: "resume", arguments: { executionId: declined.executionId } });
  expect((answer.structuredContent as any).reason).toBe("no JS, still heard");

  const paused = (await client.callTool({ name: TOOL, arguments: { path: "/b" } })).structuredContent as Paused;
  await page.goto(paused.approvalUrl);
  await page.getByText("Allow this tool for this agent…").click();
  await page.getByLabel("1 hour").check();
  await page.getByRole("checkbox", { name: /path is exactly/ }).check();
  await page.getByRole("button", { name: "Approve and allow" }).click();
  await expect(page.getByRole("status")).toContainText("Approved");
  await client.callTool({ name: "resume", arguments: { executionId: paused.executionId } });
  const again = await client.callTool({ name: TOOL, arguments: { path: "/b" } });
  expect(again.structuredContent).toBeUndefined();
  const other = await client.callTool({ name: TOOL, arguments: { path: "/c" } });
  expect((other.structuredContent as Paused).status).toBe("user_approval_required");
  await client.close();
  await context.close();
});
