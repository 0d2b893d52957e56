// What a phone downloads to open the approvals page and a call's page with
// an empty cache, and how long until each is interactive (its live stream
// connected: on a phone, the light page's script; on a desktop, the wasm),
// under DevTools' "Fast 3G" and a 4× slower CPU; then the same page again
// with the cache warm. Prints one JSON line per load (scripts/bench-cold-load.sh
// turns them into BENCHMARKS.md's table). Not a test: it asserts nothing
// about speed, only that the page loaded.
import { test, expect, type Page } from "@playwright/test";
import { spawnGatehouse, connectClient } from "../tests/gatehouse";

// DevTools' "Fast 3G" preset: 1.6 Mbps down, 750 kbps up, 150 ms RTT, each
// scaled as DevTools does (×0.9 throughput, ×3.75 latency).
const FAST_3G = {
  offline: false,
  latency: 150 * 3.75,
  downloadThroughput: ((1.6 * 1000 * 1000) / 8) * 0.9,
  uploadThroughput: ((750 * 1000) / 8) * 0.9,
};

test.use({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });

async function load(page: Page, url: string) {
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("Network.enable");
  await cdp.send("Network.emulateNetworkConditions", FAST_3G);
  await cdp.send("Emulation.setCPUThrottlingRate", { rate: 4 });
  const urls = new Map<string, string>();
  const bytes = new Map<string, number>();
  cdp.on("Network.requestWillBeSent", (e) => urls.set(e.requestId, e.request.url));
  cdp.on("Network.loadingFinished", (e) => bytes.set(e.requestId, e.encodedDataLength));
  const start = Date.now();
  await page.goto(url, { waitUntil: "commit" });
  await expect(page.getByRole("heading", { level: 1 })).toBeVisible({ timeout: 120_000 });
  const firstContent = Date.now() - start;
  await expect(page.locator(".live-status")).toHaveAttribute("data-state", "live", { timeout: 240_000 });
  const interactive = Date.now() - start;
  await cdp.detach();
  const files: Record<string, number> = {};
  let total = 0;
  for (const [id, n] of bytes) {
    const name = new URL(urls.get(id) ?? "about:blank").pathname;
    if (name.startsWith("/api/live")) continue; // the stream never finishes
    files[name] = (files[name] ?? 0) + n;
    total += n;
  }
  return { total_bytes: total, first_content_ms: firstContent, interactive_ms: interactive, files };
}

test("cold and warm load of the approvals page and a call's page on a throttled phone", async ({ browser }) => {
  const gh = await spawnGatehouse();
  try {
    gh.addUser("ada", "a long password", true);
    const cookie = await gh.signIn("ada", "a long password");
    const issued = gh.issueToken("bench", ["--owner", "ada"]);
    const { client } = await connectClient(issued.endpoint, issued.token);
    const paused = await client.callTool({ name: "gatehouse_policy_set", arguments: { pattern: "bench_*", action: "allow" } });
    const eid = (paused.structuredContent as { executionId: string }).executionId;
    const [name, value] = cookie.split("=");
    const binary = process.env.GATEHOUSE_BIN ?? "current";
    // The light pages a phone gets, then the same approvals page as the
    // whole console (what a device with a mouse gets), and the home page
    // (every other page loads the whole console, on a phone too).
    const loads: [string, string, boolean][] = [
      ["approvals", "/approvals", true],
      ["call", `/resume/${eid}`, true],
      ["approvals (whole console)", "/approvals", false],
      ["home (whole console, a phone)", "/", true],
    ];
    for (const [label, path, touch] of loads) {
      // A new context each: its cache starts empty.
      const context = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: touch, hasTouch: touch });
      await context.addCookies([{ name, value, url: gh.url }]);
      const page = await context.newPage();
      const cold = await load(page, `${gh.url}${path}`);
      console.log(JSON.stringify({ bench: "cold-load", page: label, load: "cold", binary, ...cold }));
      const warm = await load(page, `${gh.url}${path}`);
      console.log(JSON.stringify({ bench: "cold-load", page: label, load: "warm", binary, ...warm }));
      await context.close();
    }
    await client.close();
  } finally {
    gh.stop();
  }
});
