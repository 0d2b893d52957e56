// Tool profiles end to end: an admin writes one on the policies page, a real
// client of the agent it names sees only what it lists, the agents page
// names the profile, the tools page shows the list as that agent sees it,
// and removing the profile gives the agent its tools back.
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

const signIn = (page: Page, user: string, next: string) => signInPage(page, gh, user, PW, next);

test("a profile written on the console narrows what the agent sees, and the pages say so", async ({ page }) => {
  const issued = gh.issueToken("bob-bot", ["--owner", "bob"]);
  const { client } = await connectClient(issued.endpoint, issued.token, "profile-client");
  const names = async () => (await client.listTools()).tools.map((t) => t.name).sort();
  expect((await names()).length).toBeGreaterThan(3);

  await signIn(page, "ada", "/policies");
  await expect(page.locator(".live-status")).toHaveText("Live");
  const form = page.getByRole("form", { name: "Profile" });
  await form.locator("#profile-name").fill("status only");
  await form.locator("#profile-owners").fill("bob");
  await form.locator("#profile-tools").fill("gatehouse_status*");
  await form.getByRole("button", { name: "Save profile" }).click();
  // A refused field says why beside it, and keeps what was typed.
  await expect(page.getByRole("list", { name: "Tool profiles" }).locator('[data-profile="status only"]')).toContainText(
    "gatehouse_status*",
  );
  await form.locator("#profile-name").fill("broken");
  await form.locator("#profile-tools").fill("a*b");
  await form.getByRole("button", { name: "Save profile" }).click();
  await expect(form.locator(".field-error")).toHaveText('"a*b": write `*`, an exact name, or `prefix*`.');
  await expect(page.getByTestId("outcome")).toHaveText("Not saved: the marked field needs a change.");
  await expect(form.locator("#profile-tools")).toHaveValue("a*b");

  // The agent's real client: only what the profile lists (and resume).
  await expect.poll(names).toEqual(["gatehouse_status", "resume"]);
  const refused = await client.callTool({ name: "gatehouse_audit_recent", arguments: {} });
  expect(refused.isError).toBe(true);
  expect(JSON.stringify(refused.content)).toContain('profile \\"status only\\"');

  // The agents page names the profile; its link shows the agent's list.
  await page.goto(gh.url + "/agents");
  const card = page.locator('section.agent[data-agent="bob-bot"]');
  await expect(card.locator(".agent-profile")).toContainText("Profile status only");
  await card.getByRole("link", { name: "Its tools" }).click();
  await expect(page.getByRole("heading", { name: /Tools bob\/bob-bot sees \(2\)/ })).toBeVisible();
  await expect(page.locator(".seen-as")).toContainText("Held to profile status only");
  // Back to everyone's list with the picker.
  await page.getByLabel("As agent").selectOption("");
  await expect(page.getByRole("heading", { name: /Exposed tools/ })).toBeVisible();

  await page.goto(gh.url + "/policies");
  const profiles = page.getByRole("list", { name: "Tool profiles" });
  await profiles.locator('[data-profile="status only"]').getByRole("button", { name: "Remove" }).click();
  await expect(profiles).toHaveCount(0);
  await expect.poll(async () => (await names()).length).toBeGreaterThan(3);
  await client.close();
});

test("a plain user sees the profiles but cannot change them", async ({ page }) => {
  await signIn(page, "bob", "/policies");
  await expect(page.getByRole("heading", { name: "Tool profiles" })).toBeVisible();
  await expect(page.getByText("Only admins change profiles.")).toBeVisible();
  await expect(page.getByRole("form", { name: "Profile" })).toHaveCount(0);
});
