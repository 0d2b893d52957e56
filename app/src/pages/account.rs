//! `/account`: the signed-in person's own page, linked from their name in
//! the header — their password, their browser sessions (sign out the
//! others), their agents and those agents' credentials, and what tells
//! them that a call waits. Admins manage everyone on `/users` and `/agents`.

use std::collections::BTreeMap;

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use gatehouse_model::{CredentialStatus, LiveEvent, routes};

use crate::components::header::Header;
use crate::components::live::{LiveStatus, refetch_on, use_changes};
use crate::components::name::Name;
use crate::components::notify::NotifyStatus;
use crate::components::when::When;
use crate::outcome::on_success;
use crate::server_fns::{AccountView, ChangePassword, Channel, SignOutOthers, get_account};

/// `/account`
#[component]
pub fn AccountPage() -> impl IntoView {
    let password = ServerAction::<ChangePassword>::new();
    let sign_out = ServerAction::<SignOutOthers>::new();
    let account = crate::json::resource(|| (), |_| get_account());
    on_success(sign_out, move || account.refetch());
    let live = use_changes([refetch_on(&[LiveEvent::UsersChanged, LiveEvent::CredentialsChanged], account)]);
    let query = use_query_map();
    // What a plain form (without JavaScript) was sent back to say.
    let notice = move || {
        let q = query.read();
        if q.get("changed").as_deref() == Some("password") {
            Some("Your password was changed, and your other browser sessions were signed out.".to_string())
        } else {
            q.get("signed_out").map(|n| match n.as_str() {
                "0" => "There were no other sessions to sign out.".to_string(),
                "1" => "Signed out 1 other session.".to_string(),
                n => format!("Signed out {n} other sessions."),
            })
        }
    };
    view! {
        <Title text="Your account — Gatehouse"/>
        <Header/>
        <main class="page account">
            <h1>"Your account"</h1>
            {move || notice().map(|n| view! { <p role="status" class="notice">{n}</p> })}
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || account.get().map(|result| match result {
                    Ok(view) => view! { <Account view password sign_out/> }.into_any(),
                    Err(e) => view! { <p role="alert" class="error">"Could not load: " {crate::outcome::message(&e)}</p> }.into_any(),
                })}
            </Suspense>
            <LiveStatus state=live/>
        </main>
    }
}

#[component]
fn Account(
    view: AccountView,
    password: ServerAction<ChangePassword>,
    sign_out: ServerAction<SignOutOthers>,
) -> impl IntoView {
    let AccountView { now_ms, username, is_admin, my_sessions, credentials, channels } = view;
    view! {
        <p class="lead" data-testid="account-of">
            "Signed in as " <strong><Name text=username.clone()/></strong>
            {if is_admin { " (an admin: you also manage users, rules and upstreams)." } else { "." }}
        </p>
        <Password username password/>
        <Sessions my_sessions sign_out/>
        <Agents credentials now_ms/>
        <Notifications channels/>
    }
}

/// Change your password (this session stays; the others end).
#[component]
fn Password(username: String, password: ServerAction<ChangePassword>) -> impl IntoView {
    let error = move || password.value().get().and_then(|r| r.err()).map(|e| crate::outcome::message(&e));
    view! {
        <section aria-labelledby="password-h" class="panel">
            <h2 id="password-h">"Password"</h2>
            <ActionForm action=password attr:class="stack password-form">
                // For password managers: whose password this is.
                <input type="text" name="username" value=username autocomplete="username" readonly hidden/>
                <label>"Current password" <input name="current" type="password" autocomplete="current-password" required/></label>
                <label>"New password (8 characters or more)" <input name="new" type="password" autocomplete="new-password" minlength="8" required/></label>
                <label>"New password again" <input name="confirm" type="password" autocomplete="new-password" minlength="8" required/></label>
                <button type="submit" class="primary">"Change password"</button>
            </ActionForm>
            {move || error().map(|e| view! { <p role="alert" class="error">{e}</p> })}
        </section>
    }
}

/// Your browser sessions: how many, and sign out the others.
#[component]
fn Sessions(my_sessions: usize, sign_out: ServerAction<SignOutOthers>) -> impl IntoView {
    let error = move || sign_out.value().get().and_then(|r| r.err()).map(|e| crate::outcome::message(&e));
    let others = my_sessions.saturating_sub(1);
    view! {
        <section aria-labelledby="sessions-h" class="panel">
            <h2 id="sessions-h">"Browser sessions"</h2>
            <p data-testid="other-sessions">{match others {
                0 => "You are signed in only here.".to_string(),
                1 => "You are signed in here and in 1 other browser.".to_string(),
                n => format!("You are signed in here and in {n} other browsers."),
            }}</p>
            {(others > 0).then(|| view! {
                <ActionForm action=sign_out attr:class="row-form">
                    <button type="submit" class="quiet">"Sign out other sessions"</button>
                </ActionForm>
            })}
            {move || error().map(|e| view! { <p role="alert" class="error">{e}</p> })}
        </section>
    }
}

/// Your agents: each with its live credentials and its last sign of life;
/// minting and revoking are on the agents page.
#[component]
fn Agents(credentials: Vec<gatehouse_model::CredentialView>, now_ms: i64) -> impl IntoView {
    // By agent name: how many credentials are active, and the latest sign of life.
    let mut agents: BTreeMap<String, (usize, usize, i64)> = BTreeMap::new();
    for c in &credentials {
        let entry = agents.entry(c.agent.clone()).or_insert((0, 0, 0));
        entry.0 += 1;
        entry.1 += usize::from(c.status == CredentialStatus::Active);
        entry.2 = entry.2.max(c.last_seen_ms);
    }
    view! {
        <section aria-labelledby="agents-h" class="panel">
            <h2 id="agents-h">"Your agents"</h2>
            {if agents.is_empty() {
                view! {
                    <p class="empty">"You have no agent yet. " <a href=routes::AGENTS>"Mint a credential"</a>
                    " and paste its config into your MCP client."</p>
                }.into_any()
            } else {
                view! {
                    <ul class="account-agents" aria-label="Your agents">
                        {agents.into_iter().map(|(agent, (all, active, seen))| { let key = agent.clone(); view! {
                            <li data-agent=key>
                                <strong><Name text=agent/></strong>
                                <span class="hint">
                                    " · " {crate::words::count(active as u64, "active credential")}
                                    {(all > active).then(|| format!(" ({} lapsed or revoked)", all - active))}
                                    " · last sign of life " <When ms=seen now_ms/>
                                </span>
                            </li>
                        }}).collect_view()}
                    </ul>
                    <p><a href=routes::AGENTS>"Mint or revoke credentials on the Agents page"</a></p>
                }.into_any()
            }}
        </section>
    }
}

/// What tells you that a call waits: this browser's notifications, and the
/// shared targets the operator set up.
#[component]
fn Notifications(channels: Vec<Channel>) -> impl IntoView {
    let kind = |format: &str| match format {
        "slack" => "Slack",
        "ntfy" => "ntfy",
        _ => "webhook",
    };
    view! {
        <section aria-labelledby="notify-h" class="panel">
            <h2 id="notify-h">"Notifications"</h2>
            <p>"This browser can tell you when a call waits for you, while a Gatehouse tab is open."</p>
            <NotifyStatus/>
            {if channels.is_empty() {
                view! { <p class="hint">"No shared notification target is set up (" <code>"[[notify]]"</code> " in the config file)."</p> }.into_any()
            } else {
                view! {
                    <p>"Every call that waits for a person is also sent to:"</p>
                    <ul data-testid="channels">
                        {channels.into_iter().map(|c| view! {
                            <li><Name text=c.name/> " " <span class="hint">{format!("({})", kind(&c.format))}</span></li>
                        }).collect_view()}
                    </ul>
                    <p class="hint">"These are shared: the operator sets them in the config file."</p>
                }.into_any()
            }}
        </section>
    }
}
