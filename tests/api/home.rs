//! The home page at a glance: what waits, what people decided and how fast,
//! the busiest tools and agents — each as its viewer may see it — and the
//! first-run checklist that goes once everything is set up.

use serde_json::json;

use crate::helpers::*;

/// The text of the element carrying `data-testid="{id}"` (tags stripped).
fn tile(html: &str, id: &str) -> String {
    let at = html.find(&format!(r#"data-testid="{id}""#)).unwrap_or_else(|| panic!("no {id} in {html}"));
    let rest = &html[at..];
    let rest = &rest[rest.find('>').unwrap() + 1..];
    let end = rest.find("</a>").or_else(|| rest.find("</div>")).unwrap();
    let mut text = String::new();
    let mut in_tag = false;
    for c in rest[..end].chars() {
        match c {
            '<' => in_tag = true,
            '>' => {
                in_tag = false;
                text.push(' ');
            }
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[tokio::test]
async fn the_home_page_counts_what_waits_and_what_was_decided_for_its_viewer() {
    let app = spawn_app().await;
    app.add_user("root", true).await;
    app.add_user("ada", false).await;
    app.add_user("bob", false).await;
    let (root, ada, bob) = (app.sign_in("root").await, app.sign_in("ada").await, app.sign_in("bob").await);

    // Before anything: the checklist, nothing counted.
    let home = app.get_as(&root, "/").await.text().await.unwrap();
    assert!(home.contains(r#"data-testid="checklist""#), "a new install shows the checklist");
    assert_eq!(home.matches(r#"data-done="false""#).count(), 4, "four steps to go");
    assert!(tile(&home, "tile-pending").contains("0 nothing waits"), "{}", tile(&home, "tile-pending"));

    let token = app.issue_owned("ada-bot", "ada");
    let sid = app.open_session(&token).await;
    let mut paused = Vec::new();
    for pattern in ["a_*", "b_*", "c_*"] {
        let reply =
            app.tool_call(&token, &sid, "gatehouse_policy_set", json!({"pattern": pattern, "action": "allow"})).await;
        paused.push(execution_id(&reply));
    }
    assert_eq!(app.decide(&root, &paused[0], "accept").await.status(), 200);
    assert_eq!(app.decide(&root, &paused[1], "decline").await.status(), 200);

    let home = app.get_as(&root, "/").await.text().await.unwrap();
    assert!(
        tile(&home, "tile-pending").starts_with("Waiting for you 1 the oldest for"),
        "{}",
        tile(&home, "tile-pending")
    );
    assert_eq!(tile(&home, "tile-decided"), "Decided, 14 days 2 1 approved, 1 declined");
    assert!(tile(&home, "tile-speed").contains("median of 2 decisions"), "{}", tile(&home, "tile-speed"));
    assert!(home.contains("Decisions per day over the last 14 days: 2 in all."), "the chart's summary");
    let tools = &home[home.find(r#"data-testid="busiest-tools""#).unwrap()..];
    assert!(tools[..tools.find("</ol>").unwrap()].contains("gatehouse_policy_set"), "the busiest tool");
    let agents = &home[home.find(r#"data-testid="busiest-agents""#).unwrap()..];
    assert!(agents[..agents.find("</ol>").unwrap()].contains("ada-bot"), "the busiest agent");
    // Minted and connected; no upstream and no rule yet (the approved call
    // sets one only when its agent runs it).
    assert_eq!(home.matches(r#"data-done="false""#).count(), 2, "{home}");
    app.core
        .policy
        .set(gatehouse_core::policy::Rule::new("x_*".parse().unwrap(), gatehouse_core::policy::Action::Allow))
        .unwrap();
    let home = app.get_as(&root, "/").await.text().await.unwrap();
    assert_eq!(home.matches(r#"data-done="false""#).count(), 1, "only the upstream is left");

    // Ada sees her agent's activity (not the admin-only call waiting); Bob
    // sees nothing of it.
    let hers = app.get_as(&ada, "/").await.text().await.unwrap();
    assert_eq!(tile(&hers, "tile-decided"), "Decided, 14 days 2 1 approved, 1 declined");
    assert!(!hers.contains(r#"data-testid="checklist""#), "her own steps are done: {hers}");
    let his = app.get_as(&bob, "/").await.text().await.unwrap();
    assert_eq!(tile(&his, "tile-decided"), "Decided, 14 days 0 0 approved, 0 declined");
    assert!(!his.contains("gatehouse_policy_set"), "nothing of another user's agents");
    assert!(his.contains(r#"data-testid="checklist""#), "his steps are not done");
}
