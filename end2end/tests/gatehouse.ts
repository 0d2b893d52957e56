// Starts the real gatehouse binary on a free port with a fresh data dir
// (the end-to-end twin of the Rust tests' spawn_app).
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { expect, type Page } from "@playwright/test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

export const root = resolve(import.meta.dirname, "..", "..");
export const BIN =
  process.env.GATEHOUSE_BIN ?? join(process.env.CARGO_TARGET_DIR ?? join(root, "target"), "release", "gatehouse");

export interface Gatehouse {
  url: string;
  addUser(name: string, password: string, admin?: boolean): void;
  signIn(name: string, password: string): Promise<string>;
  setupLink: string;
  dataDir: string;
  cli(...args: string[]): string;
  issueToken(agent: string, extra?: string[]): { id: string; token: string; endpoint: string };
  stop(): void;
}

export async function spawnGatehouse(env: Record<string, string> = {}, config?: string): Promise<Gatehouse> {
  const dataDir = mkdtempSync(join(tmpdir(), "gatehouse-e2e-"));
  const configArgs: string[] = [];
  if (config !== undefined) {
    writeFileSync(join(dataDir, "gatehouse.toml"), config);
    configArgs.push("--config", join(dataDir, "gatehouse.toml"));
  }
  const proc: ChildProcess = spawn(BIN, ["--listen", "127.0.0.1:0", "--data-dir", dataDir, ...configArgs], {
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, ...env },
  });
  let out = "";
  const banner = await new Promise<string>((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`gatehouse did not start: ${out}`)), 15_000);
    proc.stdout!.on("data", (chunk) => {
      out += chunk.toString();
      if (out.includes("token issue")) {
        clearTimeout(timer);
        ok(out);
      }
    });
    proc.on("exit", (code) => fail(new Error(`gatehouse exited with ${code}: ${out}`)));
  });
  const url = banner.match(/listening on (http:\/\/\S+)/)![1];
  const setupLink = banner.match(/(http:\/\/\S+\/setup\?token=\S+)/)?.[1] ?? "";
  const cli = (...args: string[]) => execFileSync(BIN, ["--data-dir", dataDir, ...args], { encoding: "utf8" });
  return {
    url,
    addUser: (name, password, admin = false) => {
      execFileSync(BIN, ["--data-dir", dataDir, "user", "add", name, ...(admin ? ["--admin"] : []), "--password-stdin"], {
        input: password,
      });
    },
    signIn: async (username, password) => {
      const r = await fetch(`${url}/api/auth/sign-in`, {
        method: "POST",
        headers: { "content-type": "application/json", origin: url },
        body: JSON.stringify({ username, password }),
      });
      if (r.status !== 200) throw new Error(`sign-in failed: ${r.status}`);
      return r.headers.get("set-cookie")!.split(";")[0];
    },
    setupLink,
    dataDir,
    cli,
    issueToken: (agent, extra = []) => {
      const issued = JSON.parse(cli("token", "issue", "--agent", agent, "--json", ...extra));
      return { ...issued, endpoint: `${url}/mcp` };
    },
    stop: () => {
      proc.kill();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** Connects the official TypeScript SDK client with a bearer token. */
export async function connectClient(endpoint: string, token: string, name = "e2e-ts-client") {
  const client = new Client({ name, version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(endpoint), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  return { client, transport };
}

/** Signs `page` in through the sign-in form and lands on `next`. */
export async function signInPage(page: Page, gh: Gatehouse, user: string, password: string, next = "/") {
  await page.goto(`${gh.url}/sign-in?next=${encodeURIComponent(next)}`);
  await page.getByLabel("Username").fill(user);
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page).toHaveURL(`${gh.url}${next}`);
}
