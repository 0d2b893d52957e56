//! The command line against the same database a running server uses, and the
//! real binary's log lines.

use std::io::Write;
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
    let (_stdout, banner, address) = read_banner(&mut child);
    assert!(banner.contains("/setup?token="), "{banner}");
    assert!(banner.contains("Config:       none (no --config, no ./gatehouse.toml)"), "{banner}");

    // A token minted from the command line names the port the server is on,
    // not the default one.
    let out = gatehouse(dir.path(), &["token", "issue", "--agent", "cli", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let issued: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(issued["endpoint"], format!("http://{address}/mcp"));

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

/// A `gatehouse.toml` in the working folder is read without `--config`;
/// `--config` still wins.
#[test]
fn a_gatehouse_toml_in_the_working_folder_is_read() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("gatehouse.toml"), "public_url = \"https://gate.example.com\"\n").unwrap();
    let issue = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_gatehouse"))
            .current_dir(dir.path())
            .args(["--data-dir", "."])
            .args(extra)
            .args(["token", "issue", "--agent", "a", "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let said = String::from_utf8_lossy(&out.stderr).contains("reading ./gatehouse.toml from the working folder");
        assert_eq!(said, extra.is_empty(), "the command says when it read the folder's file");
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["endpoint"].as_str().unwrap().to_string()
    };
    assert_eq!(issue(&[]), "https://gate.example.com/mcp");
    std::fs::write(dir.path().join("other.toml"), "public_url = \"https://other.example.com\"\n").unwrap();
    assert_eq!(issue(&["--config", "other.toml"]), "https://other.example.com/mcp");
}

/// `gatehouse --data-dir DIR ARGS…` (no server).
fn gatehouse(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gatehouse")).arg("--data-dir").arg(dir).args(args).output().unwrap()
}

#[test]
fn migrate_creates_and_migrates_the_database_then_says_it_is_up_to_date() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("data");
    let out = gatehouse(&dir, &["migrate", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let first: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(first["before"], 0);
    let latest = first["after"].as_i64().unwrap();
    assert!(latest > 0 && first["applied"] == latest, "{first}");
    assert!(first["database"].as_str().unwrap().ends_with("gatehouse.db"));

    let out = gatehouse(&dir, &["migrate", "--json"]);
    let again: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (again["before"].as_i64(), again["after"].as_i64(), again["applied"].as_i64()),
        (Some(latest), Some(latest), Some(0))
    );
    let out = gatehouse(&dir, &["migrate"]);
    assert!(out.status.success());
    let line = String::from_utf8_lossy(&out.stdout);
    assert!(line.contains(&format!("schema version {latest}, up to date")), "{line}");

    // A data dir that cannot be one (a file) is an error naming it, and exit 1.
    let file = root.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let out = gatehouse(&file, &["migrate"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot create data dir") && err.contains("not-a-dir"), "{err}");
    assert!(out.stdout.is_empty());
}

#[tokio::test]
async fn backup_copies_the_database_of_a_running_server_that_keeps_serving() {
    let app = spawn_app().await;
    if app.core.db.postgres_url().is_some() {
        // PostgreSQL is backed up with pg_dump; the command says so.
        let out = app.cli(&["backup", "x.db"]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("pg_dump"), "{err}");
        return;
    }
    app.add_user("ada", true).await;
    for n in 0..20 {
        app.issue(&format!("agent-{n}"), None);
    }
    let out_dir = tempfile::tempdir().unwrap();
    let file = out_dir.path().join("gatehouse-backup.db");

    // The backup runs in its own process while this server takes requests and writes.
    let mut command = app.cli_command();
    command.args(["backup", "--json"]).arg(&file);
    let backup = tokio::task::spawn_blocking(move || command.output().unwrap());
    let mut served = 0;
    while !backup.is_finished() {
        let r = app.client.get(app.url("/healthz")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        app.issue("during-backup", None);
        served += 1;
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let out = backup.await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["path"], file.display().to_string());
    assert_eq!(report["bytes"].as_u64().unwrap(), std::fs::metadata(&file).unwrap().len());
    assert!(served >= 1);

    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600, "owner-only");
    {
        let copy = rusqlite::Connection::open_with_flags(&file, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        let check: String = copy.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        assert_eq!(check, "ok");
        let users: Vec<String> = copy
            .prepare("SELECT username FROM users")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(users, ["ada"]);
        let agents: i64 =
            copy.query_row("SELECT count(*) FROM credentials WHERE agent LIKE 'agent-%'", [], |r| r.get(0)).unwrap();
        assert_eq!(agents, 20, "everything written before the backup is in it");
        let mode: String = copy.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
        assert_eq!(mode, "delete", "one self-contained file");
    }

    // An existing file is kept unless --force.
    let before = std::fs::read(&file).unwrap();
    let out = app.cli(&["backup", file.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(&file).unwrap(), before);
    let out = app.cli(&["backup", "--force", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let line = String::from_utf8_lossy(&out.stdout);
    assert!(line.contains(&file.display().to_string()) && line.contains("bytes"), "{line}");
    // Never over the live database itself.
    let live = app.dir.path().join("gatehouse.db");
    let out = app.cli(&["backup", "--force", live.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(app.client.get(app.url("/healthz")).send().await.unwrap().status() == 200);

    // A data dir with no database is an error, and creates nothing.
    let empty = tempfile::tempdir().unwrap();
    let out = gatehouse(empty.path(), &["backup", out_dir.path().join("none.db").to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no database"));
    assert!(!out_dir.path().join("none.db").exists());
}
