// Two Gatehouse replicas on one PostgreSQL behind HAProxy (issue #13), set up
// by scripts/multi-replica.sh, which exports the variables below; without
// them (the plain `npx playwright test`) this file is skipped.
//
// What must hold across replicas, through the API and the Python SDK (no
// browser): the Python SDK client through the balancer; a credential revoked
// on B refused on A; a rule saved on B enforced on A; 100 decisions raced at
// both replicas; page streams nobody reads holding up no other; the Python SDK
// in native mode through the balancer.
//
// Every replica must be up: the script runs this file on its own, BEFORE
// multi-replica.spec.ts (which kills replica A), in a separate
// `npx playwright test` run; beforeAll refuses to start if A or B is down.
// Tests run in file order (one worker), each even if an earlier one failed.
import { test, expect } from "@playwright/test";
import { execFileSync, spawn } from "node:child_process";
import { openSync, readSync, closeSync, statSync } from "node:fs";
import { join } from "node:path";
import { root } from "./gatehouse";

const LB = process.env.GATEHOUSE_LB_URL ?? "";
const A = process.env.GATEHOUSE_A_URL ?? "";
const B = process.env.GATEHOUSE_B_URL ?? "";
const USER = process.env.GATEHOUSE_ADMIN_USER ?? "";
// The second admin (same password), who decides on B in the race.
const USER_B = process.env.GATEHOUSE_ADMIN_B_USER ?? "";
const PASSWORD = process.env.GATEHOUSE_ADMIN_PASSWORD ?? "";
const API_TOKEN = process.env.GATEHOUSE_API_TOKEN ?? "";
const DB = process.env.GATEHOUSE_DATABASE_URL ?? "";
const PYTHON = process.env.GATEHOUSE_PYTHON ?? "python3";
const LOGS: Record<string, string> = { A: process.env.GATEHOUSE_A_LOG ?? "", B: process.env.GATEHOUSE_B_LOG ?? "" };
const NAME: Record<string, string> = { [LB]: "LB", [A]: "A", [B]: "B" };
const PROTOCOL = "2025-11-25";

test.skip(!LB, "needs the replicas of scripts/multi-replica.sh (GATEHOUSE_LB_URL)");

test.beforeAll(async () => {
  for (const v of ["GATEHOUSE_A_URL", "GATEHOUSE_B_URL", "GATEHOUSE_ADMIN_B_USER", "GATEHOUSE_DATABASE_URL"])
    expect(process.env[v], `${v} (exported by scripts/multi-replica.sh)`).toBeTruthy();
  for (const base of [A, B]) {
    const status = await fetch(`${base}/readyz`).then((r) => r.status, (e: unknown) => String(e));
    expect(status, `replica ${NAME[base]} must be up: run this file before multi-replica.spec.ts`).toBe(200);
  }
});

// On a failure, the replicas' warnings and errors written during that test.
const logMarks: Record<string, number> = {};
test.beforeEach(() => {
  for (const [name, file] of Object.entries(LOGS)) logMarks[name] = file ? statSync(file).size : 0;
});
test.afterEach(({}, testInfo) => {
  if (testInfo.status === testInfo.expectedStatus) return;
  for (const [name, file] of Object.entries(LOGS)) {
    if (!file) continue;
    const size = statSync(file).size - logMarks[name];
    const buf = Buffer.alloc(Math.max(size, 0));
    const fd = openSync(file, "r");
    readSync(fd, buf, 0, buf.length, logMarks[name]);
    closeSync(fd);
    const lines = buf.toString().split("\n").filter((l) => /WARN|ERROR|panick/.test(l));
    for (const l of lines.slice(-20)) console.log(`  ${name}: ${l}`);
  }
});

const log = (m: string) => console.log(`  ${m}`);
const sleep = (ms: number) => new Promise((ok) => setTimeout(ok, ms));
const short = (text: string, n = 300) => (text.length <= n ? text : `${text.slice(0, n)}…`);
const pick = <T>(xs: T[]): T => xs[Math.floor(Math.random() * xs.length)];
function shuffle<T>(xs: T[]): T[] {
  for (let i = xs.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [xs[i], xs[j]] = [xs[j], xs[i]];
  }
  return xs;
}
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;

/** One HTTP request: status and body text (a JSON body is sent as JSON). */
async function req(
  base: string,
  method: string,
  path: string,
  opts: { body?: unknown; headers?: Record<string, string>; timeout?: number } = {},
) {
  const headers: Record<string, string> = { ...opts.headers };
  let body: string | undefined;
  if (typeof opts.body === "string") body = opts.body;
  else if (opts.body !== undefined) {
    body = JSON.stringify(opts.body);
    headers["content-type"] ??= "application/json";
  }
  const signal = AbortSignal.timeout(opts.timeout ?? 60_000);
  const r = await fetch(`${base}${path}`, { method, headers, body, signal });
  return { status: r.status, headers: r.headers, text: await r.text() };
}

/** A session cookie of `user` (an admin), signed in on `base`. */
async function signIn(base: string, user = USER): Promise<string> {
  const r = await fetch(`${base}/api/auth/sign-in`, {
    method: "POST",
    headers: { "content-type": "application/json", origin: base },
    body: JSON.stringify({ username: user, password: PASSWORD }),
  });
  expect(r.status, `sign-in of ${user} on ${NAME[base]}: ${await r.clone().text()}`).toBe(200);
  return r.headers
    .getSetCookie()
    .map((c) => c.split(";")[0])
    .join("; ");
}

/** A new agent credential owned by the admin (admin API, through the balancer). */
async function issue(agent: string): Promise<{ id: string; token: string }> {
  const r = await req(LB, "POST", "/api/credentials", {
    body: { agent, owner: USER },
    headers: { authorization: `Bearer ${API_TOKEN}` },
  });
  expect(r.status, `POST /api/credentials: ${short(r.text)}`).toBe(201);
  return JSON.parse(r.text);
}

/** The gatehouse_* samples of `base`'s /metrics. */
async function metrics(base: string): Promise<Record<string, number>> {
  const r = await req(base, "GET", "/metrics", { headers: { authorization: `Bearer ${API_TOKEN}` } });
  expect(r.status, `/metrics on ${NAME[base]}: ${short(r.text)}`).toBe(200);
  const out: Record<string, number> = {};
  for (const line of r.text.split("\n")) {
    const m = line.match(/^(gatehouse_[a-z_]+)(\{[^}]*\})? (\S+)$/);
    if (m) out[m[1] + (m[2] ?? "")] = Number(m[3]);
  }
  return out;
}

/** Rows of a query on the run's database (psql, tab-separated). */
function psql(sql: string): string[][] {
  const out = execFileSync("psql", [DB, "-X", "-At", "-F", "\t", "-c", sql], { encoding: "utf8" });
  return out
    .split("\n")
    .filter((l) => l)
    .map((l) => l.split("\t"));
}

/** Runs a Python script with the project's venv python; its exit code and its
 * output's last 15 lines (an SDK's traceback is long; its assertion is at the end). */
function python(args: string[], timeout = 90_000): Promise<{ code: number | null; tail: string }> {
  return new Promise((ok) => {
    const child = spawn(PYTHON, args, { stdio: ["ignore", "pipe", "pipe"], timeout });
    let out = "";
    child.stdout.on("data", (c) => (out += c));
    child.stderr.on("data", (c) => (out += c));
    child.on("close", (code, signal) =>
      ok({ code: code ?? (signal ? -1 : null), tail: out.trimEnd().split("\n").slice(-15).join("\n") }),
    );
  });
}

/** A bare MCP client: 2025-11-25, no capabilities (so gated calls answer in
 * browser mode at once), one JSON-RPC request per HTTP request. */
class Session {
  sid?: string;
  next = 0;
  constructor(
    readonly base: string,
    readonly token: string,
  ) {}

  headers(): Record<string, string> {
    const h: Record<string, string> = {
      authorization: `Bearer ${this.token}`,
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": PROTOCOL,
    };
    if (this.sid) h["mcp-session-id"] = this.sid;
    return h;
  }

  post(message: unknown, timeout = 60_000) {
    return req(this.base, "POST", "/mcp", { body: message, headers: this.headers(), timeout });
  }

  /** HTTP status and the JSON-RPC response (or `{http_body}`). */
  async rpc(method: string, params: unknown = {}, timeout = 60_000): Promise<{ status: number; msg: Json }> {
    const id = ++this.next;
    const r = await this.post({ jsonrpc: "2.0", id, method, params }, timeout);
    if (r.status !== 200) return { status: r.status, msg: { http_body: short(r.text) } };
    if ((r.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
      for (const event of r.text.split("\n\n")) {
        const data = event
          .split("\n")
          .filter((l) => l.startsWith("data:"))
          .map((l) => l.slice(5).trimStart())
          .join("\n");
        if (!data) continue;
        const msg = JSON.parse(data);
        if (msg.id === id && ("result" in msg || "error" in msg)) return { status: r.status, msg };
      }
      throw new Error(`${method} on ${NAME[this.base]}: no response in the stream: ${short(r.text)}`);
    }
    return { status: r.status, msg: JSON.parse(r.text) };
  }

  /** initialize + notifications/initialized; the initialize's HTTP status. */
  async initialize(): Promise<number> {
    const params = { protocolVersion: PROTOCOL, capabilities: {}, clientInfo: { name: "multi-replica", version: "1" } };
    const r = await this.post({ jsonrpc: "2.0", id: 0, method: "initialize", params });
    if (r.status !== 200) return r.status;
    this.sid = r.headers.get("mcp-session-id") ?? undefined;
    expect(this.sid, `initialize on ${NAME[this.base]}: no mcp-session-id`).toBeTruthy();
    const ack = await this.post({ jsonrpc: "2.0", method: "notifications/initialized" });
    expect(ack.status, `notifications/initialized on ${NAME[this.base]}: ${short(ack.text)}`).toBe(202);
    return r.status;
  }

  async call(name: string, args: unknown, timeout = 60_000): Promise<Json> {
    const { status, msg } = await this.rpc("tools/call", { name, arguments: args }, timeout);
    expect(status, `tools/call ${name} on ${NAME[this.base]}: ${JSON.stringify(msg)}`).toBe(200);
    expect(msg.result, `tools/call ${name} on ${NAME[this.base]}: ${JSON.stringify(msg)}`).toBeDefined();
    return msg.result;
  }
}

/** A new agent's MCP session on `base`. */
async function sessionOn(base: string, agent: string): Promise<Session> {
  const s = new Session(base, (await issue(agent)).token);
  expect(await s.initialize(), `initialize on ${NAME[base]}`).toBe(200);
  return s;
}

/** Polls `ok` every 100 ms for 5 s: seconds until it held, or null. */
async function within5s(ok: () => Promise<boolean>, since: number): Promise<string | null> {
  for (let i = 0; i < 50; i++) {
    await sleep(100);
    if (await ok()) return ((performance.now() - since) / 1000).toFixed(1);
  }
  return null;
}

test("the Python SDK client works through the balancer, session-less (2026-07-28) and in a session (2025-11-25)", async () => {
  const { token } = await issue("py-agent");
  const { code, tail } = await python([join(root, "end2end/clients/python_client.py"), `${LB}/mcp`, token, "py-agent"]);
  console.log(tail);
  expect(code, `python_client.py exited ${code}:\n${tail}`).toBe(0);
});

test("a credential revoked on replica B is refused with 401 by replica A at A's next request", async () => {
  const issued = await issue("mr-revoke");
  const s = new Session(A, issued.token);
  expect(await s.initialize(), "initialize on A").toBe(200);
  let { status, msg } = await s.rpc("tools/list");
  expect(status, `tools/list on A before the revoke: ${JSON.stringify(msg)}`).toBe(200);
  expect(msg.result, `tools/list on A before the revoke: ${JSON.stringify(msg)}`).toBeDefined();

  const auth = { authorization: `Bearer ${API_TOKEN}` };
  const del = await req(B, "DELETE", `/api/credentials/${issued.id}`, { headers: auth });
  expect(del.status, `DELETE /api/credentials/${issued.id} on B: ${short(del.text)}`).toBe(200);
  const revokedAt = performance.now();
  ({ status, msg } = await s.rpc("tools/list"));
  const took = performance.now() - revokedAt;
  if (status !== 401) {
    // How long until it is refused (for the report), then fail.
    const later = await within5s(async () => (await s.rpc("tools/list")).status === 401, revokedAt);
    throw new Error(
      `A's next request after the revoke on B got ${status}, not 401 (${JSON.stringify(msg)}); ` +
        (later ? `refused ${later} s after the revoke` : "still accepted 5 s after the revoke"),
    );
  }
  log(`revoked on B, A's existing session refused at its next request: 401 (${took.toFixed(0)} ms after the revoke)`);
  const fresh = (base: string) => new Session(base, issued.token).initialize();
  expect(await fresh(A), "a new session on A with the revoked token").toBe(401);
  expect(await fresh(LB), "a new session through the balancer with the revoked token").toBe(401);
  log("a new session on A and through the balancer: 401");
});

test("a policy rule saved on replica B is enforced on replica A at A's next call, and its removal too", async () => {
  const tool = "gatehouse_audit_recent";
  const cookieB = await signIn(B);
  const policyFn = async (fn: string, fields: Record<string, string>) => {
    const r = await req(B, "POST", `/api/fn/${fn}`, {
      body: new URLSearchParams(fields).toString(),
      headers: {
        "content-type": "application/x-www-form-urlencoded",
        origin: B,
        cookie: cookieB,
        accept: "application/json",
      },
    });
    expect(r.status, `/api/fn/${fn} on B: ${short(r.text)}`).toBe(200);
  };
  const blocked = (result: Json) =>
    Boolean(result.isError) && JSON.stringify(result.content ?? []).toLowerCase().includes("block");
  const s = await sessionOn(A, "mr-policy");
  let r = await s.call(tool, {});
  expect(r.isError, `${tool} on A before any rule: ${JSON.stringify(r)}`).toBeFalsy();

  await policyFn("policy_save", { "draft[pattern]": tool, "draft[action]": "block" });
  let saved = true;
  try {
    const savedAt = performance.now();
    r = await s.call(tool, {});
    const took = performance.now() - savedAt;
    if (!blocked(r)) {
      const later = await within5s(async () => blocked(await s.call(tool, {})), savedAt);
      throw new Error(
        `rule \`${tool} → block\` saved on B: A's next call still ran (${short(JSON.stringify(r))}); ` +
          (later ? `blocked ${later} s later` : "still not blocked 5 s later"),
      );
    }
    log(`rule \`${tool} → block\` saved on B: A's next call is blocked (${took.toFixed(0)} ms after the save)`);
    const { msg } = await s.rpc("tools/list");
    const names = (msg.result?.tools ?? []).map((t: Json) => t.name);
    expect(names, `A still lists ${tool} after the rule saved on B`).not.toContain(tool);
    log(`A no longer lists ${tool}`);

    await policyFn("policy_remove", { pattern: tool });
    saved = false;
    r = await s.call(tool, {});
    const refused = `rule removed on B: A's next call of ${tool} still refused: ${short(JSON.stringify(r))}`;
    expect(r.isError, refused).toBeFalsy();
    log("rule removed on B: A's next call runs again");
  } finally {
    if (saved) await policyFn("policy_remove", { pattern: tool }).catch(() => {});
  }
});

/** Both replicas' (approval_store_entries, approvals_pending), once both are
 * (0, 0) or 15 s have passed. */
async function settleGauges(): Promise<Record<string, [number, number]>> {
  const deadline = performance.now() + 15_000;
  for (;;) {
    const got: Record<string, [number, number]> = {};
    for (const base of [A, B]) {
      const m = await metrics(base);
      got[NAME[base]] = [m.gatehouse_approval_store_entries, m.gatehouse_approvals_pending];
    }
    if (Object.values(got).every(([e, p]) => e === 0 && p === 0) || performance.now() > deadline) return got;
    await sleep(200);
  }
}

test("100 decisions raced at both replicas on 20 paused calls: one outcome, one audit row each, nothing left", async () => {
  test.setTimeout(180_000);
  const n = 20;
  const run = Math.floor(Math.random() * (1 << 24)).toString(16).padStart(6, "0");
  // The admin decides on A, the second admin on B: the audit row's actor
  // names the replica whose decision won.
  const cookies: Record<string, string> = { [A]: await signIn(A), [B]: await signIn(B, USER_B) };
  // max_executions_per_credential is 20: two agents, ten calls each.
  const sessions = [await sessionOn(A, "mr-race-0"), await sessionOn(A, "mr-race-1")];
  const executions: { s: Session; eid: string }[] = [];
  for (let k = 0; k < n; k++) {
    const s = sessions[k % 2];
    const r = await s.call("gatehouse_policy_set", { pattern: `mr_race_${run}_${k}`, action: "allow" });
    const sc = r.structuredContent ?? {};
    expect(sc.status, `gated call ${k} on A did not pause: ${short(JSON.stringify(r))}`).toBe("user_approval_required");
    executions.push({ s, eid: sc.executionId });
  }
  const ids = executions.map((e) => e.eid);
  log(`${n} gated calls paused through A`);
  const [ma, mb] = [await metrics(A), await metrics(B)];
  log(
    `before the race, gatehouse_approvals_pending: A ${ma.gatehouse_approvals_pending}, ` +
      `B ${mb.gatehouse_approvals_pending} (B shows A's calls only if it mirrors them)`,
  );

  // Five decisions per call (at least two of each kind), on A and B.
  const plan: { eid: string; action: string; base: string }[] = [];
  for (const eid of ids) {
    const actions = shuffle(["accept", "decline", pick(["accept", "decline"]), ...shuffle(["accept", "decline"])]);
    const bases = shuffle([A, B, A, B, pick([A, B])]);
    actions.forEach((action, i) => plan.push({ eid, action, base: bases[i] }));
  }
  shuffle(plan);
  // All at once: every request is sent before any answer is read.
  const results = await Promise.all(
    plan.map(async ({ eid, action, base }) => {
      const t = performance.now();
      let status: number, text: string;
      try {
        ({ status, text } = await req(base, "POST", `/api/executions/${eid}/resume`, {
          body: { action },
          headers: { origin: base, cookie: cookies[base] },
        }));
      } catch (e) {
        [status, text] = [-1, String(e)];
      }
      return { eid, action, where: NAME[base], status, text, ms: performance.now() - t };
    }),
  );
  const parse = (text: string): Json => {
    try {
      return JSON.parse(text);
    } catch {
      return {};
    }
  };
  const count = (keys: string[]) => {
    const tally: Record<string, number> = {};
    for (const k of keys) tally[k] = (tally[k] ?? 0) + 1;
    return Object.fromEntries(Object.entries(tally).sort());
  };
  const slowest = Math.max(...results.map((r) => r.ms));
  const statuses = JSON.stringify(count(results.map((r) => String(r.status))));
  log(`${results.length} decisions fired at A and B at once: statuses ${statuses}, slowest ${slowest.toFixed(0)} ms`);
  const detail = (text: string) => parse(text).message ?? parse(text).state ?? short(text, 60);
  const answers = count(results.map((r) => `${r.where} ${r.status} ${detail(r.text)}`));
  for (const [key, c] of Object.entries(answers)) log(`  ${String(c).padStart(3)} × ${key}`);

  const problems: string[] = [];
  const outcome: Record<string, string> = {};
  for (const eid of ids) {
    const mine = results.filter((r) => r.eid === eid);
    const states = new Set(mine.filter((r) => r.status === 200).map((r) => String(parse(r.text).state)));
    if (states.size !== 1) {
      const tried = mine.map((r) => `${r.action}@${r.where}→${r.status} ${short(r.text, 120)}`).join("; ");
      problems.push(`${eid}: ${states.size} outcomes [${[...states].sort()}]: ${tried}`);
      continue;
    }
    const state = [...states][0];
    outcome[eid] = state;
    const winner = ({ approved: "accept", declined: "decline" } as Record<string, string>)[state];
    for (const r of mine) {
      const want = r.action === winner ? 200 : 409;
      const body = parse(r.text);
      if (r.status !== want)
        problems.push(`${eid} (${state}): ${r.action} on ${r.where} got ${r.status}, not ${want}: ${short(r.text, 160)}`);
      else if (r.status === 409 && body.error !== "conflict")
        problems.push(`${eid}: 409 without error=conflict: ${short(r.text, 160)}`);
      else if (r.status === 409 && String(body.message ?? "").includes("pending"))
        // A conflict names the decision that won; "already pending" refuses
        // a decision while none has been taken.
        problems.push(`${eid} (${state}): ${r.action} on ${r.where} refused while undecided: ${short(r.text, 160)}`);
    }
  }
  const decided = Object.keys(outcome).length;
  log(`outcomes: ${JSON.stringify(count(Object.values(outcome)))} on ${decided} of ${n} executions`);

  // The audit log: exactly one decision row per execution, the outcome's.
  const quoted = ids.map((e) => `'${e.replaceAll("'", "''")}'`).join(", ");
  const rows = psql(
    "SELECT execution_id, state, actor FROM audit_events WHERE state IN ('approved', 'declined') " +
      `AND execution_id IN (${quoted}) ORDER BY id`,
  );
  for (const eid of ids) {
    const got = rows.filter(([e]) => e === eid);
    if (got.length !== 1) problems.push(`${eid}: ${got.length} decision rows in audit_events: ${JSON.stringify(got)}`);
    else if (eid in outcome && got[0][1] !== outcome[eid])
      problems.push(`${eid}: audit_events says ${got[0][1]}, the API said ${outcome[eid]}`);
  }
  const onB = rows.filter(([, , actor]) => actor.startsWith(`user:${USER_B}#`)).length;
  log(
    `audit_events: ${rows.length} decision rows for ${n} executions; ` +
      `the winning decision was made on A ${rows.length - onB}, on B ${onB} times`,
  );

  // Both replicas' view of each execution agrees with the outcome.
  for (const eid of ids) {
    const views: Record<string, string> = {};
    for (const base of [A, B]) {
      const r = await req(base, "GET", `/api/executions/${eid}`, { headers: { cookie: cookies[base] } });
      views[NAME[base]] = r.status === 200 ? parse(r.text).state : `HTTP ${r.status}`;
    }
    if (views.A !== views.B || (eid in outcome && views.A !== outcome[eid]))
      problems.push(`${eid}: A shows ${views.A}, B shows ${views.B}, the decision said ${outcome[eid]}`);
  }

  // Settle every call: the agent resumes each (an approved one runs, a
  // declined one answers execution_declined); one still pending (a failed
  // race) is declined on A first so nothing is left behind.
  for (const { s, eid } of executions) {
    if (!(eid in outcome)) {
      const r = await req(A, "POST", `/api/executions/${eid}/resume`, {
        body: { action: "decline" },
        headers: { origin: A, cookie: cookies[A] },
      });
      if (r.status !== 200 && r.status !== 409) {
        problems.push(`${eid}: no outcome, and declining it on A afterwards got ${r.status}: ${short(r.text, 160)}`);
        continue;
      }
    }
    const r = await s.call("resume", { executionId: eid }, 90_000);
    const sc = r.structuredContent ?? {};
    if (outcome[eid] === "approved" && r.isError)
      problems.push(`${eid}: approved, but resume on A failed: ${short(JSON.stringify(r), 200)}`);
    if (outcome[eid] === "declined" && sc.error !== "execution_declined")
      problems.push(`${eid}: declined, but resume on A said ${short(JSON.stringify(r), 200)}`);
  }
  const gauges = await settleGauges();
  log(`after resuming: (approval_store_entries, approvals_pending) A (${gauges.A.join(", ")}), B (${gauges.B.join(", ")})`);
  for (const [where, [entries, pending]] of Object.entries(gauges))
    if (entries !== 0 || pending !== 0)
      problems.push(
        `replica ${where} still holds (store entries, pending) = (${entries}, ${pending}) 15 s after every call settled`,
      );

  for (const p of problems.slice(0, 40)) log(`PROBLEM: ${p}`);
  if (problems.length > 40) log(`… and ${problems.length - 40} more`);
  expect(problems.length, `${problems.length} problems in the race (listed above)`).toBe(0);
  log("one outcome per execution, one decision row each, no entry left on either replica");
});

test("eight page streams through the balancer that nobody reads hold up no other stream", async () => {
  // Eight streams nobody reads, and one that must still get every change
  // while 200 calls come to wait (≈ 20 bursts of the admin's 24 KiB inbox:
  // far more than the stalled ones' buffers hold).
  test.setTimeout(180_000);
  const cookie = await signIn(LB);
  const stalled = spawn(PYTHON, [join(root, "end2end/fixtures/stalled_streams.py"), LB, "8"], {
    env: { ...process.env, GATEHOUSE_COOKIE: cookie },
    stdio: ["pipe", "pipe", "pipe"],
  });
  const reader = new AbortController();
  try {
    let out = "";
    stalled.stdout.on("data", (c) => (out += c));
    stalled.stderr.on("data", (c) => (out += c));
    const exited = new Promise((ok) => stalled.on("exit", ok));
    const opened = await Promise.race([
      (async () => {
        while (!out.includes("open 8")) await sleep(50);
        return true;
      })(),
      exited.then(() => false),
      sleep(15_000).then(() => false),
    ]);
    expect(opened, `the eight stalled streams did not open: ${out}`).toBe(true);

    const r = await fetch(`${LB}/api/live/events`, { headers: { cookie }, signal: reader.signal });
    expect(r.status, "/api/live/events through the balancer").toBe(200);
    const totals: number[] = [];
    void (async () => {
      const decoder = new TextDecoder();
      let pending = "";
      try {
        for await (const chunk of r.body!) {
          pending += decoder.decode(chunk, { stream: true });
          const lines = pending.split("\n");
          pending = lines.pop()!;
          for (const line of lines) {
            const m = line.match(/"total":(\d+)/);
            if (m) totals.push(Number(m[1]));
          }
        }
      } catch {
        // the stream is aborted at the end
      }
    })();
    for (let t = performance.now(); !totals.length && performance.now() - t < 15_000; ) await sleep(50);
    expect(totals.length, "the reading stream never got its first inbox").toBeGreaterThan(0);
    const before = totals.at(-1)!;

    // Ten agents, twenty waiting calls each (the default per-credential limit).
    const started = performance.now();
    const calls: { s: Session; eid: string }[] = [];
    for (let agent = 0; agent < 10; agent++) {
      const s = await sessionOn(LB, `mr-stalled-${agent}`);
      for (let i = 0; i < 20; i++) {
        const res = await s.call("gatehouse_policy_set", { pattern: `mr_stalled_${agent}_${i}`, action: "allow" });
        const eid = res.structuredContent?.executionId;
        expect(eid, `call ${i} of agent ${agent} did not pause: ${short(JSON.stringify(res), 200)}`).toBeTruthy();
        calls.push({ s, eid });
        if (i % 10 === 9) await sleep(150); // past the streams' 100 ms coalescing window: one more burst
      }
    }
    const made = performance.now();
    while (totals.at(-1)! < before + 200 && performance.now() - made < 30_000) await sleep(100);
    const seen = totals.at(-1)!;
    const secs = (ms: number) => (ms / 1000).toFixed(1);
    log(
      `200 calls made in ${secs(made - started)} s; ${secs(performance.now() - made)} s later ` +
        `the reader counted ${seen - before} of them`,
    );
    expect(stalled.exitCode, `the stalled streams' process ended early: ${out}`).toBeNull();
    reader.abort();
    stalled.kill();
    await exited;

    const cookieA = await signIn(A);
    for (const { s, eid } of calls) {
      const d = await req(A, "POST", `/api/executions/${eid}/resume`, {
        body: { action: "decline" },
        headers: { origin: A, cookie: cookieA },
      });
      expect([200, 409], `declining ${eid} afterwards: ${d.status} ${short(d.text, 160)}`).toContain(d.status);
      // The agent takes its answer, so the replicas hold nothing afterwards.
      await s.call("resume", { executionId: eid }, 90_000);
    }
    expect(
      seen,
      `with 8 streams stalled, the reading one saw ${seen - before} of the 200 new waiting calls ` +
        `(${totals.length} inbox events): a stalled reader held up another stream`,
    ).toBeGreaterThanOrEqual(before + 200);
    log(`8 streams stalled; the reading one got ${totals.length} inbox events, the last counting all ${seen} waiting`);
  } finally {
    reader.abort();
    if (stalled.exitCode === null && stalled.signalCode === null) stalled.kill();
  }
});

test("the Python SDK in native mode through the balancer: a gated call approved, one declined, on both replicas", async () => {
  // Runs after the race (file order): a call left waiting here would have
  // been counted in the race's gauges.
  const cookie = await signIn(LB);
  const { token } = await issue("py-native");
  const { code, tail } = await python([join(root, "end2end/clients/python_native.py"), LB, token, cookie]);
  console.log(tail);
  expect(code, `python_native.py exited ${code}:\n${tail}`).toBe(0);
});
