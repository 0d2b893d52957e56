//! `/`: the signed-in home page, connected sessions and credentials, live.

use leptos::prelude::*;
use leptos_meta::Title;

use gatehouse_model::{CredentialStatus, LiveEvent};

use crate::components::header::Header;
use crate::components::live::{LiveStatus, refetch_on, use_changes};
use crate::components::name::Name;
use crate::components::when::When;
use crate::server_fns::{Overview, get_overview};

/// The signed-in home page: connected MCP sessions and agent credentials, live.
#[component]
pub fn HomePage() -> impl IntoView {
    let overview = crate::json::resource(|| (), |_| get_overview());
    let live = use_changes([refetch_on(&[LiveEvent::SessionsChanged, LiveEvent::CredentialsChanged], overview)]);
    view! {
        <Title text="Gatehouse"/>
        <Suspense fallback=|| view! { <main class="page"><p>"Loading…"</p></main> }>
            {move || overview.get().map(|result| match result {
                Ok(o) => view! { <Home overview=o/> }.into_any(),
                Err(e) => view! {
                    <main class="page">
                        <p role="alert">"Could not load: " {e.to_string()}</p>
                        <p><a href="/sign-in">"Sign in"</a></p>
                    </main>
                }.into_any(),
            })}
        </Suspense>
        <LiveStatus state=live/>
    }
}

#[component]
fn Home(overview: Overview) -> impl IntoView {
    let Overview { username, is_admin, now_ms, sessions, credentials } = overview;
    let scope = if is_admin { "all agents" } else { "your agents" };
    view! {
        <Header username/>
        <main class="page">
            <section aria-labelledby="sessions-h">
                <h1 id="sessions-h">"Connected MCP sessions"</h1>
                <p class="hint">"Agents connected to " <code>"/mcp"</code> " right now (" {scope} ")."</p>
                {if sessions.is_empty() {
                    view! { <p class="empty">"No MCP session is connected."</p> }.into_any()
                } else {
                    view! {
                        <ul class="cards" aria-label="MCP sessions">
                            {sessions.into_iter().map(|s| { let (sid, client) = (s.session_id.clone(), s.client()); view! {
                                <li class="card" data-session-id=sid>
                                    <strong class="agent"><Name text=s.agent/></strong>
                                    {s.thread.map(|t| view! { <span class="tag">"thread " <Name text=t/></span> })}
                                    <div class="meta">
                                        <span><Name text=client/></span>
                                        " · " <span>{s.protocol_version}</span>
                                        " · opened " <When ms=s.opened_at_ms now_ms/>
                                    </div>
                                    <div class="meta mono">{s.session_id}</div>
                                </li>
                            }}).collect_view()}
                        </ul>
                    }.into_any()
                }}
            </section>
            <section aria-labelledby="creds-h">
                <h2 id="creds-h">"Agent credentials"</h2>
                <p class="hint">"A credential lives while its agent shows signs of life. Mint one with "
                    <code>"gatehouse token issue --agent NAME"</code> "."</p>
                {if credentials.is_empty() {
                    view! { <p class="empty">"No credential has been issued yet."</p> }.into_any()
                } else {
                    view! {
                        <div class="table-wrap" tabindex="0" role="region" aria-label="Agent credentials (scrolls sideways)">
                        <table class="responsive" aria-label="Agent credentials">
                            <thead><tr>
                                <th scope="col">"Agent"</th><th scope="col">"Thread"</th>
                                <th scope="col">"Status"</th><th scope="col">"Last sign of life"</th>
                                <th scope="col">"Lapses"</th>
                            </tr></thead>
                            <tbody>
                            {credentials.into_iter().map(|c| {
                                let active = c.status == CredentialStatus::Active;
                                view! {
                                    <tr data-credential-id=c.id.to_string()>
                                        <td data-label="Agent"><Name text=c.agent/></td>
                                        <td data-label="Thread">{match c.thread {
                                            Some(t) => view! { <Name text=t/> }.into_any(),
                                            None => "—".into_any(),
                                        }}</td>
                                        <td data-label="Status"><span class=format!("status {}", c.status)>{c.status.as_str()}</span></td>
                                        <td data-label="Last sign of life"><When ms=c.last_seen_ms now_ms/></td>
                                        <td data-label="Lapses">{active.then(|| view! { <When ms=c.expires_ms now_ms/> })}</td>
                                    </tr>
                                }
                            }).collect_view()}
                            </tbody>
                        </table>
                        </div>
                    }.into_any()
                }}
            </section>
        </main>
    }
}
