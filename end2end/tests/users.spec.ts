// The users page end to end: an admin invites a user; in another browser the
// link sets a password and signs them in; the admin disables them, and their
// open page goes to sign-in at once. Also without JavaScript, and a plain
// user on their own account page (/account), who sees no users page.
import { test, expect, type Page, type Browser } from "@playwright/test";
import { spawnGatehouse, type Gatehouse } from "./gatehouse";

const PW = "a long enough password";
let gh: Gatehouse;

test.beforeAll(async () => {
  gh = await spawnGatehouse();
  gh.addUser("ada", PW, true);
  gh.addUser("bob", PW);
});
test.afterAll(() => gh.stop());

async function signIn(page: Page, user: string, password = PW, next = "/users") {
  await page.goto(`${gh.url}/sign-in?next=${next}`);
  await page.getByLabel("Username").fill(user);
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page).toHaveURL(`${gh.url}${next}`);
}

async function invite(page: Page, name: string): Promise<string> {
  await page.getByRole("textbox", { name: "Username" }).fill(name);
  await page.getByRole("button", { name: "Create invite link" }).click();
  await expect(page).toHaveURL(/\/users\?link=link_/);
  await expect(page.getByRole("heading", { name: `Invite link for ${name}` })).toBeVisible();
  const link = (await page.getByTestId("password-link").innerText()).trim();
  expect(link).toMatch(/\/set-password\?token=\S{40,}$/);
  return link;
}

async function choosePassword(browser: Browser, link: string, password: string, javaScriptEnabled = true) {
  const context = await browser.newContext({ javaScriptEnabled });
  const page = await context.newPage();
  await page.goto(link);
  await page.getByLabel("New password").fill(password);
  await page.getByRole("button", { name: "Set password and sign in" }).click();
  await expect(page).toHaveURL(`${gh.url}/`);
  return { context, page };
}

test("invite, the link sets a password and signs in, disabling sends their open page to sign-in", async ({ page, browser }) => {
  await signIn(page, "ada");
  await expect(page.locator(".live-status")).toHaveText("Live");
  const link = await invite(page, "grace");
  const row = page.getByRole("row").filter({ hasText: "grace" });
  await expect(row).toContainText("invited, link expires");

  // Grace, in her own browser, without signing in first.
  const grace = await choosePassword(browser, link, "grace's own password");
  await expect(grace.page.getByRole("navigation", { name: "Main" })).toBeVisible();
  // Her name in the header opens her account; the users page is not hers.
  const nav = grace.page.getByRole("navigation", { name: "Main" });
  await expect(nav.getByRole("link", { name: "Users" })).toHaveCount(0);
  await grace.page.getByTestId("signed-in-as").click();
  await expect(grace.page).toHaveURL(`${gh.url}/account`);
  await expect(grace.page.getByTestId("account-of")).toContainText("Signed in as grace.");
  await expect(grace.page.locator(".live-status")).toHaveText("Live");

  // The link worked once.
  const reuse = await browser.newContext();
  const again = await reuse.newPage();
  await again.goto(link);
  await expect(again.getByRole("heading", { name: "This link cannot be used" })).toBeVisible();
  await reuse.close();

  await page.reload();
  await expect(row).toContainText("active");
  await row.getByRole("button", { name: "Disable grace" }).click();
  await expect(row).toContainText("disabled");

  // Her open page goes to sign-in at once (its live stream says the session
  // ended), any navigation would too, and signing in fails.
  await expect(grace.page).toHaveURL(/\/sign-in\?next=%2Faccount/);
  await grace.page.goto(`${gh.url}/agents`);
  await expect(grace.page).toHaveURL(/\/sign-in\?next=%2Fagents/);
  await grace.page.getByLabel("Username").fill("grace");
  await grace.page.getByLabel("Password").fill("grace's own password");
  await grace.page.getByRole("button", { name: "Sign in" }).click();
  await expect(grace.page.getByRole("alert")).toContainText("did not match");
  await grace.context.close();

  // The change log says who did what.
  await expect(page.getByRole("region", { name: "Recent changes" })).toContainText("ada disable grace");
});

test("without JavaScript: invite, choose a password, reset, and the last admin stays", async ({ browser }) => {
  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  await signIn(page, "ada");
  const link = await invite(page, "noscript");
  const user = await choosePassword(browser, link, "noscript password", false);
  await user.context.close();

  await page.goto(`${gh.url}/users`);
  const row = page.getByRole("row").filter({ hasText: "noscript" });
  await row.getByRole("button", { name: "Reset password for noscript" }).click();
  await expect(page.getByRole("heading", { name: "Password reset link for noscript" })).toBeVisible();

  // The last admin's row does not offer what the server would refuse: it
  // says why instead (the server's refusal is tested in tests/api/users.rs).
  const me = page.getByRole("row").filter({ hasText: "ada" });
  await expect(me.getByTestId("last-admin")).toContainText("The only admin who can sign in");
  await expect(me.getByRole("button", { name: "Remove ada for good" })).toHaveCount(0);
  await expect(me.getByRole("button", { name: "Disable ada" })).toHaveCount(0);
  await expect(me.getByRole("button", { name: "Remove admin: ada" })).toHaveCount(0);
  await context.close();
});

test("a plain user changes their own password and signs out their other sessions on /account; /users is not theirs", async ({ page, browser }) => {
  const other = await browser.newContext();
  const otherPage = await other.newPage();
  await signIn(otherPage, "bob", PW, "/account");
  await expect(otherPage.locator(".live-status")).toHaveText("Live");
  await signIn(page, "bob", PW, "/users");
  await expect(page.getByRole("heading", { name: "Add a user" })).toHaveCount(0);
  await expect(page.getByRole("alert")).toContainText("only an admin may manage users");
  await page.getByRole("link", { name: "your account page" }).click();
  await expect(page).toHaveURL(`${gh.url}/account`);
  await expect(page.getByTestId("other-sessions")).toContainText("1 other browser");
  await page.getByRole("button", { name: "Sign out other sessions" }).click();
  await expect(page.getByRole("status").filter({ hasText: "Signed out 1 other session." })).toBeVisible();
  // The other browser's open page is told at once and reloads itself to sign-in
  // (reloading it from here too would race that navigation)...
  await expect(otherPage).toHaveURL(/\/sign-in/);
  // ...and its cookie opens nothing any more.
  await otherPage.goto(`${gh.url}/users`);
  await expect(otherPage).toHaveURL(/\/sign-in/);
  await other.close();

  await page.getByLabel("Current password").fill(PW);
  await page.getByLabel("New password (8 characters or more)").fill("bob's new password");
  await page.getByLabel("New password again").fill("bob's new password");
  await page.getByRole("button", { name: "Change password" }).click();
  await expect(page.getByRole("status").filter({ hasText: "Your password was changed" })).toBeVisible();
  await page.goto(`${gh.url}/account`);
  await expect(page.getByTestId("account-of")).toContainText("Signed in as bob.");
});
