// A loopback proxy for the MCP conformance suite, whose client sends no
// Authorization header: it adds a real Gatehouse token and forwards everything
// else unchanged (Host and Origin included, so DNS-rebinding checks still
// apply). Authentication stays on.
//
// Usage: node auth-proxy.mjs LISTEN_PORT TARGET_URL TOKEN
//        TOKEN as @FILE: the token is read from FILE for each request, so a
//        script can give each scenario a credential of its own.
import http from "node:http";
import { readFileSync } from "node:fs";

const [listenPort, target, token] = process.argv.slice(2);
const upstream = new URL(target);
const currentToken = () => (token.startsWith("@") ? readFileSync(token.slice(1), "utf8").trim() : token);

const server = http.createServer((req, res) => {
  const headers = { ...req.headers, authorization: `Bearer ${currentToken()}` };
  const forward = http.request(
    { host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers },
    (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    },
  );
  forward.on("error", (e) => {
    res.writeHead(502, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: "bad_gateway", message: e.message }));
  });
  req.pipe(forward);
  // Client went away (e.g. it closed an SSE stream): close the upstream side too.
  res.on("close", () => forward.destroy());
});
server.listen(Number(listenPort), "127.0.0.1", () => {
  console.log(`auth proxy on http://127.0.0.1:${server.address().port} -> ${target}`);
});
