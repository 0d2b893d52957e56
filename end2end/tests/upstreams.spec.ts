// The upstreams page shows each fronted server's health live: a stdio
// upstream that is killed goes down and comes back without a reload.
import { test, expect } from "@playwright/test";
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { spawnGatehouse, root, type Gatehouse } from "./gatehouse";

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
