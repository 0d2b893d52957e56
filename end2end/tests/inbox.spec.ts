// The approvals inbox for triage: each call with its arguments on one line
// and how long it has waited; several declined at once with one reason;
// one approved from the keyboard (j to move, a to ask, a again to confirm;
// Escape cancels; ? lists the keys); a skip link first.
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

test("triage: bulk decline with one reason, approve from the keyboard", async ({ page }) => {
  const issued = gh.issueToken("triage-agent", ["--owner", "ada"]);
  const { client } = await connectClient(issued.endpoint, issued.token, "triage-client");
  const ids: string[] = [];
  for (const pattern of ["t1_*", "t2_*", "t3_*"]) {
    const r = await client.callTool({ name: "gatehouse_policy_set", arguments: { pattern, action: "allow" } });
    ids.push((r.structuredContent as any).executionId as string);
  }
  await signInPage(page, gh, "ada", PW, "/approvals");
  await expect(page.locator(".live-status")).toHaveText("Live");
  const list = page.getByRole("list", { name: "Pending approvals" });
  const card = (id: string) => list.locator(`li[data-execution-id="${id}"]`);
  await expect(list.getByRole("listitem")).toHaveCount(3);
  await expect(card(ids[0]).getByTestId("preview")).toContainText('"pattern":"t1_*"');
  await expect(card(ids[0]).getByTestId("waited")).toContainText("second");

  // Two at once, one reason.
  await card(ids[0]).getByRole("checkbox").check();
  await card(ids[1]).getByRole("checkbox").check();
  await page.getByLabel(/Reason for the selected/).fill("not this week");
  await page.getByRole("button", { name: "Decline selected" }).click();
  await expect(page.getByTestId("outcome")).toHaveText("Decided 2.");
  await expect(list.getByRole("listitem")).toHaveCount(1);

  // The last one from the keyboard: ask, cancel, ask again, confirm.
  await page.keyboard.press("?");
  await expect(page.getByTestId("keys-help")).toBeVisible();
  await page.keyboard.press("Escape");
  await expect(page.getByTestId("keys-help")).toBeHidden();
  await page.keyboard.press("j");
  await expect(card(ids[2])).toBeFocused();
  await page.keyboard.press("a");
  await expect(card(ids[2]).getByTestId("confirm")).toContainText("Approve this call?");
  await page.keyboard.press("Escape");
  await expect(card(ids[2]).getByTestId("confirm")).toHaveCount(0);
  await page.keyboard.press("a");
  await page.keyboard.press("a");
  await expect(list.getByRole("listitem")).toHaveCount(0);
  await expect(page.getByText("No call is waiting for a decision.")).toBeVisible();
  // The line says which call was decided, not just "Decided.".
  await expect(page.getByTestId("outcome")).toHaveText(/^Approved gatehouse_policy_set for \S*triage-agent\.$/);

  // What each became, with who and why.
  const history = await page.request.get(`${gh.url}/api/history?tool=gatehouse_policy_set`);
  // One row per call, its steps folded in.
  type Step = { executionId: string; state: string; actor: string; detail: string };
  const calls = (await history.json()).calls as { latest: Step; steps: Step[] }[];
  const of = (id: string) => calls.find((c) => c.latest.executionId === id)!.steps.find((s) => s.state !== "pending")!;
  expect(of(ids[0]).state).toBe("declined");
  expect(of(ids[0]).detail).toContain("not this week");
  expect(of(ids[1]).state).toBe("declined");
  expect(of(ids[2]).actor).toMatch(/^user:ada#\d+$/);
  await client.close();
});

test("the skip link is the first stop and leads to the calls", async ({ page }) => {
  await signInPage(page, gh, "ada", PW, "/approvals");
  await page.keyboard.press("Tab");
  const skip = page.getByRole("link", { name: "Skip to the waiting calls" });
  await expect(skip).toBeFocused();
  await expect(skip).toBeVisible();
});

test("several approved only once confirmed, naming how many and which tools; a preview opens to the whole arguments", async ({ page }) => {
  const issued = gh.issueToken("bulk-agent", ["--owner", "ada"]);
  const { client } = await connectClient(issued.endpoint, issued.token, "bulk-client");
  const ids: string[] = [];
  for (const pattern of ["b1_*", "b2_*"]) {
    const r = await client.callTool({ name: "gatehouse_policy_set", arguments: { pattern, action: "allow" } });
    ids.push((r.structuredContent as any).executionId as string);
  }
  await signInPage(page, gh, "ada", PW, "/approvals");
  await expect(page.locator(".live-status")).toHaveText("Live");
  const list = page.getByRole("list", { name: "Pending approvals" });
  const card = (id: string) => list.locator(`li[data-execution-id="${id}"]`);
  await expect(list.getByRole("listitem")).toHaveCount(2);

  // The one-line preview opens in place to the whole arguments, as on the call's page.
  await card(ids[0]).getByTestId("preview").click();
  await expect(card(ids[0]).locator("pre.arguments")).toContainText('"pattern": "b1_*"');

  // The bulk approval only asks: nothing is decided until it is confirmed.
  await card(ids[0]).getByRole("checkbox").check();
  await card(ids[1]).getByRole("checkbox").check();
  await page.getByRole("button", { name: "Approve selected…" }).click();
  const confirm = page.getByTestId("confirm-bulk");
  await expect(confirm).toContainText("Approve 2 calls?");
  await expect(confirm).toContainText("gatehouse_policy_set (×2)");
  await expect(list.getByRole("listitem")).toHaveCount(2);
  // As a person sees it, on a phone and at a desk, light and dark.
  for (const [width, height] of [[390, 844], [1280, 800]]) {
    for (const colorScheme of ["light", "dark"] as const) {
      await page.setViewportSize({ width, height });
      await page.emulateMedia({ colorScheme });
      await page.screenshot({ path: join(root, "end2end", "test-results", "screenshots", `approvals-confirm-${width}-${colorScheme}.png`), fullPage: true });
    }
  }
  await confirm.getByRole("button", { name: "Approve 2 calls" }).click();
  await expect(page.getByTestId("outcome")).toHaveText("Decided 2.");
  await expect(list.getByRole("listitem")).toHaveCount(0);
  await client.close();
});
