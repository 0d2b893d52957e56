// Browser notifications: a system notification for each call that becomes
// pending while a console page is open (not for what already waited, never
// twice for one call), which opens the call's page when clicked; and the
// "Notify me" button that asks for permission once.
// Headless chromium shows no notifications, so `window.Notification` is
// replaced by a recorder before any page script runs.
import { test, expect, type BrowserContext, type Page } from "@playwright/test";
import { spawnGatehouse, connectClient, signInPage, type Gatehouse } from "./gatehouse";

const PW = "a long enough password";
let gh: Gatehouse;

test.describe.configure({ mode: "serial" });
test.beforeAll(async () => {
  gh = await spawnGatehouse();
  gh.addUser("ada", PW, true);
});
test.afterAll(() => gh.stop());

/** Installs a recording `Notification` whose permission starts as `permission`. */
async function recordNotifications(context: BrowserContext, permission: NotificationPermission) {
  await context.addInitScript((initial) => {
    const w = window as any;
    w.__notes = [];
    w.__asked = 0;
    class RecordingNotification {
      static permission: string = initial;
      static requestPermission() {
        w.__asked += 1;
        RecordingNotification.permission = "granted";
        return Promise.resolve("granted");
      }
      title: string;
      options: any;
      onclick: null | (() => void) = null;
      closed = false;
      constructor(title: string, options?: any) {
        this.title = title;
        this.options = options ?? {};
        w.__notes.push(this);
      }
      close() {
        this.closed = true;
      }
    }
    w.Notification = RecordingNotification;
  }, permission);
}

async function pausedCall(agent: string, pattern: string) {
  const issued = gh.issueToken(agent, ["--owner", "ada"]);
  const { client } = await connectClient(issued.endpoint, issued.token);
  const result = await client.callTool({ name: "gatehouse_policy_set", arguments: { pattern, action: "allow" } });
  const paused = result.structuredContent as { status: string; executionId: string };
  expect(paused.status).toBe("user_approval_required");
  return { client, eid: paused.executionId };
}

const notes = (page: Page) =>
  page.evaluate(() => (window as any).__notes.map((n: any) => ({ title: n.title, body: n.options.body, tag: n.options.tag })));

test("a call that starts waiting raises one notification that opens its page", async ({ browser }) => {
  const context = await browser.newContext({ permissions: ["notifications"] });
  await recordNotifications(context, "granted");
  const page = await context.newPage();
  // Already waiting when the page loads: no notification for it.
  const before = await pausedCall("notify-before", "before_*");
  await signInPage(page, gh, "ada", PW, "/approvals");
  await expect(page.getByTestId("pending-count")).toHaveText("1");
  await expect(page.getByRole("button", { name: "Notify me" })).toHaveCount(0);

  const fresh = await pausedCall("notify-agent", "fresh_*");
  await expect(page.getByTestId("pending-count")).toHaveText("2");
  await page.waitForFunction(() => (window as any).__notes.length > 0);
  let raised = await notes(page);
  expect(raised).toHaveLength(1);
  expect(raised[0].title).toBe("Approve gatehouse_policy_set?");
  expect(raised[0].body).toContain("notify-agent");
  expect(raised[0].body).not.toContain("fresh_"); // never the arguments
  expect(raised[0].tag).toBe(fresh.eid);

  // Another change of the inbox (the older call is declined) raises nothing new.
  const r = await fetch(`${gh.url}/api/executions/${before.eid}/resume`, {
    method: "POST",
    headers: { "content-type": "application/json", origin: gh.url, cookie: await gh.signIn("ada", PW) },
    body: JSON.stringify({ action: "decline" }),
  });
  expect(r.status).toBe(200);
  await expect(page.getByTestId("pending-count")).toHaveText("1");
  raised = await notes(page);
  expect(raised).toHaveLength(1);

  // Clicking it opens the call's page.
  await page.evaluate(() => (window as any).__notes[0].onclick());
  await expect(page).toHaveURL(new RegExp(`/resume/${fresh.eid}(\\?|$)`));
  await expect(page.getByRole("heading", { level: 1 })).toContainText("gatehouse_policy_set");
  await before.client.close();
  await fresh.client.close();
  await context.close();
});

test("the header asks for permission only when clicked, and only while undecided", async ({ browser }) => {
  const context = await browser.newContext();
  await recordNotifications(context, "default");
  const page = await context.newPage();
  await signInPage(page, gh, "ada", PW, "/approvals");
  await expect(page.locator(".live-status")).toHaveAttribute("data-state", "live"); // hydrated
  const button = page.getByRole("button", { name: "Notify me" });
  await expect(button).toBeVisible();
  expect(await page.evaluate(() => (window as any).__asked)).toBe(0); // no prompt without a click
  await button.click();
  await expect(button).toHaveCount(0);
  expect(await page.evaluate(() => (window as any).__asked)).toBe(1);

  const denied = await browser.newContext();
  await recordNotifications(denied, "denied");
  const other = await denied.newPage();
  await signInPage(other, gh, "ada", PW, "/approvals");
  await expect(other.locator(".live-status")).toHaveAttribute("data-state", "live"); // hydrated
  await expect(other.getByRole("button", { name: "Notify me" })).toHaveCount(0);
  await context.close();
  await denied.close();
});

test("a long backlog lists the soonest to expire, counts them all, and one notification tells of calls beyond the list", async ({
  browser,
}) => {
  const context = await browser.newContext({ permissions: ["notifications"] });
  await recordNotifications(context, "granted");
  const page = await context.newPage();
  await signInPage(page, gh, "ada", PW, "/approvals");
  await expect(page.locator(".live-status")).toHaveAttribute("data-state", "live"); // hydrated
  // 51 calls wait (what earlier tests left, and up to 17 per agent: under
  // the per-credential limit): one more than an inbox lists.
  const start = Number((await page.getByTestId("pending-count").textContent({ timeout: 1000 }).catch(() => "0")) || "0");
  const clients = [];
  for (let left = 51 - start, n = 0; left > 0; n++) {
    const agent = `backlog-${n}`;
    const issued = gh.issueToken(agent, ["--owner", "ada"]);
    const { client } = await connectClient(issued.endpoint, issued.token);
    clients.push(client);
    for (let i = 0; i < 17 && left > 0; i++, left--) {
      const result = await client.callTool({ name: "gatehouse_policy_set", arguments: { pattern: `${agent}_${i}`, action: "allow" } });
      expect((result.structuredContent as { status: string }).status).toBe("user_approval_required");
    }
  }
  await page.reload(); // what waits now is no news to the page
  await expect(page.getByTestId("pending-count")).toHaveText("51");
  await expect(page.getByTestId("inbox-more")).toContainText("Showing the 50 that expire soonest of 51 waiting");
  await expect(page.locator("ul.cards > li")).toHaveCount(50);

  // One more while another page is open: it expires last, so no list has
  // it; it is counted, and one notification says how many wait, opening
  // the inbox.
  await page.goto(`${gh.url}/history`);
  await expect(page.locator(".live-status")).toHaveAttribute("data-state", "live"); // hydrated
  await expect(page.getByTestId("pending-count")).toHaveText("51");
  const late = await pausedCall("backlog-late", "late_*");
  await expect(page.getByTestId("pending-count")).toHaveText("52");
  await page.waitForFunction(() => (window as any).__notes.length > 0);
  expect(await notes(page)).toEqual([
    { title: "New calls to approve", body: "52 calls are waiting for your decision", tag: "gatehouse-backlog" },
  ]);
  await page.evaluate(() => (window as any).__notes[0].onclick());
  await expect(page).toHaveURL(/\/approvals$/);
  await expect(page.getByTestId("inbox-more")).toContainText("of 52 waiting");
  await expect(page.locator(`li[data-execution-id="${late.eid}"]`)).toHaveCount(0);
  await context.close();
  for (const client of [...clients, late.client]) await client.close();
});

test("on a call's own page, the header counts a new call live and a notification tells of it", async ({ browser }) => {
  const context = await browser.newContext({ permissions: ["notifications"] });
  await recordNotifications(context, "granted");
  const page = await context.newPage();
  const shown = await pausedCall("own-page-shown", "shown_*");
  await signInPage(page, gh, "ada", PW, `/resume/${shown.eid}`);
  await expect(page.locator(".live-status")).toHaveAttribute("data-state", "live"); // hydrated
  const start = Number(await page.getByTestId("pending-count").textContent());
  const other = await pausedCall("own-page-other", "other_*");
  await expect(page.getByTestId("pending-count")).toHaveText(String(start + 1));
  await page.waitForFunction(() => (window as any).__notes.length > 0);
  // Beyond the inbox's list (earlier tests left a backlog) the one
  // notification counts; within it, it names the call.
  expect(await notes(page)).toEqual([
    start + 1 > 50
      ? { title: "New calls to approve", body: `${start + 1} calls are waiting for your decision`, tag: "gatehouse-backlog" }
      : { title: "Approve gatehouse_policy_set?", body: "own-page-other (owner ada) wants to run gatehouse_policy_set", tag: other.eid },
  ]);
  await page.getByRole("link", { name: /Approvals/ }).click();
  await expect(page).toHaveURL(/\/approvals$/);
  await expect(page.locator("ul.cards > li")).toHaveCount(Math.min(start + 1, 50));
  await context.close();
  await shown.client.close();
  await other.client.close();
});
