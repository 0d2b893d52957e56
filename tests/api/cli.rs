//! The command line against the same database a running server uses, and the
//! real binary's log lines.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::helpers::*;

#[tokio::test]
async fn token_issue_list_revoke_work_while_the_server_runs() {
    let app = spawn_app().await;
    let out = app.cli(&["token", "issue", "--agent", "cli-agent", "--thread", "T", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let issued: Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in ["id", "token", "agent", "thread", "endpoint", "authorization"] {
        assert!(issued.get(key).is_some(), "missing {key}");
    }
    let token = issued["token"].as_str().unwrap().to_string();
    app.open_session(&token).await;

    let list: Vec<Value> = serde_json::from_slice(&app.cli(&["token", "list", "--json"]).stdout).unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["status"], "active");
    assert!(
        !String::from_utf8_lossy(&app.cli(&["token", "list", "--json"]).stdout).contains(&token),
        "tokens are never listed"
    );

    let out = app.cli(&["token", "revoke", "--thread", "T"]);
    assert!(out.status.success());
    let response = app.mcp(&token).json(&initialize_request("2025-11-25")).send().await.unwrap();
    assert_eq!(response.status(), 401, "a CLI revoke takes effect in the running server");

    let out = app.cli(&["token", "revoke", "cred_nope"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cred_nope"));
}

#[tokio::test]
async fn user_add_reads_the_password_from_stdin() {
    let app = spawn_app().await;
    let mut child = app
        .cli_command()
        .args(["user", "add", "grace", "--admin", "--password-stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"a long password\n").unwrap();
    assert!(child.wait().unwrap().success());
    let user = app.core.users.verify_password("grace", "a long password").unwrap().unwrap();
    assert!(user.is_admin);
}

#[test]
fn bad_config_is_a_startup_error_naming_the_key_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gatehouse.toml");
    std::fs::write(&config, "listen = \"127.0.0.1:0\"\nlisten_prot = 1\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .arg("--config")
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("listen_prot") && err.contains("line 2"), "{err}");
}

/// The real binary: banner with the setup link, and a warning per rejected
/// credential with its reason and never the token.
#[test]
fn the_binary_prints_a_setup_link_and_logs_rejections_without_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .args(["--listen", "127.0.0.1:0", "--log-format", "json", "--data-dir"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut banner = String::new();
    let mut line = String::new();
    while !banner.contains("token issue") {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "banner ended early: {banner}");
        banner.push_str(&line);
    }
    assert!(banner.contains("/setup?token="), "{banner}");
    let address = banner.split("listening on http://").nth(1).unwrap().split_whitespace().next().unwrap().to_string();

    let secret = "definitely-not-a-real-token-123";
    let client = reqwest::blocking::Client::new();
    let url = format!("http://{address}/mcp");
    client.post(&url).header("accept", ACCEPT_BOTH).json(&initialize_request("2025-11-25")).send().unwrap();
    client
        .post(&url)
        .bearer_auth(secret)
        .header("accept", ACCEPT_BOTH)
        .json(&initialize_request("2025-11-25"))
        .send()
        .unwrap();

    child.kill().unwrap();
    let output = child.wait_with_output().unwrap();
    let logs = String::from_utf8_lossy(&output.stderr);
    let reasons: Vec<String> = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["level"] == "WARN")
        .filter_map(|v| v["reason"].as_str().map(String::from))
        .collect();
    assert_eq!(reasons, ["missing_bearer_token", "unknown_or_expired_token"], "{logs}");
    assert!(!logs.contains(secret), "the token never reaches the log");
}
