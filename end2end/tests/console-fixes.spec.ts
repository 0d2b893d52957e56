// What a new self-hoster hit in the first hour, fixed: the theme is theirs
// to choose and stays chosen; the header says who is signed in on every page
// and on a not-found page; a refused form keeps what was typed and says why
// in a plain sentence, and a later success clears it; the tools page finds a
// tool; on a phone, with "Allow this tool…" open, only its own button
// approves; an invite link's expiry is a date.
import { test, expect } from "@playwright/test";
import { join } from "node:path";
import { spawnGatehouse, connectClient, signInPage, root, type Gatehouse } from "./gatehouse";

const PW = "a long enough password";
let gh: Gatehouse;

test.beforeAll(async () => {
  gh = await spawnGatehouse();
  gh.addUser("ada", PW, true);
});
test.afterAll(() => gh.stop());

test("the theme is chosen in the header and kept across pages and reloads", async ({ page }) => {
  await signInPage(page, gh, "ada", PW, "/agents");
  const html = page.locator("html");
  const background = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  await expect(html).toHaveAttribute("data-theme", "system");
  await page.getByRole("button", { name: "Dark" }).click();
  await expect(page).toHaveURL(`${gh.url}/agents`);
  await expect(html).toHaveAttribute("data-theme", "dark");
  expect(await background()).toBe("rgb(20, 24, 23)");
  await expect(page.getByRole("button", { name: "Dark" })).toHaveAttribute("aria-pressed", "true");
  await page.goto(`${gh.url}/history`);
  await expect(html).toHaveAttribute("data-theme", "dark");
  await page.getByRole("button", { name: "Light" }).click();
  await expect(html).toHaveAttribute("data-theme", "light");
  expect(await background()).toBe("rgb(246, 244, 239)");
  await page.getByRole("button", { name: "System" }).click();
  await expect(html).toHaveAttribute("data-theme", "system");
});

test("the header names who is signed in everywhere, a not-found page included", async ({ page }) => {
  await signInPage(page, gh, "ada", PW, "/tools");
  await expect(page.getByTestId("signed-in-as")).toHaveText("ada");
  const missing = await page.goto(`${gh.url}/no-such-page`);
  expect(missing?.status()).toBe(404);
  await expect(page.getByRole("heading", { name: "Not found" })).toBeVisible();
  await expect(page.getByRole("navigation", { name: "Main" })).toBeVisible();
  await expect(page.getByTestId("signed-in-as")).toHaveText("ada");
  await page.goto(`${gh.url}/resume/exec_nope`);
  await expect(page.getByRole("heading", { name: "404 — no such call" })).toBeVisible();
  await expect(page.getByText("may be from before a restart")).toHaveCount(0);
  await expect(page.getByTestId("signed-in-as")).toHaveText("ada");
});

test("a refused form keeps what was typed and says why plainly; a success clears it", async ({ page }) => {
  await signInPage(page, gh, "ada", PW, "/policies");
  await expect(page.locator(".live-status")).toHaveText("Live");
  await page.getByLabel("Pattern").fill("keep_*");
  await page.getByText("Only some calls").click();
  await page.getByLabel("When (CEL)").fill("args.branch ==");
  await page.locator("#rule-rate").fill("often");
  await page.getByRole("button", { name: "Save rule" }).click();
  // Every bad field is marked beside it, in words, once; the condition's
  // line is shown with a mark under where it went wrong; what was typed stays.
  await expect(page.getByTestId("when-error")).toHaveText("Line 1, column 15: it ends too soon.");
  // The mark sits under column 15, just past the condition's end (exact text: toHaveText would fold the spaces).
  await expect(page.getByTestId("when-position")).toBeVisible();
  expect(await page.getByTestId("when-position").textContent()).toBe("args.branch ==\n" + " ".repeat(14) + "^");
  await expect(page.locator('.field-error[data-field="rate"]')).toContainText("often");
  await expect(page.getByText("it ends too soon")).toHaveCount(1);
  await expect(page.getByTestId("outcome")).toHaveText("Not saved: the 2 marked fields need a change.");
  await expect(page.getByTestId("preview-error")).toHaveCount(0);
  await expect(page.getByText("error running server function")).toHaveCount(0);
  await expect(page.getByLabel("Pattern")).toHaveValue("keep_*");
  await expect(page.getByLabel("When (CEL)")).toHaveValue("args.branch ==");
  for (const scheme of ["light", "dark"] as const) {
    await page.emulateMedia({ colorScheme: scheme });
    for (const [w, h] of [[390, 844], [1280, 800]]) {
      await page.setViewportSize({ width: w, height: h });
      await page.screenshot({ path: join(root, "end2end", "test-results", "screenshots", `rule-errors-${w}-${scheme}.png`), fullPage: true });
    }
  }
  await page.emulateMedia({ colorScheme: "light" });
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.locator("#rule-rate").fill("");

  await page.getByLabel("When (CEL)").fill('args.branch == "main"');
  await page.getByRole("button", { name: "Save rule" }).click();
  await expect(page.getByTestId("outcome")).toHaveText("Rule saved.");
  await expect(page.getByTestId("when-error")).toHaveCount(0);
  await expect(page.getByRole("table", { name: "Rules" }).getByRole("row").filter({ hasText: "keep_*" })).toBeVisible();
});

test("the editor warns when a condition compares a path or URL as text, and names the function to use", async ({ page, browser }) => {
  await signInPage(page, gh, "ada", PW, "/policies");
  await expect(page.locator(".live-status")).toHaveText("Live");
  await page.getByLabel("Pattern").fill("fs_*");
  await page.getByText("Only some calls").click();
  await page.getByLabel("When (CEL)").fill('args.path.startsWith("/srv/prod/")');
  await expect(page.getByTestId("when-warning")).toContainText('path_under(args.path, "/srv/prod/")');
  await page.getByLabel("When (CEL)").fill('path_under(args.path, "/srv/prod/")');
  await expect(page.getByTestId("when-warning")).toHaveCount(0);

  // Without JavaScript: Preview submits the form and the page says it.
  const context = await browser.newContext({ javaScriptEnabled: false });
  const noJs = await context.newPage();
  await noJs.context().addCookies(await page.context().cookies());
  const when = encodeURIComponent('args.url.contains("https://evil.example")');
  await noJs.goto(`${gh.url}/policies?pattern=fs_*&action=block&when=${when}`);
  await expect(noJs.getByTestId("when-warning")).toContainText('url_under(args.url, "https://evil.example")');
  await context.close();
});

test("the tools page finds a tool by name and by gate", async ({ page }) => {
  await signInPage(page, gh, "ada", PW, "/tools");
  await expect(page.locator(".live-status")).toHaveText("Live");
  const rows = page.getByRole("table", { name: "Exposed tools" }).locator("tbody tr");
  const all = await rows.count();
  expect(all).toBeGreaterThan(3);
  await page.getByLabel("Find").fill("audit");
  await expect(rows).toHaveCount(1);
  await expect(rows.first()).toContainText("gatehouse_audit_recent");
  await expect(page.getByTestId("tools-shown")).toHaveText(`1 of ${all} tools match.`);
  await page.getByLabel("Find").fill("");
  await page.getByLabel("Gate").selectOption("require_approval");
  await expect(rows.first()).toContainText("asks a person");
  await page.getByLabel("Find").fill("no tool is called this");
  await expect(page.getByText("No tool matches")).toBeVisible();
  // Without JavaScript the form does it, and the result is a link.
  await page.goto(`${gh.url}/tools?q=audit`);
  await expect(rows).toHaveCount(1);
});

test("on a phone, with the grant form open, only its own button approves", async ({ browser }) => {
  const context = await browser.newContext({ viewport: { width: 390, height: 844 } });
  const page = await context.newPage();
  const issued = gh.issueToken("phone-agent", ["--owner", "ada"]);
  const { client } = await connectClient(issued.endpoint, issued.token, "phone-client");
  // A call that waits and may be granted: a rule makes the tool ask.
  const cookie = await gh.signIn("ada", PW);
  const [name, value] = cookie.split("=", 2);
  await context.addCookies([{ name, value, url: gh.url }]);
  await page.goto(`${gh.url}/policies?pattern=gatehouse_audit_recent&action=require_approval`);
  await page.getByRole("button", { name: "Save rule" }).click();
  await expect(page.getByTestId("outcome")).toHaveText("Rule saved.");
  const paused = await client.callTool({ name: "gatehouse_audit_recent", arguments: {} });
  const eid = (paused.structuredContent as any).executionId as string;
  await page.goto(`${gh.url}/resume/${eid}`);
  await expect(page.locator(".live-status")).toHaveText("Live");
  await expect(page.getByTestId("wants")).toContainText("wants to run");
  const plain = page.getByRole("button", { name: "Approve", exact: true });
  await expect(plain).toBeVisible();
  await page.getByText("Allow this tool for this agent…").click();
  await expect(plain).toBeHidden();
  await expect(page.getByRole("button", { name: "Decline" })).toBeVisible();
  await page.getByRole("button", { name: "Approve and allow" }).click();
  await expect(page.getByTestId("decided-by")).toContainText("by ada");
  await expect(page.getByTestId("wants")).not.toContainText("wants to run");
  await client.close();
  await context.close();
});

test("an invite link's expiry is a date, not a time relative to itself", async ({ page }) => {
  await signInPage(page, gh, "ada", PW, "/users");
  await page.getByLabel("Username").fill("newcomer");
  await page.getByRole("button", { name: "Create invite link" }).click();
  const expires = page.getByTestId("link-expires");
  await expect(expires).toHaveText(/^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC$/);
  await expect(page.getByText("until just now")).toHaveCount(0);
});
