//! `/agents`: every agent the viewer may see with its credentials (thread,
//! owner, created, last sign of life, when it lapses) and connected
//! sessions, live; minting a credential (its token shown once, with
//! paste-ready client configs) and revoking one, a thread's or an agent's.

use std::collections::BTreeMap;

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use gatehouse_model::{CredentialStatus, CredentialView, LiveEvent, MintedCredential, RevokeScope};

use crate::components::copy::CopyButton;
use crate::components::header::Header;
use crate::components::live::{LiveStatus, refetch_on, use_changes};
use crate::components::name::Name;
use crate::components::when::When;
use crate::server_fns::{AgentsView, MintCredential, RevokeCredentials, list_agents, take_minted};

/// `/agents`
#[component]
pub fn AgentsPage() -> impl IntoView {
    let agents = crate::json::resource(|| (), |_| list_agents());
    let live = use_changes([refetch_on(&[LiveEvent::CredentialsChanged, LiveEvent::SessionsChanged], agents)]);
    let query = use_query_map();
    let minted = crate::json::resource(
        move || query.read().get("minted"),
        |id| async move {
            match id {
                Some(id) => take_minted(id).await.ok().flatten(),
                None => None,
            }
        },
    );
    let mint = ServerAction::<MintCredential>::new();
    let revoke = ServerAction::<RevokeCredentials>::new();
    view! {
        <Title text="Agents — Gatehouse"/>
        <Header/>
        <main class="page">
            <h1>"Agents and credentials"</h1>
            <p class="hint">"A credential lives while its agent shows signs of life, and lapses when the agent goes quiet or is revoked."</p>
            <Suspense fallback=|| ()>
                {move || minted.get().flatten().map(|m| view! { <Minted minted=m/> })}
            </Suspense>
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || agents.get().map(|result| match result {
                    Ok(view) => view! { <MintForm mint is_admin=view.is_admin username=view.username.clone()/> <Agents view revoke/> }.into_any(),
                    Err(e) => view! { <p role="alert" class="error">"Could not load: " {crate::outcome::message(&e)}</p> }.into_any(),
                })}
            </Suspense>
            <LiveStatus state=live/>
        </main>
    }
}

/// The form that mints a credential.
#[component]
fn MintForm(mint: ServerAction<MintCredential>, is_admin: bool, username: String) -> impl IntoView {
    let error = move || mint.value().get().and_then(|r| r.err()).map(|e| crate::outcome::message(&e));
    view! {
        <section aria-labelledby="mint-h" class="panel">
            <h2 id="mint-h">"Mint a credential"</h2>
            <ActionForm action=mint attr:class="mint-form">
                <label>"Agent name" <input name="agent" required autocomplete="off" placeholder="claude-code"/></label>
                <label>"Thread (optional)" <input name="thread" autocomplete="off" placeholder="a task or workspace"/></label>
                {if is_admin {
                    view! { <label>"Owner" <input name="owner" autocomplete="off" placeholder=username.clone()/></label> }.into_any()
                } else {
                    view! { <input type="hidden" name="owner" value=username.clone()/> }.into_any()
                }}
                <button type="submit" class="primary">"Mint credential"</button>
            </ActionForm>
            <p class="hint">"Minting for a thread again replaces that thread's earlier credential."</p>
            {move || error().map(|e| view! { <p role="alert" class="error">{e}</p> })}
        </section>
    }
}

/// The token just minted, shown this once, with configs to paste.
#[component]
fn Minted(minted: MintedCredential) -> impl IntoView {
    let configs = minted.client_configs();
    let token = minted.token.clone();
    view! {
        <section class="panel minted" aria-labelledby="minted-h" data-credential-id=minted.id.to_string()>
            <h2 id="minted-h">"Token for " <Name text=minted.agent.clone()/></h2>
            <p class="warning">"Copy it now: it is shown only this once, and only its hash is kept."</p>
            <div class="secret">
                <code data-testid="minted-token">{token.clone()}</code>
                <CopyButton text=token label="Copy the token"/>
            </div>
            <p class="hint">"Connect your client to " <code>{minted.endpoint.clone()}</code> ":"</p>
            {configs.into_iter().enumerate().map(|(i, c)| view! {
                <details class="config" open=i == 0>
                    <summary>{c.client} <span class="hint">" — " {c.place}</span></summary>
                    <pre tabindex="0">{c.text.clone()}</pre>
                    <CopyButton text=c.text label=format!("Copy the {} configuration", c.client)/>
                </details>
            }).collect_view()}
        </section>
    }
}

/// Every agent (by owner and name) with its credentials.
#[component]
fn Agents(view: AgentsView, revoke: ServerAction<RevokeCredentials>) -> impl IntoView {
    let AgentsView { now_ms, is_admin, credentials, sessions, profiles, .. } = view;
    if credentials.is_empty() {
        return view! { <p class="empty">"No agent has a credential yet. Mint one above and paste its config into your MCP client."</p> }.into_any();
    }
    let mut groups: BTreeMap<(String, Option<String>), Vec<CredentialView>> = BTreeMap::new();
    for c in credentials {
        groups.entry((c.agent.clone(), c.owner.clone())).or_default().push(c);
    }
    let sessions_of = move |id: &str| sessions.iter().filter(|s| s.credential_id == id).count();
    let error = move || revoke.value().get().and_then(|r| r.err()).map(|e| crate::outcome::message(&e));
    view! {
        {move || error().map(|e| view! { <p role="alert" class="error">{e}</p> })}
        {groups.into_iter().map(|((agent, owner), creds)| {
            let active = creds.iter().filter(|c| c.status == CredentialStatus::Active).count();
            let connected: usize = creds.iter().map(|c| sessions_of(&c.id)).sum();
            let key = (agent.clone(), owner.clone());
            let named_by = profiles.iter().find(|(k, _)| *k == key).map(|(_, names)| names.clone()).unwrap_or_default();
            let tools_link = gatehouse_model::routes::tools_as(&format!("{}/{agent}", owner.clone().unwrap_or_default()));
            view! {
                <section class="agent card" data-agent=agent.clone() aria-label=format!("Agent {agent}")>
                    <div class="agent-head">
                        <h2><Name text=agent.clone()/></h2>
                        <span class="meta">
                            {match owner.clone() {
                                Some(o) => view! { "owner " <Name text=o/> }.into_any(),
                                None => "no owner (admins decide)".into_any(),
                            }}
                            " · " {active} " active · " {connected} " connected"
                        </span>
                        <span class="meta agent-profile" data-profiles=named_by.join(",")>
                            {if named_by.is_empty() {
                                view! { "No profile: sees every tool the rules let it" }.into_any()
                            } else {
                                view! { {if named_by.len() == 1 { "Profile " } else { "Profiles " }}
                                    <Name text=named_by.join(", ")/> }.into_any()
                            }}
                            " · " <a href=tools_link>"Its tools"</a>
                        </span>
                        {(active > 0).then(|| view! {
                            <RevokeForm revoke scope=RevokeScope::Agent target=agent.clone() owner=owner.clone().unwrap_or_default()
                                label=format!("Revoke all of {agent}")/>
                        })}
                    </div>
                    <div class="table-wrap" tabindex="0" role="region" aria-label=format!("Credentials of {agent} (scrolls sideways)")>
                    <table class="responsive" aria-label=format!("Credentials of {agent}")>
                        <thead><tr>
                            <th scope="col">"Thread"</th><th scope="col">"Status"</th><th scope="col">"Issued"</th>
                            <th scope="col">"Last sign of life"</th><th scope="col">"Lapses"</th>
                            <th scope="col">"Sessions"</th><th scope="col"><span class="visually-hidden">"Actions"</span></th>
                        </tr></thead>
                        <tbody>
                        {creds.into_iter().map(|c| {
                            let live = c.status == CredentialStatus::Active;
                            view! {
                            <tr data-credential-id=c.id.to_string() data-status=c.status.as_str()>
                                <td data-label="Thread">{match c.thread.clone() {
                                    Some(t) => view! { <Name text=t/> }.into_any(),
                                    None => "—".into_any(),
                                }}</td>
                                <td data-label="Status"><span class=format!("status {}", c.status)>{c.status.as_str()}</span></td>
                                <td data-label="Issued" data-issued-via=c.issued_via.as_str()><span class="stacked"><When ms=c.created_ms now_ms/>
                                    <br/><span class="hint">{c.issued_via.label()}
                                    {c.oauth_client.clone().map(|client| view! { " · " <Name text=client/> })}</span>
                                </span></td>
                                <td data-label="Last sign of life"><When ms=c.last_seen_ms now_ms/></td>
                                <td data-label="Lapses">{live.then(|| view! { <When ms=c.expires_ms now_ms/> })}</td>
                                <td data-label="Sessions">{sessions_of(&c.id)}</td>
                                <td data-label="Actions" class="actions">{live.then(|| view! {
                                    <RevokeForm revoke scope=RevokeScope::Credential target=c.id.to_string() owner=String::new() label="Revoke".to_string()/>
                                    {c.thread.clone().map(|t| view! {
                                        <RevokeForm revoke scope=RevokeScope::Thread target=t.clone() owner=String::new() label="Revoke thread".to_string()/>
                                    })}
                                })}</td>
                            </tr>
                        }}).collect_view()}
                        </tbody>
                    </table>
                    </div>
                </section>
            }
        }).collect_view()}
        {(!is_admin).then(|| view! { <p class="hint">"You see the agents you own. Admins see everyone's."</p> })}
    }
    .into_any()
}

/// A one-button form that revokes what `scope` and `target` name.
#[component]
fn RevokeForm(
    revoke: ServerAction<RevokeCredentials>,
    scope: RevokeScope,
    target: String,
    owner: String,
    label: String,
) -> impl IntoView {
    view! {
        <ActionForm action=revoke attr:class="revoke-form">
            <input type="hidden" name="scope" value=scope.as_str()/>
            <input type="hidden" name="target" value=target/>
            <input type="hidden" name="owner" value=owner/>
            <button type="submit" class="danger quiet">{label}</button>
        </ActionForm>
    }
}
