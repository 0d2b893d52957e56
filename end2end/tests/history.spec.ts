// The history page end to end: a new decision appears live on the first
// page, the filter form narrows it into a shareable link, a row opens the
// call's page with its timeline and its kept arguments, and the filtered
// view downloads as CSV.
import { test, expect } from "@playwright/test";
import { spawnGatehouse, connectClient, signInPage, type Gatehouse } from "./gatehouse";

const PW = "a long enough password";
let gh: Gatehouse;

test.beforeAll(async () => {
  gh = await spawnGatehouse();
  gh.addUser("ada", PW, true);
});
test.afterAll(() => gh.stop());

test("decisions arrive live, filters make a link, a row opens its timeline, the view downloads", async ({ page }) => {
  await signInPage(page, gh, "ada", PW, "/history");
  await expect(page.locator(".live-status")).toHaveText("Live");
  await expect(page.getByText("No call yet")).toBeVisible();

  const ada = await gh.signIn("ada", PW);
  const issued = gh.issueToken("history-agent", ["--owner", "ada"]);
  const { client } = await connectClient(issued.endpoint, issued.token, "history-client");
  const paused = await client.callTool({ name: "gatehouse_policy_set", arguments: { pattern: "h_*", action: "allow" } });
  const eid = (paused.structuredContent as any).executionId as string;
  const table = page.getByRole("table", { name: "History" });
  await expect(table.locator(`tr[data-execution-id="${eid}"][data-state="pending"]`)).toBeVisible();
  await fetch(`${gh.url}/api/executions/${eid}/resume`, {
    method: "POST",
    headers: { "content-type": "application/json", origin: gh.url, cookie: ada },
    body: JSON.stringify({ action: "decline" }),
  });
  await expect(table.locator(`tr[data-execution-id="${eid}"][data-state="declined"]`)).toBeVisible();
  // One row per call: the pending step is folded into it, not a row of its own.
  await expect(table.locator(`tr[data-execution-id="${eid}"]`)).toHaveCount(1);
  const row = table.locator(`tr[data-execution-id="${eid}"]`);
  await expect(row.getByRole("cell").nth(3)).toHaveText("ada");
  await row.getByText("2 steps").click();
  await expect(row.getByRole("listitem")).toHaveCount(2);
  await expect(row.getByRole("listitem").nth(1)).toContainText("declined by ada");
  // The pending step names what asked; the arguments a person saw are kept
  // (keep_arguments = "gated", the default) and shown in the row.
  await expect(row.getByRole("listitem").nth(0)).toContainText("pending by");
  await row.getByText("Arguments", { exact: true }).click();
  await expect(row.getByTestId("kept-arguments")).toContainText('"pattern": "h_*"');

  await page.getByLabel("Outcome").selectOption("declined");
  await page.getByRole("button", { name: "Filter" }).click();
  await expect(page).toHaveURL(/\/history\?.*outcome=declined/);
  await expect(table.getByRole("row")).toHaveCount(2); // the header and the decline
  const csv = page.getByRole("link", { name: "CSV" });
  await expect(csv).toHaveAttribute("href", /\/api\/history\/export\.csv\?.*outcome=declined/);
  const download = await page.request.get(`${gh.url}${await csv.getAttribute("href")}`);
  expect(download.headers()["content-type"]).toContain("text/csv");
  expect((await download.text()).trim().split("\n")).toHaveLength(2);

  await table.getByRole("link", { name: "gatehouse_policy_set" }).click();
  await expect(page).toHaveURL(`${gh.url}/resume/${eid}`);
  const timeline = page.getByRole("list", { name: "Timeline" });
  await expect(timeline.getByRole("listitem")).toHaveCount(2);
  await expect(timeline.getByRole("listitem").nth(1)).toContainText("declined by ada");
  // Settled, the call's page shows the arguments the record kept.
  await expect(page.getByTestId("kept-arguments")).toContainText('"action": "allow"');
  await client.close();
});
