//! Rules on resources and prompts (issue #9): they block however the URI
//! is spelled, a URI two upstreams both offer goes to neither, and every
//! read is audited.

use gatehouse::config::UpstreamConfig;
use serde_json::{Value, json};

use crate::helpers::*;

#[tokio::test]
async fn resource_and_prompt_rules_block_and_every_read_is_audited() {
    let app = spawn_app_fronting(everything_stdio(), |c| {
        c.policy_rules = vec![
            config_rule("resource:test://static-binary", gatehouse_core::policy::Action::Block),
            config_rule("prompt:ev__test_prompt_with_*", gatehouse_core::policy::Action::Block),
        ]
    })
    .await;
    app.add_user("ada", true).await;
    let token = app.issue_owned("reader", "ada");
    let sid = app.open_session(&token).await;
    let request =
        |id: u32, method: &str, params: Value| json!({"jsonrpc":"2.0","id": id,"method": method,"params": params});

    let (_, _, ok) = app.call(&token, &sid, request(1, "resources/read", json!({"uri": "test://static-text"}))).await;
    assert!(ok[0]["result"]["contents"][0]["text"].is_string(), "{ok:?}");
    let (_, _, blocked) =
        app.call(&token, &sid, request(2, "resources/read", json!({"uri": "test://static-binary"}))).await;
    assert_eq!(blocked[0]["error"]["data"]["error"], "blocked_by_policy", "{blocked:?}");
    let (_, _, prompt) =
        app.call(&token, &sid, request(3, "prompts/get", json!({"name": "ev__test_prompt_with_image"}))).await;
    assert_eq!(prompt[0]["error"]["data"]["error"], "blocked_by_policy", "{prompt:?}");
    let (_, _, simple) =
        app.call(&token, &sid, request(4, "prompts/get", json!({"name": "ev__test_simple_prompt"}))).await;
    assert!(simple[0]["result"]["messages"].is_array(), "{simple:?}");
    let (_, _, guessed) =
        app.call(&token, &sid, request(5, "resources/read", json!({"uri": "file:///etc/passwd"}))).await;
    assert!(guessed[0]["error"]["message"].as_str().unwrap().contains("not found"), "never a guess: {guessed:?}");

    let audit = app
        .core
        .approvals
        .audit()
        .search(&Default::default(), &gatehouse_core::audit::HistoryScope::Owner("ada".into()), 20)
        .unwrap();
    let seen: Vec<(String, String)> = audit.iter().map(|e| (e.state.to_string(), e.tool.clone())).collect();
    for expected in [
        ("allowed", "resource:test://static-text"),
        ("blocked", "resource:test://static-binary"),
        ("blocked", "prompt:ev__test_prompt_with_image"),
        ("allowed", "prompt:ev__test_simple_prompt"),
    ] {
        assert!(seen.contains(&(expected.0.into(), expected.1.into())), "{expected:?} in {seen:?}");
    }
}

/// The fixture's `/etc/passwd`, which its `file:///{+path}` template serves
/// however the path is spelled (`--files`).
const PASSWD: &str = "the fixture's secret passwd line";

#[tokio::test]
async fn a_resource_rule_holds_however_the_uri_is_spelled() {
    // The README's own example rule, in front of an upstream whose
    // `file:///{+path}` template resolves paths like a naive file server.
    let mut files = everything_stdio();
    files.args.push("--files".into());
    let app = spawn_app_fronting(files, |c| {
        let block = |pattern: &str| config_rule(pattern, gatehouse_core::policy::Action::Block);
        // And a rule on one exact URI, which a query or fragment must not dodge.
        c.policy_rules = vec![block("resource:file:///etc/*"), block("resource:file:///srv/private.txt")]
    })
    .await;
    app.add_user("ada", true).await;
    let token = app.issue_owned("reader", "ada");
    let sid = app.open_session(&token).await;
    let read = |id: usize, uri: &str| json!({"jsonrpc":"2.0","id": id,"method":"resources/read","params":{"uri": uri}});

    // An allowed file is served, and the upstream got the normal spelling.
    let (_, _, ok) = app.call(&token, &sid, read(1, "file:///srv/../srv//readme.txt")).await;
    assert_eq!(ok[0]["result"]["contents"][0]["text"], "public readme", "{ok:?}");
    assert_eq!(ok[0]["result"]["contents"][0]["uri"], "file:///srv/readme.txt", "{ok:?}");

    // Every spelling of /etc/passwd meets the rule: the block error, never the file.
    for (i, uri) in [
        "file:///etc/passwd",
        "file:///srv/../etc/passwd",
        "file:///./etc/passwd",
        "file:////etc/passwd",
        "FILE:///etc/passwd",
        "file://localhost/etc/passwd",
        "file:///srv/./../etc//passwd",
        "file:///%65tc/passwd",
    ]
    .into_iter()
    .enumerate()
    {
        let (_, _, answer) = app.call(&token, &sid, read(10 + i, uri)).await;
        assert!(!format!("{answer:?}").contains(PASSWD), "{uri} read the blocked file: {answer:?}");
        assert_eq!(answer[0]["error"]["data"]["error"], "blocked_by_policy", "{uri}: {answer:?}");
        assert_eq!(answer[0]["error"]["data"]["subject"], "resource:file:///etc/passwd", "{uri}: {answer:?}");
    }

    // A query or fragment added to a URI an exact rule names is still that URI.
    for (i, uri) in ["file:///srv/private.txt?", "file:///srv/private.txt?x=1", "file:///srv/private.txt#top"]
        .into_iter()
        .enumerate()
    {
        let (_, _, answer) = app.call(&token, &sid, read(20 + i, uri)).await;
        assert_eq!(answer[0]["error"]["data"]["error"], "blocked_by_policy", "{uri}: {answer:?}");
        assert_eq!(answer[0]["error"]["data"]["rule"], "resource:file:///srv/private.txt", "{uri}: {answer:?}");
    }

    // A spelling that cannot be normalised safely is refused before any rule or upstream.
    for (i, uri) in [
        "file:///srv/%2e%2e/etc/passwd",
        "file:///srv/.%2E/etc/passwd",
        "file:///etc%2fpasswd",
        "file:///srv/%252e%252e/etc/passwd",
        "file://etc/passwd",
        "file:///srv/..%5Cetc%5Cpasswd",
        "file:///srv\\..\\etc\\passwd",
        "file:///srv/\u{2025}/etc/passwd",
        "file:///srv/\u{ff0e}\u{ff0e}/etc/passwd",
        // The fixture, like a naive server, reads a query or fragment as path.
        "file:///srv/x?/../../etc/passwd",
        "file:///srv/x#/../../etc/passwd",
        "file:///srv/x?%2F..%2F..%2Fetc%2Fpasswd",
    ]
    .into_iter()
    .enumerate()
    {
        let (_, _, answer) = app.call(&token, &sid, read(30 + i, uri)).await;
        assert!(!format!("{answer:?}").contains(PASSWD), "{uri} read the blocked file: {answer:?}");
        assert_eq!(answer[0]["error"]["code"], -32602, "{uri}: {answer:?}");
        assert_eq!(answer[0]["error"]["data"]["error"], "unsafe_resource_uri", "{uri}: {answer:?}");
    }

    // Subscribing is held to the same rule.
    let subscribe =
        json!({"jsonrpc":"2.0","id": 50,"method":"resources/subscribe","params":{"uri": "file:///srv/../etc/passwd"}});
    let (_, _, answer) = app.call(&token, &sid, subscribe).await;
    assert_eq!(answer[0]["error"]["data"]["error"], "blocked_by_policy", "{answer:?}");
}

#[tokio::test]
async fn a_resource_uri_two_upstreams_both_offer_goes_to_neither() {
    let twin = UpstreamConfig { prefix: Some("tw__".into()), ..everything_stdio() };
    let twin = UpstreamConfig { name: "twin".into(), ..twin };
    let app = spawn_app_with(|c| c.upstream = vec![everything_stdio(), twin]).await;
    app.wait_for_upstream_tool("ev__probe_mutable").await;
    app.wait_for_upstream_tool("tw__probe_mutable").await;
    let token = app.issue("reader", None);
    let sid = app.open_session(&token).await;
    let read = json!({"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"test://static-text"}});
    let (_, _, answer) = app.call(&token, &sid, read).await;
    assert!(answer[0]["error"]["message"].as_str().unwrap().contains("not found"), "{answer:?}");
}
