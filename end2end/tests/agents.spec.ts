// The agents page end to end: mint a token in the browser, connect the
// TypeScript SDK with it, watch its session appear live, revoke it, and the
// next request is refused. Also without JavaScript, and as a plain user.
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

const signIn = (page: Page, user: string) => signInPage(page, gh, user, PW, "/agents");

test("mint in the browser, connect with the SDK, see it live, revoke, and the next request gets 401", async ({ page }) => {
  await signIn(page, "ada");
  await expect(page.locator(".live-status")).toHaveText("Live");
  await page.getByLabel("Agent name").fill("browser-minted");
  await page.getByLabel("Thread (optional)").fill("task-7");
  await page.getByRole("button", { name: "Mint credential" }).click();
  await expect(page).toHaveURL(/\/agents\?minted=cred_/);
  const token = (await page.getByTestId("minted-token").innerText()).trim();
  expect(token.length).toBeGreaterThan(20);
  await expect(page.getByRole("group").first()).toContainText("claude mcp add --transport http gatehouse");
  const agent = page.getByRole("region", { name: "Agent browser-minted" });
  const row = agent.getByRole("row").filter({ hasText: "task-7" });
  await expect(row).toContainText("active");
  await expect(row.locator('td[data-label="Sessions"]')).toHaveText("0");

  // The pasted token works for a real client, and the page sees it connect.
  const { client } = await connectClient(`${gh.url}/mcp`, token, "pasted-client");
  await expect(row.locator('td[data-label="Sessions"]')).toHaveText("1");
  expect((await client.listTools()).tools.length).toBeGreaterThan(0);

  // Revoked on the page: the very next request is refused.
  await row.getByRole("button", { name: "Revoke", exact: true }).click();
  await expect(row).toContainText("revoked");
  const after = await fetch(`${gh.url}/mcp`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${token}`,
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" }),
  });
  expect(after.status).toBe(401);
  await client.close().catch(() => {});

  // The token was shown once: the same link no longer shows it.
  await page.reload();
  await expect(page.getByTestId("minted-token")).toHaveCount(0);
});

test("minting works without JavaScript and shows the token once", async ({ browser }) => {
  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  await signIn(page, "ada");
  await page.getByLabel("Agent name").fill("no-js-agent");
  await page.getByRole("button", { name: "Mint credential" }).click();
  await expect(page).toHaveURL(/\/agents\?minted=cred_/);
  await expect(page.getByTestId("minted-token")).toHaveText(/\S{20,}/);
  await expect(page.getByRole("region", { name: "Agent no-js-agent" })).toContainText("active");
  await context.close();
});

test("a plain user sees and mints only their own agents, and cannot revoke another's", async ({ page }) => {
  const adas = gh.issueToken("adas-agent", ["--owner", "ada"]);
  await signIn(page, "bob");
  await expect(page.getByLabel("Owner")).toHaveCount(0);
  await expect(page.getByRole("region", { name: "Agent adas-agent" })).toHaveCount(0);
  await page.getByLabel("Agent name").fill("bobs-agent");
  await page.getByRole("button", { name: "Mint credential" }).click();
  await expect(page.getByRole("region", { name: "Agent bobs-agent" })).toContainText("owner bob");
  // Posting a revoke of ada's credential by hand (as a crafted form would) revokes nothing.
  const cookies = await page.context().cookies();
  const cookie = cookies.map((c) => `${c.name}=${c.value}`).join("; ");
  const r = await fetch(`${gh.url}/api/fn/revoke`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", origin: gh.url, cookie, accept: "application/json" },
    body: new URLSearchParams({ scope: "credential", target: adas.id, owner: "ada" }).toString(),
  });
  expect(r.status).toBe(200);
  expect(await r.json()).toBe(0);
  const stillWorks = await connectClient(`${gh.url}/mcp`, adas.token, "still-ada");
  await stillWorks.client.close();
});
