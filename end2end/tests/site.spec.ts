// The console in Debian chromium: first-run setup, sign-in, and the home page
// hydrating and showing MCP sessions arrive live.
import { test, expect, type Page } from "@playwright/test";
import { spawnGatehouse, connectClient, type Gatehouse } from "./gatehouse";

const ADMIN = { username: "admin", password: "a long admin password" };
let gh: Gatehouse;

test.beforeAll(async () => {
  gh = await spawnGatehouse();
});
test.afterAll(() => gh.stop());

async function signIn(page: Page) {
  await page.goto(`${gh.url}/sign-in`);
  await page.getByLabel("Username").fill(ADMIN.username);
  await page.getByLabel("Password").fill(ADMIN.password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("heading", { name: "At a glance" })).toBeVisible();
}

/** On the sign-in page: a wrong password is refused, the name typed is
 *  kept and the address does not carry the refusal; said once (a reload,
 *  or Back later, shows nothing stale); then the right password signs in. */
async function refusedOnceThenSignIn(page: Page) {
  await page.getByLabel("Username").fill(ADMIN.username);
  await page.getByLabel("Password").fill("wrong password");
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("alert")).toHaveText("That name and password did not match.");
  await expect(page.getByLabel("Username")).toHaveValue(ADMIN.username);
  await expect(page).toHaveURL(/\/sign-in\?next=[^&]*$/);
  await page.reload();
  await expect(page.getByRole("button", { name: "Sign in" })).toBeVisible();
  await expect(page.getByRole("alert")).toHaveCount(0);
  await page.getByLabel("Username").fill(ADMIN.username);
  await page.getByLabel("Password").fill(ADMIN.password);
  await page.getByRole("button", { name: "Sign in" }).click();
}

test.describe.configure({ mode: "serial" });

test("the setup link creates the admin and signs them in", async ({ page }) => {
  expect(gh.setupLink).toContain("/setup?token=");
  await page.goto(gh.setupLink);
  await expect(page).toHaveTitle("Set up — Gatehouse");
  await page.getByLabel("Admin username").fill(ADMIN.username);
  await page.getByLabel(/^Password/).fill(ADMIN.password);
  await page.getByRole("button", { name: "Create admin" }).click();
  await expect(page).toHaveURL(`${gh.url}/`);
  await expect(page.getByRole("heading", { name: "At a glance" })).toBeVisible();

  // The link works once.
  await page.context().clearCookies();
  await page.goto(gh.setupLink);
  await page.getByLabel("Admin username").fill("second");
  await page.getByLabel(/^Password/).fill("another long password");
  await page.getByRole("button", { name: "Create admin" }).click();
  await expect(page.getByRole("alert")).toContainText("no longer valid");
});

test("an unauthenticated visit goes to sign-in and comes back after", async ({ page }) => {
  await page.goto(`${gh.url}/?from=test`);
  await expect(page).toHaveURL(/\/sign-in\?next=/);
  await refusedOnceThenSignIn(page);
  await expect(page).toHaveURL(`${gh.url}/?from=test`);
});

test("the home page hydrates and shows a new MCP session without reload", async ({ page }) => {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  await signIn(page);
  // Hydrated and subscribed: the live status line only says "Live" once the
  // wasm has taken over and the SSE stream is open.
  await expect(page.locator(".live-status")).toHaveText("Live");
  await expect(page.getByText("No agent is connected.")).toBeVisible();
  // The first-run checklist: nothing minted, nothing connected yet.
  const checklist = page.getByTestId("checklist");
  await expect(checklist.locator('li[data-done="false"]')).toHaveCount(4);
  await page.evaluate(() => ((window as any).__noReload = true));

  const issued = gh.issueToken("playwright-agent", ["--thread", "pw-1", "--owner", ADMIN.username]);
  const { client, transport } = await connectClient(issued.endpoint, issued.token, "pw-client");
  const sessions = page.getByRole("list", { name: "Connected agents" });
  const card = sessions.getByRole("listitem").filter({ hasText: "playwright-agent" });
  await expect(card).toBeVisible();
  await expect(card).toContainText("pw-client");
  await expect(card).toContainText("1 session");
  // A second session of the same agent is counted on its card, not drawn
  // as another card; no raw session id is shown.
  const second = await connectClient(issued.endpoint, issued.token, "pw-client");
  await expect(card).toContainText("2 sessions");
  await expect(sessions.getByRole("listitem")).toHaveCount(1);
  await expect(card).not.toContainText(transport.sessionId!);
  await second.transport.terminateSession();
  await second.client.close();
  await expect(card).toContainText("1 session");
  // Minting and connecting tick their steps, live; the others wait.
  await expect(checklist.getByRole("listitem").nth(0)).toHaveAttribute("data-done", "true");
  await expect(checklist.getByRole("listitem").nth(1)).toHaveAttribute("data-done", "true");
  await expect(checklist.getByRole("listitem").nth(1)).toContainText("Connected: playwright-agent");
  await expect(checklist.locator('li[data-done="false"]')).toHaveCount(2);
  expect(await page.evaluate(() => (window as any).__noReload)).toBe(true);

  // Ending the session removes it live too.
  await transport.terminateSession();
  await client.close();
  await expect(card).toHaveCount(0);
  expect(await page.evaluate(() => (window as any).__noReload)).toBe(true);
  expect(errors, "no hydration or script errors").toEqual([]);
});

test("without JavaScript, a refused sign-in keeps the name and says why, once", async ({ browser }) => {
  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  await page.goto(`${gh.url}/sign-in`);
  await refusedOnceThenSignIn(page);
  await expect(page.getByRole("heading", { name: "At a glance" })).toBeVisible();
  await context.close();
});

test("pages cannot be framed and sign-out ends the session", async ({ page }) => {
  await signIn(page);
  const response = await page.request.get(`${gh.url}/`);
  expect(response.headers()["x-frame-options"]).toBe("DENY");
  expect(response.headers()["content-security-policy"]).toContain("frame-ancestors 'none'");
  await page.getByRole("button", { name: "Sign out" }).click();
  await expect(page).toHaveURL(/\/sign-in/);
  await page.goto(`${gh.url}/`);
  await expect(page).toHaveURL(/\/sign-in\?next=/);
});
