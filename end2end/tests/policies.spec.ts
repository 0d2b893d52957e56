// The policies page end to end: while a rule is typed, the preview lists the
// tools it matches and what the gate will do with each; saving it changes
// what a real client sees and gets; the change log says who; removing it
// undoes it. Also without JavaScript, and refused to a plain user.
import { test, expect, type Page } from "@playwright/test";
import { spawnGatehouse, connectClient, signInPage, type Gatehouse } from "./gatehouse";

const PW = "a long enough password";
let gh: Gatehouse;

test.beforeAll(async () => {
  gh = await spawnGatehouse();
  gh.addUser("ada", PW, true);
  gh.addUser("bob", PW);
});
test.afterAll(() => gh.stop());

const signIn = (page: Page, user: string) => signInPage(page, gh, user, PW, "/policies");

test("the preview follows the typing, and the gate follows the saved rule", async ({ page }) => {
  const issued = gh.issueToken("policy-watcher", ["--owner", "ada"]);
  const { client } = await connectClient(issued.endpoint, issued.token, "policy-client");
  const names = async () => (await client.listTools()).tools.map((t) => t.name);
  expect(await names()).toContain("gatehouse_audit_recent");

  await signIn(page, "ada");
  await expect(page.locator(".live-status")).toHaveText("Live");
  await page.getByLabel("Pattern").fill("gatehouse_audit_*");
  await page.getByLabel("Action").selectOption("block");
  const preview = page.getByRole("table", { name: "Preview" });
  const row = preview.getByRole("row").filter({ hasText: "gatehouse_audit_recent" });
  await expect(row.locator('td[data-label="Now"]')).toContainText("runs at once");
  await expect(row.locator('td[data-label="With this rule"]')).toContainText("blocked");
  await expect(preview.getByRole("row")).toHaveCount(2); // the header and the one tool it matches
  // The tools that change the gate always ask, whatever a rule says.
  await page.getByLabel("Pattern").fill("gatehouse_policy_*");
  await page.getByLabel("Action").selectOption("allow");
  const gated = preview.getByRole("row").filter({ hasText: "gatehouse_policy_set" });
  await expect(gated.locator('td[data-label="With this rule"]')).toContainText("asks a person");
  await expect(gated.locator('td[data-label="With this rule"]')).toContainText("changes the gate");

  await page.getByLabel("Pattern").fill("gatehouse_audit_*");
  await page.getByLabel("Action").selectOption("block");
  await page.getByRole("button", { name: "Save rule" }).click();
  const rules = page.getByRole("table", { name: "Rules" });
  await expect(rules.getByRole("row").filter({ hasText: "gatehouse_audit_*" })).toContainText("blocked");
  await expect(page.getByRole("list", { name: "Recent rule changes" })).toContainText("ada set gatehouse_audit_*");

  // A real client: the tool is gone from its list and refused.
  await expect.poll(names).not.toContain("gatehouse_audit_recent");
  const refused = await client.callTool({ name: "gatehouse_audit_recent", arguments: {} });
  expect(refused.isError).toBe(true);
  expect(JSON.stringify(refused.content)).toContain("blocked");

  await rules.getByRole("row").filter({ hasText: "gatehouse_audit_*" }).getByRole("button", { name: "Remove" }).click();
  await expect(rules).toHaveCount(0);
  await expect(page.getByRole("list", { name: "Recent rule changes" })).toContainText("ada remove gatehouse_audit_*");
  await expect.poll(names).toContain("gatehouse_audit_recent");
  await client.close();
});

test("the preview says what a conditional rule does to the other calls, and that a shadow rule decides nothing", async ({ page }) => {
  await signIn(page, "ada");
  await expect(page.locator(".live-status")).toHaveText("Live");
  await page.getByLabel("Pattern").fill("gatehouse_audit_recent");
  await page.getByLabel("Action").selectOption("block");
  await page.getByText("Only some calls").click();
  await page.getByLabel("When (CEL)").fill("args.limit > 50");
  const cell = page
    .getByRole("table", { name: "Preview" })
    .getByRole("row")
    .filter({ hasText: "gatehouse_audit_recent" })
    .locator('td[data-label="With this rule"]');
  await expect(cell).toContainText("blocked");
  await expect(cell.getByTestId("preview-only")).toContainText("when args.limit > 50, otherwise runs at once");

  await page.getByLabel("When (CEL)").fill("");
  await page.getByText("Shadow: decide nothing yet").click();
  await expect(cell).toHaveAttribute("data-shadow", "true");
  await expect(cell).toContainText("runs at once");
  await expect(cell).toContainText("shadow: decides nothing; would have: blocked");
});

test("while a rule is written, it is tried on the calls of the last days", async ({ page }) => {
  const issued = gh.issueToken("replay-bot", ["--owner", "ada"]);
  const { client } = await connectClient(issued.endpoint, issued.token, "replay-client");
  await client.callTool({ name: "gatehouse_status", arguments: {} });
  await client.callTool({ name: "gatehouse_status", arguments: {} });
  await client.close();

  await signIn(page, "ada");
  await expect(page.locator(".live-status")).toHaveText("Live");
  await page.getByLabel("Pattern").fill("gatehouse_status");
  await page.getByLabel("Action").selectOption("block");
  const replay = page.getByTestId("replay");
  await expect(replay).toContainText("On the last 7 days");
  await expect(replay).toContainText("would have blocked 2 calls that ran");
  const changed = replay.getByRole("list", { name: "Calls it would change" }).getByRole("listitem");
  await expect(changed).toHaveCount(2);
  await expect(changed.first()).toContainText("ada/replay-bot");
  await expect(changed.first().getByRole("link", { name: "History" })).toHaveAttribute("href", /tool=gatehouse_status/);
  // With a condition the calls cannot be tried: their arguments are not kept.
  await page.getByText("Only some calls").click();
  await page.getByLabel("When (CEL)").fill("args.x == 1");
  await expect(replay.getByTestId("replay-untried")).toContainText("2 calls it reaches could not be tried");
});

test("preview and save work without JavaScript", async ({ browser }) => {
  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  await signIn(page, "ada");
  await page.getByLabel("Pattern").fill("gatehouse_status");
  await page.getByLabel("Action").selectOption("require_approval");
  await page.getByRole("button", { name: "Preview" }).click();
  await expect(page).toHaveURL(/pattern=gatehouse_status/);
  const row = page.getByRole("table", { name: "Preview" }).getByRole("row").filter({ hasText: "gatehouse_status" });
  await expect(row.locator('td[data-label="With this rule"]')).toContainText("asks a person");
  await page.getByRole("button", { name: "Save rule" }).click();
  await expect(page.getByRole("table", { name: "Rules" }).getByRole("row").filter({ hasText: "gatehouse_status" })).toContainText(
    "asks a person",
  );
  await context.close();
});

test("a plain user sees the rules but cannot change them", async ({ page }) => {
  await signIn(page, "bob");
  await expect(page.getByRole("button", { name: "Save rule" })).toHaveCount(0);
  await expect(page.getByText("Only admins change rules.")).toBeVisible();
  const cookie = (await page.context().cookies()).map((c) => `${c.name}=${c.value}`).join("; ");
  const r = await fetch(`${gh.url}/api/fn/policy_save`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", origin: gh.url, cookie, accept: "application/json" },
    body: new URLSearchParams({ "draft[pattern]": "*", "draft[action]": "allow" }).toString(),
  });
  expect(r.status).toBe(403);
});

test("a shadow rule records what it would have done, Enforce promotes it, and its row counts what it decided", async ({ page }) => {
  const issued = gh.issueToken("shadow-bot", ["--owner", "ada"]);
  const { client } = await connectClient(issued.endpoint, issued.token, "shadow-client");
  await signIn(page, "ada");
  await expect(page.locator(".live-status")).toHaveText("Live");
  await page.getByLabel("Pattern").fill("gatehouse_policies_list");
  await page.getByLabel("Action").selectOption("block");
  await page.getByText("Shadow: decide nothing yet").click();
  await page.getByRole("button", { name: "Save rule" }).click();
  const row = page.getByRole("table", { name: "Rules" }).getByRole("row").filter({ hasText: "gatehouse_policies_list" });
  await expect(row).toContainText("Shadow: decides nothing.");

  // In shadow mode the call runs; the rule only notes what it would have done.
  expect((await client.callTool({ name: "gatehouse_policies_list", arguments: {} })).isError).not.toBe(true);
  await page.reload();
  await expect(row.locator(".shadow-rule")).toHaveAttribute("data-shadow-count", "1");
  await row.getByRole("button", { name: "Enforce" }).click();
  await expect(row.locator(".shadow-rule")).toHaveCount(0);
  await expect(row.locator(".decided")).toHaveAttribute("data-decided", "0");

  const refused = await client.callTool({ name: "gatehouse_policies_list", arguments: {} });
  expect(refused.isError).toBe(true);
  expect(JSON.stringify(refused.content)).toContain("blocked");
  await page.reload();
  await expect(row.locator(".decided")).toContainText("Decided 1 call in 7 days.");
  await client.close();
});
