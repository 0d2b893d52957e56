// Browser notifications: a system notification for each call that becomes
// pending while a console page is open (not for what already waited, never
// twice for one call), which opens the call's page when clicked; and the
// "Turn on notifications" button that asks for permission once.
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
  await expect(page.getByRole("button", { name: "Turn on notifications" })).toHaveCount(0);

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
  const button = page.getByRole("button", { name: "Turn on notifications" });
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
  await expect(other.getByRole("button", { name: "Turn on notifications" })).toHaveCount(0);
  await context.close();
  await denied.close();
});
