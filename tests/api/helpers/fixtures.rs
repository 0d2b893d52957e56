//! The upstreams the tests front (the "everything" fixture over stdio or
//! Streamable HTTP) and the config rules they set.

use std::path::Path;
use std::time::Duration;

use gatehouse::config::{Config, UpstreamConfig};
use tokio::io::AsyncBufReadExt;

/// A config-file policy rule that lets calls matching `pattern` run at once.
pub fn allow_rule(pattern: &str) -> gatehouse_core::policy::Rule {
    config_rule(pattern, gatehouse_core::policy::Action::Allow)
}

/// A config-file policy rule: `action` for what matches `pattern`.
pub fn config_rule(pattern: &str, action: gatehouse_core::policy::Action) -> gatehouse_core::policy::Rule {
    gatehouse_core::policy::Rule {
        source: gatehouse_core::policy::Source::Config,
        ..gatehouse_core::policy::Rule::new(pattern.parse().unwrap(), action)
    }
}

/// An enabled `[[upstream]]` named `name` with nothing else set (add a
/// `command` or a `url`).
pub fn upstream_named(name: &str) -> UpstreamConfig {
    UpstreamConfig { name: name.into(), ..Default::default() }
}

/// The absolute path of `path` in this repository, as a string.
pub fn repo_path(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path).display().to_string()
}

/// The tools folder's node (22).
pub const NODE: &str = "tools/node_modules/.bin/node";
/// The tools folder's Python (with the MCP SDK).
pub const PYTHON: &str = "tools/.venv/bin/python";
const EVERYTHING: &str = "end2end/fixtures/everything_server.mjs";

/// The "everything" fixture as a stdio child process under `ev__`, shared by
/// all agents.
pub fn everything_stdio() -> UpstreamConfig {
    UpstreamConfig {
        command: Some(repo_path(NODE)),
        args: vec![repo_path(EVERYTHING), "--stdio".into()],
        prefix: Some("ev__".into()),
        // Our own fixture: its read-only tools run at once, as a trusted
        // upstream's do (the default, untrusted, is tested on its own).
        trust_annotations: true,
        ..upstream_named("everything")
    }
}

/// The "everything" fixture at `url` (Streamable HTTP) under `ev__`, with a
/// configured header.
pub fn everything(url: &str) -> UpstreamConfig {
    UpstreamConfig {
        url: Some(url.parse().unwrap()),
        headers: [("x-upstream-key".to_string(), "configured-secret".to_string())].into(),
        prefix: Some("ev__".into()),
        // Our own fixture: its read-only tools run at once, as a trusted
        // upstream's do (the default, untrusted, is tested on its own).
        trust_annotations: true,
        ..upstream_named("everything")
    }
}

/// Lets the "everything" fixture's `test_*` tools run at once (they carry no
/// annotations).
pub fn allow_test_tools(config: &mut Config) {
    config.policy_rules = vec![allow_rule("ev__test_*")];
}

/// The "everything" fixture as a Streamable HTTP server, a child process on
/// `port` (0: any).
pub struct Fixture {
    pub child: tokio::process::Child,
    pub url: String,
}

impl Fixture {
    pub async fn start(port: u16) -> Fixture {
        Self::start_with(port, &[]).await
    }

    pub async fn start_with(port: u16, extra: &[&str]) -> Fixture {
        let mut child = tokio::process::Command::new(repo_path(NODE))
            .arg(repo_path(EVERYTHING))
            .args(["--port", &port.to_string()])
            .args(extra)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("node from the tools folder");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("fixture starts")
            .unwrap()
            .expect("a listening line");
        let url = line.rsplit(' ').next().unwrap().to_string();
        Fixture { child, url }
    }

    pub fn port(&self) -> u16 {
        self.url.rsplit(':').next().unwrap().trim_end_matches("/mcp").parse().unwrap()
    }
}

/// What the "everything" fixture's `test_simple_text` answers when it runs.
pub const SIMPLE_TEXT_RAN: &str = "This is a simple text response for testing.";

/// Whether a `tools/call` reply of `test_simple_text` is a pause; else it
/// must be the tool's own result.
pub fn paused(reply: &serde_json::Value) -> bool {
    let result = &reply["result"];
    if result["structuredContent"]["status"] == "user_approval_required" {
        return true;
    }
    assert_eq!(result["content"][0]["text"], SIMPLE_TEXT_RAN, "neither a pause nor the tool's result: {reply}");
    false
}
