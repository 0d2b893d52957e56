// The upstreams page shows each fronted server's health live: a stdio
// upstream that is killed goes down and comes back without a reload.
import { test, expect } from "@playwright/test";
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { connectClient, signInPage, spawnGatehouse, root, type Gatehouse } from "./gatehouse";

const PW = "a long enough password";
let gh: Gatehouse;

test.beforeAll(async () => {
  const python = join(root, "tools", ".venv", "bin", "python");
  const server = join(root, "end2end", "fixtures", "slow_server.py");
  gh = await spawnGatehouse({}, `[[upstream]]\nname = "slow"\ncommand = ${JSON.stringify(python)}\nargs = [${JSON.stringify(server)}]\n`);
  gh.addUser("ada", PW, true);
});
test.afterAll(() => gh.stop());

test("a killed upstream shows restarting, then up again with a restart, live", async ({ page }) => {
  await page.goto(`${gh.url}/sign-in`);
  await page.getByLabel("Username").fill("ada");
  await page.getByLabel("Password").fill(PW);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Upstreams" }).click();
  await expect(page).toHaveURL(`${gh.url}/upstreams`);
  await expect(page.locator(".live-status")).toHaveText("Live");
  const row = page.getByRole("table", { name: "Upstreams" }).getByRole("row").filter({ hasText: "slow" });
  await expect(row.getByRole("cell").nth(2)).toHaveText("up");
  await expect(row.getByRole("cell").nth(1)).toHaveText("stdio");
  await expect(row.getByRole("cell").nth(3)).toHaveText("1");
  await page.evaluate(() => ((window as any).__noReload = true));

  execFileSync("pkill", ["-9", "-f", "end2end/fixtures/slow_server.py"]);
  await expect(row.getByRole("cell").nth(4)).toHaveText("1");
  await expect(row.getByRole("cell").nth(2)).toHaveText("restarting");
  await expect(row.getByRole("cell").nth(2)).toHaveText("up", { timeout: 15_000 });
  expect(await page.evaluate(() => (window as any).__noReload)).toBe(true);

  // /metrics needs an admin: an admin API token reads it.
  const api = JSON.parse(gh.cli("api-token", "issue", "--name", "e2e", "--json"));
  const metrics = await (await fetch(`${gh.url}/metrics`, { headers: { authorization: `Bearer ${api.token}` } })).text();
  expect(metrics).toContain('gatehouse_upstream_up{upstream="slow",health="up"} 1');
});

test.describe("an upstream added in the browser", () => {
  const SECRET = "e2e-secret-header-value";
  let gh2: Gatehouse;
  let fixture: ChildProcess;
  let fixtureUrl: string;

  test.beforeAll(async () => {
    const node = join(root, "tools", "node_modules", ".bin", "node");
    fixture = spawn(node, [join(root, "end2end", "fixtures", "everything_server.mjs"), "--port", "0"], {
      stdio: ["ignore", "pipe", "ignore"],
    });
    fixtureUrl = await new Promise<string>((ok, fail) => {
      const timer = setTimeout(() => fail(new Error("the fixture did not start")), 20_000);
      fixture.stdout!.once("data", (chunk) => {
        clearTimeout(timer);
        ok(chunk.toString().trim().split("\n")[0].split(" ").pop()!);
      });
    });
    gh2 = await spawnGatehouse({}, `[[policy]]\npattern = "web__probe_*"\naction = "allow"\n`);
    gh2.addUser("ada", PW, true);
  });
  test.afterAll(() => {
    gh2.stop();
    fixture.kill();
  });

  test("an admin adds a Streamable HTTP upstream with a secret header and an agent calls its tool", async ({ page }) => {
    await signInPage(page, gh2, "ada", PW, "/upstreams");
    await expect(page.locator(".live-status")).toHaveText("Live");
    const form = page.getByRole("form", { name: "Upstream" });
    await form.getByLabel("Name").fill("web");
    await form.getByLabel("URL").fill(fixtureUrl);
    await form.getByLabel("Secret headers").fill(`X-Upstream-Key: ${SECRET}`);
    // Test first: it lists the tools and saves nothing; what was typed stays.
    await form.getByRole("button", { name: "Test" }).click();
    await expect(page.getByTestId("outcome")).toContainText("Test passed: web answered");
    await expect(page.getByTestId("outcome")).toContainText(/with \d+ tools? \(web__/);
    await expect(page.getByRole("table", { name: "Upstreams" }).getByRole("row").filter({ hasText: "web" })).toHaveCount(0);
    await expect(form.getByLabel("Name")).toHaveValue("web");
    await form.getByRole("button", { name: "Add upstream" }).click();
    await expect(page.getByTestId("outcome")).toContainText("Saved");
    // Typed while the new upstream comes up (the page re-reads the list
    // live), refused beside each bad field, and kept as typed.
    await form.getByLabel("Name").fill("bad name");
    await form.getByLabel("URL").fill("ftp://files.example");
    const row = page.getByRole("table", { name: "Upstreams" }).getByRole("row").filter({ hasText: "web" });
    await expect(row.getByRole("cell").nth(2)).toHaveText("up", { timeout: 15_000 });
    await form.getByRole("button", { name: "Add upstream" }).click();
    await expect(page.getByTestId("outcome")).toHaveText("Not saved: the 2 marked fields need a change.");
    await expect(form.locator(".field-error")).toHaveText([
      "A name is 1 to 64 letters, digits, '-' or '_'.",
      "The URL must start with http:// or https://.",
    ]);
    await expect(form.getByLabel("Name")).toHaveValue("bad name");
    await expect(form.getByLabel("URL")).toHaveValue("ftp://files.example");
    await expect(row.getByTestId("manage")).toContainText("added here");
    expect(await page.content()).not.toContain(SECRET);

    // An agent (the TypeScript SDK) calls the new upstream's tool, which
    // received the secret header.
    const issued = gh2.issueToken("e2e-agent");
    const { client } = await connectClient(issued.endpoint, issued.token);
    const tools = await client.listTools();
    expect(tools.tools.map((t) => t.name)).toContain("web__probe_whoami");
    const result = await client.callTool({ name: "web__probe_whoami", arguments: {} });
    const seen = JSON.parse((result.content as { text: string }[])[0].text);
    expect(seen.headers["x-upstream-key"]).toBe(SECRET);
    await client.close();

    // Edit shows the secret header's name, never its value; Remove takes it away.
    await row.getByRole("link", { name: "Edit web" }).click();
    await expect(page.getByRole("heading", { name: "Edit web" })).toBeVisible();
    await expect(page.getByLabel("Secret headers")).toHaveValue("X-Upstream-Key:");
    await row.getByRole("button", { name: "Remove web" }).click();
    await expect(page.getByRole("table", { name: "Upstreams" })).toHaveCount(0);
  });
});
