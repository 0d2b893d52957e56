#!/usr/bin/env node
// An MCP client that signs in to Gatehouse with OAuth 2.1, the way a real
// one does: the official TypeScript SDK (@modelcontextprotocol/sdk) with an
// in-memory OAuthClientProvider and a loopback callback server (RFC 8252).
//
//   node oauth_client.mjs <base>/mcp [--client-name NAME] [--callback-port N]
//                          [--client-metadata-url URL]
//
// Without --client-metadata-url it registers itself (RFC 7591 dynamic client
// registration); with it, its client_id is that URL (a Client ID Metadata
// Document, which Gatehouse fetches).
//
// It speaks JSON lines. On stdout, one event a line:
//   {"event":"authorize","url":...}      open this in a browser
//   {"event":"callback","state_ok":true,"iss":...,"code"|"error":...}
//   {"event":"ready","tools":[names],"clientId":...}   signed in and connected
//   {"event":"result","id":...,"result":...} / {"event":"error","id":...,"message":...}
//   {"event":"failed","message":...}     sign-in failed (then it exits 1)
// On stdin, one command a line, each answered by a result or error event:
//   {"id":1,"call":{"name":...,"arguments":{...}}}    tools/call
//   {"id":2,"list":true}                               tools/list
//   {"id":3,"tokens":true}   the tokens it holds (to test refresh and revocation)
//   {"id":4,"refresh":true}  runs the SDK's auth() to refresh the access token
//   {"id":5,"reconnect":true} a new transport and session with the tokens it holds
// It exits when stdin closes.
import { createServer } from "node:http";
import { randomBytes } from "node:crypto";
import { createInterface } from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError, auth } from "@modelcontextprotocol/sdk/client/auth.js";

const argv = process.argv.slice(2);
const opt = (name, fallback) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : fallback;
};
const serverUrl = new URL(argv.find((a) => !a.startsWith("--") && /^https?:/.test(a)) ?? "");
const clientName = opt("--client-name", "E2E OAuth Client");
const metadataUrl = opt("--client-metadata-url", undefined);
const callbackPort = Number(opt("--callback-port", "0"));

const emit = (event) => process.stdout.write(JSON.stringify(event) + "\n");

/** Everything a client keeps between the redirect and the token exchange, in memory. */
class MemoryProvider {
  constructor(redirectUrl) {
    this._redirectUrl = redirectUrl;
    this._state = randomBytes(16).toString("hex");
    this.client = undefined;
    this._tokens = undefined;
    this._verifier = undefined;
    // The SDK itself only sends an https client_id metadata URL (SEP-991 says
    // https); a test serves its document over loopback http (Gatehouse's
    // `allow_private_client_metadata`), so then the URL is handed over as the
    // client_id directly, which is exactly what the SDK would send.
    if (metadataUrl?.startsWith("https:")) this.clientMetadataUrl = metadataUrl;
    else if (metadataUrl) this.client = { client_id: metadataUrl };
  }
  get redirectUrl() {
    return this._redirectUrl;
  }
  get clientMetadata() {
    return {
      client_name: clientName,
      redirect_uris: [this._redirectUrl],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  }
  state() {
    return this._state;
  }
  clientInformation() {
    return this.client;
  }
  saveClientInformation(info) {
    this.client = info;
  }
  tokens() {
    return this._tokens;
  }
  saveTokens(tokens) {
    this._tokens = tokens;
  }
  redirectToAuthorization(url) {
    emit({ event: "authorize", url: url.toString() });
  }
  saveCodeVerifier(v) {
    this._verifier = v;
  }
  codeVerifier() {
    if (!this._verifier) throw new Error("no code verifier saved");
    return this._verifier;
  }
}

/** The loopback server the browser is sent back to; resolves with the callback's query. */
function callbackServer() {
  let resolveQuery;
  const query = new Promise((ok) => (resolveQuery = ok));
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://127.0.0.1");
    if (url.pathname !== "/callback") {
      res.writeHead(404).end();
      return;
    }
    const error = url.searchParams.get("error");
    res.writeHead(error ? 400 : 200, { "content-type": "text/html; charset=utf-8" });
    res.end(
      error
        ? `<!doctype html><title>Not authorized</title><h1>Authorization failed: ${error.replace(/[<&]/g, "")}</h1>`
        : "<!doctype html><title>Authorized</title><h1>Authorized. You can close this window.</h1>",
    );
    resolveQuery(url.searchParams);
  });
  return new Promise((ok) =>
    server.listen(callbackPort, "127.0.0.1", () => ok({ server, port: server.address().port, query })),
  );
}

async function connect(provider) {
  const client = new Client({ name: "e2e-oauth-client", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(serverUrl, { authProvider: provider });
  await client.connect(transport);
  return { client, transport };
}

async function main() {
  const cb = await callbackServer();
  const provider = new MemoryProvider(`http://127.0.0.1:${cb.port}/callback`);
  const first = new StreamableHTTPClientTransport(serverUrl, { authProvider: provider });
  try {
    await new Client({ name: "e2e-oauth-client", version: "1.0.0" }).connect(first);
    throw new Error("connected without signing in: /mcp should have answered 401");
  } catch (e) {
    if (!(e instanceof UnauthorizedError)) throw e;
  }
  // The SDK has discovered, registered and sent us to the browser; wait for it to come back.
  const params = await cb.query;
  cb.server.close();
  const error = params.get("error");
  const code = params.get("code");
  emit({
    event: "callback",
    state_ok: params.get("state") === provider._state,
    iss: params.get("iss"),
    ...(error ? { error, error_description: params.get("error_description") } : { code: Boolean(code) }),
  });
  if (params.get("state") !== provider._state) throw new Error("state mismatch on the callback");
  if (error) throw new Error(`authorization failed: ${error}`);
  await first.finishAuth(code);
  let session = await connect(provider);
  const { tools } = await session.client.listTools();
  emit({ event: "ready", tools: tools.map((t) => t.name), clientId: provider.client?.client_id });

  const rl = createInterface({ input: process.stdin });
  for await (const line of rl) {
    if (!line.trim()) continue;
    const cmd = JSON.parse(line);
    try {
      let result;
      if (cmd.call) result = await session.client.callTool(cmd.call, undefined, { timeout: 60_000 });
      else if (cmd.list) result = await session.client.listTools();
      else if (cmd.tokens) result = provider.tokens() ?? null;
      else if (cmd.refresh) {
        const before = provider.tokens();
        const outcome = await auth(provider, { serverUrl });
        result = { outcome, changed: provider.tokens()?.access_token !== before?.access_token };
      } else if (cmd.reconnect) {
        await session.client.close().catch(() => {});
        session = await connect(provider);
        result = { sessionId: session.transport.sessionId };
      } else throw new Error(`unknown command ${line}`);
      emit({ event: "result", id: cmd.id, result });
    } catch (e) {
      emit({ event: "error", id: cmd.id, name: e?.constructor?.name, message: String(e?.message ?? e) });
    }
  }
  await session.client.close().catch(() => {});
}

main().then(
  () => process.exit(0),
  (e) => {
    emit({ event: "failed", name: e?.constructor?.name, message: String(e?.message ?? e) });
    process.exit(1);
  },
);
