// The page cannot be turned against its reader, in a real browser: every page
// hydrates under the nonce-based Content Security Policy without a single
// violation, names with hidden characters show them, a sign-in that comes
// back from a foreign `next` stays on the site, and a locked sign-in says
// how long to wait.
import { test, expect, type Page, type ConsoleMessage } from "@playwright/test";
import { spawnGatehouse, connectClient, type Gatehouse } from "./gatehouse";

const PW = "a long enough password";
let gh: Gatehouse;

test.describe.configure({ mode: "serial" });

test.beforeAll(async () => {
  gh = await spawnGatehouse();
  gh.addUser("ada", PW, true);
});
test.afterAll(() => gh.stop());

/** Console errors and page errors; CSP violations are reported as console errors. */
function watchConsole(page: Page): { csp: string[]; errors: string[] } {
  const seen = { csp: [] as string[], errors: [] as string[] };
  page.on("console", (m: ConsoleMessage) => {
    if (/Content[ -]Security[ -]Policy/i.test(m.text())) seen.csp.push(m.text());
    if (m.type() === "error") seen.errors.push(m.text());
  });
  page.on("pageerror", (e) => seen.errors.push(e.message));
  return seen;
}

async function signIn(page: Page, next = "") {
  await page.goto(`${gh.url}/sign-in${next}`);
  await page.getByLabel("Username").fill("ada");
  await page.getByLabel("Password").fill(PW);
  await page.getByRole("button", { name: "Sign in" }).click();
}

test("every page hydrates under the Content Security Policy without a violation", async ({ page }) => {
  const seen = watchConsole(page);
  await signIn(page);
  await expect(page).toHaveURL(`${gh.url}/`);
  const issued = gh.issueToken("csp-agent", ["--owner", "ada"]);
  const { client } = await connectClient(issued.endpoint, issued.token);
  const paused = (await client.callTool({ name: "gatehouse_policy_set", arguments: { pattern: "csp_*", action: "allow" } }))
    .structuredContent as { approvalUrl: string };
  for (const path of ["/", "/approvals", "/upstreams", new URL(paused.approvalUrl).pathname]) {
    const response = await page.goto(`${gh.url}${path}`);
    const csp = response!.headers()["content-security-policy"];
    expect(csp).toContain("script-src 'self' 'nonce-");
    expect(csp).toContain("'wasm-unsafe-eval'");
    // "Live" appears only once the wasm has hydrated and opened its stream.
    await expect(page.locator(".live-status")).toHaveText("Live");
  }
  // A decision through the hydrated page (server function + live update).
  await page.getByRole("button", { name: "Approve" }).click();
  await expect(page.getByRole("status")).toContainText("Approved");
  await page.goto(`${gh.url}/sign-in`);
  await page.waitForLoadState("networkidle");
  expect(seen.csp, "no Content Security Policy violations").toEqual([]);
  expect(seen.errors, "no script errors").toEqual([]);
  await client.close();
});

test("names with hidden characters show them on the inbox and the resume page", async ({ page }) => {
  const seen = watchConsole(page);
  const issued = gh.issueToken("safe\u202Eexe.txt", ["--owner", "ada"]);
  const { client } = await connectClient(issued.endpoint, issued.token, "client\u2066name");
  const paused = (await client.callTool({ name: "gatehouse_policy_set", arguments: { pattern: "n_*", action: "allow" } }))
    .structuredContent as { approvalUrl: string; executionId: string };
  await signIn(page);
  await page.goto(`${gh.url}/approvals`);
  const item = page.getByRole("listitem").filter({ has: page.locator(`a[href="/resume/${paused.executionId}"]`) });
  await expect(item).toContainText("safe⟨U+202E⟩exe.txt");
  expect(await item.innerText()).not.toContain("\u202E");
  await page.goto(paused.approvalUrl);
  await expect(page.locator(".eyebrow")).toContainText("safe⟨U+202E⟩exe.txt");
  await expect(page.locator(".live-status")).toHaveText("Live");
  await page.goto(`${gh.url}/`);
  await expect(page.getByRole("list", { name: "Connected agents" })).toContainText("client⟨U+2066⟩name");
  expect(seen.csp).toEqual([]);
  await client.close();
});

test("a foreign next after sign-in stays on this site", async ({ page }) => {
  await page.context().clearCookies();
  await signIn(page, `?next=${encodeURIComponent("/\t/example.com/")}`);
  await expect(page).toHaveURL(`${gh.url}/`);
  await page.context().clearCookies();
  await signIn(page, `?next=${encodeURIComponent("//example.com/")}`);
  await expect(page).toHaveURL(`${gh.url}/`);
  await page.context().clearCookies();
  await signIn(page, `?next=${encodeURIComponent("/approvals")}`);
  await expect(page).toHaveURL(`${gh.url}/approvals`);
});

test("a locked sign-in says how long to wait", async ({ page }) => {
  gh.addUser("mallory-target", PW);
  await page.context().clearCookies();
  for (let i = 0; i < 5; i++) {
    await page.goto(`${gh.url}/sign-in`);
    await page.getByLabel("Username").fill("mallory-target");
    await page.getByLabel("Password").fill("not the password");
    await page.getByRole("button", { name: "Sign in" }).click();
    await expect(page.getByRole("alert")).toContainText("did not match");
  }
  await page.getByLabel("Username").fill("mallory-target");
  await page.getByLabel("Password").fill(PW);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("alert")).toContainText(/Too many failed sign-ins\. Try again in \d+ seconds?\./);
});
