// Expiry that informs (issue #12): a pending call nearing its expiry is
// highlighted on the Approvals page, and the highlight follows the browser's
// clock after hydration — no refetch, no new event.
import { test, expect } from "@playwright/test";
import { spawnGatehouse, connectClient, signInPage, type Gatehouse } from "./gatehouse";

const PW = "a long enough password";
let gh: Gatehouse;

// 125 s: not yet in its last 2 minutes when it opens, within them 5 s later.
const CONFIG = `
[[policy]]
pattern = "gatehouse_policy_set"
action = "require_approval"
approval_ttl = "125s"
`;

test.beforeAll(async () => {
  gh = await spawnGatehouse({}, CONFIG);
  gh.addUser("ada", PW, true);
});
test.afterAll(() => gh.stop());

test("a call about to expire is highlighted as time passes, without a refetch", async ({ page }) => {
  const issued = gh.issueToken("expiring-agent", ["--owner", "ada"]);
  const { client } = await connectClient(issued.endpoint, issued.token);
  const result = await client.callTool({ name: "gatehouse_policy_set", arguments: { pattern: "soon_*", action: "allow" } });
  const { executionId } = result.structuredContent as { executionId: string };

  await signInPage(page, gh, "ada", PW, "/approvals");
  const card = page.locator(`li[data-execution-id="${executionId}"]`);
  await expect(card).toHaveAttribute("data-expiring", "false");
  // Nothing is fetched from here on: the page's own clock moves it.
  let fetched = 0;
  page.on("request", (r) => {
    if (!r.url().includes("/events")) fetched += 1;
  });
  await expect(card).toHaveAttribute("data-expiring", "true", { timeout: 15_000 });
  await expect(card).toHaveClass(/expiring/);
  expect(fetched).toBe(0);
  await client.close();
});
