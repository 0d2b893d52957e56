// The console as a person sees it: every page passes an accessibility scan
// (axe: no serious or critical violation) at phone and desktop width, in
// light and dark, and is photographed. Screenshots go to test-results/, or
// to docs/screenshots/ with GATEHOUSE_SCREENSHOTS=docs (what the README shows).
import { test, expect, type Page } from "@playwright/test";
import AxeBuilder from "@axe-core/playwright";
import { join } from "node:path";
import { spawnGatehouse, connectClient, root, type Gatehouse } from "./gatehouse";

const PW = "a long enough password";
let gh: Gatehouse;
let cookie = "";
let pendingId = "";
let settledId = "";
let consentPath = "";
const closers: (() => Promise<void>)[] = [];

const shots =
  process.env.GATEHOUSE_SCREENSHOTS === "docs"
    ? join(root, "docs", "screenshots")
    : join(root, "end2end", "test-results", "screenshots");

test.beforeAll(async () => {
  // An upstream whose one tool fails, allowed to run: the home page lists it under "Failed lately".
  const node = join(root, "tools", "node_modules", ".bin", "node");
  const fixture = join(root, "end2end", "fixtures", "everything_server.mjs");
  gh = await spawnGatehouse(
    {},
    `[[upstream]]\nname = "everything"\nprefix = "ev__"\ncommand = ${JSON.stringify(node)}\nargs = [${JSON.stringify(fixture)}, "--stdio"]\n` +
      `[[policy]]\npattern = "ev__test_error_handling"\naction = "allow"\n`,
  );
  gh.addUser("ada", PW, true);
  gh.addUser("bob", PW);
  const ada = await gh.signIn("ada", PW);
  cookie = ada;
  // Something to show: a settled call, a pending one, a connected agent.
  for (const [agent, action] of [["claude-code", "decline"], ["cursor", ""]] as const) {
    const issued = gh.issueToken(agent, ["--owner", "ada", "--thread", `${agent}-main`]);
    const { client } = await connectClient(issued.endpoint, issued.token, `${agent}-client`);
    closers.push(() => client.close());
    const r = await client.callTool({ name: "gatehouse_policy_set", arguments: { pattern: `${agent}_*`, action: "allow" } });
    const eid = (r.structuredContent as any).executionId as string;
    if (action) {
      const d = await fetch(`${gh.url}/api/executions/${eid}/resume`, {
        method: "POST",
        headers: { "content-type": "application/json", origin: gh.url, cookie: ada },
        body: JSON.stringify({ action }),
      });
      expect(d.status).toBe(200);
      settledId = eid;
    } else {
      pendingId = eid;
    }
  }
  {
    const issued = gh.issueToken("deploy-bot", ["--owner", "ada"]);
    const { client } = await connectClient(issued.endpoint, issued.token, "deploy-client");
    closers.push(() => client.close());
    for (let i = 0; i < 100; i++) {
      const { tools } = await client.listTools();
      if (tools.some((t) => t.name === "ev__test_error_handling")) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    const failed = await client.callTool({ name: "ev__test_error_handling", arguments: {} });
    expect(failed.isError).toBe(true);
  }
  // The longest realistic content a rule row holds: a shadow rule (its row
  // has Edit, Remove and Enforce) with a 200-character condition, a long
  // tool pattern, human-only, a rate and a name of its own.
  const condition =
    'args.path.startsWith("/srv/build/artifacts/") && !args.path.contains("..") && size(args.content) < 65536 && args.mode in ["overwrite", "append"] && args.owner == "release-engineering-team"';
  const saved = await fetch(`${gh.url}/api/fn/policy_save`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", origin: gh.url, cookie: ada, accept: "application/json" },
    body: new URLSearchParams({
      "draft[name]": "release artifacts are written only under the build directory by the release team",
      "draft[pattern]": "filesystem_production_release_artifacts__write_file_with_checksum_verification",
      "draft[action]": "require_approval",
      "draft[human_only]": "on",
      "draft[when]": condition,
      "draft[rate]": "30/hour",
      "draft[shadow]": "on",
    }).toString(),
  });
  expect(saved.status, await saved.text()).toBe(200);
  // An OAuth client asking ada for access: its consent page.
  const reg = await fetch(`${gh.url}/oauth/register`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      client_name: "Claude Code",
      redirect_uris: ["http://127.0.0.1:33418/callback"],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    }),
  });
  expect(reg.status).toBe(201);
  const { client_id } = await reg.json();
  consentPath = `/oauth/authorize?${new URLSearchParams({
    response_type: "code",
    client_id,
    redirect_uri: "http://127.0.0.1:33418/callback",
    code_challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
    code_challenge_method: "S256",
    state: "console-spec",
    scope: "mcp",
    resource: `${gh.url}/mcp`,
  })}`;
});
test.afterAll(async () => {
  for (const close of closers) await close();
  gh.stop();
});

/** The page signed in as ada (one browser session for the whole file). */
async function signIn(page: Page) {
  const [name, value] = cookie.split("=", 2);
  await page.context().addCookies([{ name, value, url: gh.url }]);
}

const pages: [string, () => string][] = [
  ["home", () => "/"],
  ["approvals", () => "/approvals"],
  ["resume", () => `/resume/${pendingId}`],
  ["resume-settled", () => `/resume/${settledId}`],
  ["agents", () => "/agents"],
  ["history", () => "/history"],
  ["policies", () => "/policies?pattern=gatehouse_*&action=block"],
  ["tools", () => "/tools"],
  ["upstreams", () => "/upstreams"],
  ["grants", () => "/grants"],
  ["users", () => "/users"],
  ["account", () => "/account"],
];

for (const [name, path] of pages) {
  test(`${name}: no serious accessibility violation; photographed at 390 and 1280, light and dark`, async ({ browser }) => {
    for (const colorScheme of ["light", "dark"] as const) {
      for (const [width, height] of [[390, 844], [1280, 800]]) {
        const context = await browser.newContext({ viewport: { width, height }, colorScheme });
        const page = await context.newPage();
        await signIn(page);
        await page.goto(`${gh.url}${path()}`);
        await expect(page.locator(".live-status")).toHaveText("Live");
        await expect(page.getByRole("alert"), "nothing failed to load").toHaveCount(0);
        const scan = await new AxeBuilder({ page }).analyze();
        const bad = scan.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
        expect(bad.map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(" ")).join(", ")})`)).toEqual([]);
        // Nothing wider than the screen: a phone never scrolls sideways.
        const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
        expect(overflow).toBeLessThanOrEqual(0);
        // The header: one row at desktop width, two on a phone.
        const header = await page.locator("header.top").boundingBox();
        expect(header!.height, "the header's height").toBeLessThanOrEqual(width > 1000 ? 64 : 100);
        await page.screenshot({ path: join(shots, `${name}-${width}-${colorScheme}.png`), fullPage: true });
        await context.close();
      }
    }
  });
}

test("home: a failed call says where it failed and why, and links to its calls", async ({ page }) => {
  await signIn(page);
  await page.goto(`${gh.url}/`);
  const failures = page.getByTestId("failures");
  await expect(failures).toContainText("ev__test_error_handling");
  await expect(failures).toContainText("upstream everything answered with an error:");
  await expect(failures.getByRole("link", { name: "ev__test_error_handling" })).toHaveAttribute("href", /\/history\?tool=ev__test_error_handling/);
});

// The OAuth consent page (an MCP client asking to connect as ada's agent):
// no live data on it, so no live status to wait for.
test("oauth-consent: no serious accessibility violation; photographed at 390 and 1280, light and dark", async ({ browser }) => {
  for (const colorScheme of ["light", "dark"] as const) {
    for (const [width, height] of [[390, 844], [1280, 800]]) {
      const context = await browser.newContext({ viewport: { width, height }, colorScheme });
      const page = await context.newPage();
      await signIn(page);
      await page.goto(`${gh.url}${consentPath}`);
      await expect(page.getByRole("heading", { level: 1 })).toContainText("Claude Code");
      await expect(page.getByRole("button", { name: "Allow" })).toBeVisible();
      await expect(page.getByRole("alert"), "nothing failed to load").toHaveCount(0);
      const scan = await new AxeBuilder({ page }).analyze();
      const bad = scan.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
      expect(bad.map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(" ")).join(", ")})`)).toEqual([]);
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      expect(overflow).toBeLessThanOrEqual(0);
      await page.screenshot({ path: join(shots, `oauth-consent-${width}-${colorScheme}.png`), fullPage: true });
      await context.close();
    }
  }
});

// The pages a signed-out person sees: sign-in, and an invite or reset link
// (here one that does not work, which is what most stray visits see).
for (const [name, path] of [["sign-in", "/sign-in"], ["set-password", "/set-password?token=not-a-real-link"]]) {
  test(`${name}: no serious accessibility violation`, async ({ browser }) => {
    for (const colorScheme of ["light", "dark"] as const) {
      const context = await browser.newContext({ viewport: { width: 390, height: 844 }, colorScheme });
      const page = await context.newPage();
      await page.goto(`${gh.url}${path}`);
      await expect(page.getByRole("heading", { level: 1 })).toBeVisible();
      const scan = await new AxeBuilder({ page }).analyze();
      expect(scan.violations.filter((v) => v.impact === "serious" || v.impact === "critical").map((v) => v.id)).toEqual([]);
      await page.screenshot({ path: join(shots, `${name}-390-${colorScheme}.png`) });
      await context.close();
    }
  });
}
