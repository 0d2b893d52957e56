// The approvals page and a call's page on a phone (touch, no hover): the
// server's page made live by a small inline script, without the console's
// wasm. Calls appear and go live, what the person typed survives a live
// change, and Approve, Decline and approving several work as plain forms.
import { test, expect, type Page, type Request } from "@playwright/test";
import { spawnGatehouse, connectClient, type Gatehouse } from "./gatehouse";

const PW = "a long enough password";
let gh: Gatehouse;
let cookie: string;

test.describe.configure({ mode: "serial" });
test.use({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });

test.beforeAll(async () => {
  gh = await spawnGatehouse();
  gh.addUser("ada", PW, true);
  cookie = await gh.signIn("ada", PW);
});
test.afterAll(() => gh.stop());

async function paused(agent: string, pattern: string): Promise<string> {
  const issued = gh.issueToken(agent, ["--owner", "ada"]);
  const { client } = await connectClient(issued.endpoint, issued.token);
  const result = await client.callTool({ name: "gatehouse_policy_set", arguments: { pattern, action: "allow" } });
  const content = result.structuredContent as { status: string; executionId: string };
  expect(content.status).toBe("user_approval_required");
  return content.executionId;
}

/// A phone's page, signed in as ada; every request it makes is kept.
async function phone(page: Page): Promise<Request[]> {
  const [name, value] = cookie.split("=");
  await page.context().addCookies([{ name, value, url: gh.url }]);
  const requests: Request[] = [];
  page.on("request", (r) => requests.push(r));
  return requests;
}

const wasm = (requests: Request[]) => requests.filter((r) => /\/pkg\/.*\.(wasm|js)$/.test(r.url()));

test("the approvals page is live on a phone without the wasm, and a typed reason survives", async ({ page }) => {
  const requests = await phone(page);
  const first = await paused("phone-one", "one_*");
  await page.goto(`${gh.url}/approvals`);
  await expect(page.locator("html")).toHaveAttribute("data-light", "");
  await expect(page.locator(".live-status")).toHaveText("Live");
  await expect(page.locator(`[data-execution-id="${first}"]`)).toBeVisible();
  await page.evaluate(() => ((window as unknown as { __noReload: boolean }).__noReload = true));

  // Typed and ticked while a new call arrives: both kept, and the page was not reloaded.
  await page.getByLabel(/Reason for the selected/).fill("not on a Friday");
  await page.locator(`[data-execution-id="${first}"] input[type=checkbox]`).check();
  const second = await paused("phone-two", "two_*");
  await expect(page.locator(`[data-execution-id="${second}"]`)).toBeVisible();
  await expect(page.getByLabel(/Reason for the selected/)).toHaveValue("not on a Friday");
  await expect(page.locator(`[data-execution-id="${first}"] input[type=checkbox]`)).toBeChecked();
  expect(await page.evaluate(() => (window as unknown as { __noReload?: boolean }).__noReload)).toBe(true);
  await expect(page).toHaveTitle("(2) Approvals — Gatehouse");
  await expect(page.getByTestId("pending-count")).toHaveText("2");

  // Approve on a card is a plain form: the call is decided and gone.
  await page.locator(`[data-execution-id="${first}"]`).getByRole("button", { name: "Approve" }).click();
  await expect(page.locator(`[data-execution-id="${first}"]`)).toHaveCount(0);
  await expect(page.locator(".live-status")).toHaveText("Live");
  expect(wasm(requests)).toEqual([]);
});

test("approving several asks first, naming the tools, then approves exactly those", async ({ page }) => {
  const requests = await phone(page);
  const a = await paused("phone-three", "three_*");
  const b = await paused("phone-four", "four_*");
  await page.goto(`${gh.url}/approvals`);
  await expect(page.locator(".live-status")).toHaveText("Live");
  const tick = async () => {
    for (const id of [a, b]) await page.locator(`[data-execution-id="${id}"] input[type=checkbox]`).check();
  };
  // The server draws the confirmation; Cancel decides nothing.
  await tick();
  await page.getByRole("button", { name: "Approve selected…" }).click();
  const asked = page.getByTestId("confirm-bulk");
  await expect(asked.getByRole("heading")).toHaveText("Approve 2 calls?");
  await expect(asked).toContainText("gatehouse_policy_set (×2)");
  await asked.getByRole("link", { name: "Cancel" }).click();
  await expect(page.getByTestId("confirm-bulk")).toHaveCount(0);
  await expect(page.locator(`[data-execution-id="${a}"]`)).toBeVisible();
  // Confirmed: both are decided, and the page is the list again.
  await tick();
  await page.getByRole("button", { name: "Approve selected…" }).click();
  await page.getByTestId("confirm-bulk").getByRole("button", { name: "Approve 2 calls" }).click();
  await expect(page).toHaveURL(`${gh.url}/approvals`);
  await expect(page.locator(`[data-execution-id="${a}"], [data-execution-id="${b}"]`)).toHaveCount(0);
  const state = await fetch(`${gh.url}/api/executions/${a}`, { headers: { cookie } }).then((r) => r.json());
  expect(["approved", "running", "completed"]).toContain(state.state);
  expect(wasm(requests)).toEqual([]);
});

test("a call's page on a phone: live, a decline with its reason, no wasm", async ({ page }) => {
  const requests = await phone(page);
  const eid = await paused("phone-five", "five_*");
  await page.goto(`${gh.url}/resume/${eid}`);
  await expect(page.locator("html")).toHaveAttribute("data-light", "");
  await expect(page.locator(".live-status")).toHaveText("Live");
  await expect(page.locator("p.state")).toHaveAttribute("data-state", "pending");
  await page.getByLabel(/Reason for declining/).fill("use the staging box");
  await page.getByRole("button", { name: "Decline", exact: true }).click();
  await expect(page.locator("p.state")).toHaveAttribute("data-state", "declined");
  const state = await fetch(`${gh.url}/api/executions/${eid}`, { headers: { cookie } }).then((r) => r.json());
  expect(state.state).toBe("declined");

  // Decided elsewhere: the page hears it live, without a reload.
  const other = await paused("phone-six", "six_*");
  await page.goto(`${gh.url}/resume/${other}`);
  await expect(page.locator(".live-status")).toHaveText("Live");
  await page.evaluate(() => ((window as unknown as { __noReload: boolean }).__noReload = true));
  const decided = await fetch(`${gh.url}/api/executions/${other}/resume`, {
    method: "POST",
    headers: { "content-type": "application/json", origin: gh.url, cookie },
    body: JSON.stringify({ action: "accept" }),
  });
  expect(decided.status).toBe(200);
  await expect(page.locator("p.state")).not.toHaveAttribute("data-state", "pending");
  expect(await page.evaluate(() => (window as unknown as { __noReload?: boolean }).__noReload)).toBe(true);
  expect(wasm(requests)).toEqual([]);
});

test("a desktop gets the whole console on the same pages", async ({ browser }) => {
  // (A new context takes the file's phone options unless told otherwise.)
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, isMobile: false, hasTouch: false });
  const [name, value] = cookie.split("=");
  await context.addCookies([{ name, value, url: gh.url }]);
  const page = await context.newPage();
  const loaded: string[] = [];
  page.on("request", (r) => loaded.push(r.url()));
  await page.goto(`${gh.url}/approvals`);
  await expect(page.locator(".live-status")).toHaveText("Live");
  expect(loaded.some((u) => u.endsWith(".wasm"))).toBe(true);
  await expect(page.locator("html")).not.toHaveAttribute("data-light", "");
  // Hydrated: the keyboard help opens.
  await page.keyboard.press("?");
  await expect(page.getByTestId("keys-help")).toBeVisible();
  await context.close();
});

test("the clocks tick on a phone: a call's time left and a card's wait", async ({ page }) => {
  await phone(page);
  await page.clock.install();
  const eid = await paused("phone-seven", "seven_*");
  const seconds = (text: string) => text.split(":").reduce((sum, part) => sum * 60 + Number(part), 0);

  await page.goto(`${gh.url}/resume/${eid}`);
  await expect(page.locator(".live-status")).toHaveText("Live");
  const left = page.locator("time.countdown");
  await expect(left).toHaveText(/^\d+:\d\d$/);
  const before = seconds(await left.innerText());
  await page.clock.fastForward(125_000);
  await expect.poll(async () => before - seconds(await left.innerText())).toBeGreaterThanOrEqual(124);
  expect(before - seconds(await left.innerText())).toBeLessThanOrEqual(130);

  await page.goto(`${gh.url}/approvals`);
  const waited = page.locator(`[data-execution-id="${eid}"]`).getByTestId("waited");
  await expect(waited).toHaveText(/^\d+ seconds?$/);
  await page.clock.fastForward(600_000);
  await expect(waited).toHaveText(/^1[01] minutes$/);
});
