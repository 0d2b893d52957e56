//! The pages: home (live sessions and credentials), sign-in, first-run setup.
//! Forms post to the HTTP API, so they work before hydration.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use gatehouse_model::{CredentialStatus, routes};

use crate::api::{Overview, get_overview};
use crate::live::{LiveStatus, use_live_events};
use crate::reveal::Name;
use crate::time_fmt::{exact, iso, relative};

/// A time shown relative to `now_ms`, exact on hover.
#[component]
fn When(ms: i64, now_ms: i64) -> impl IntoView {
    view! { <time datetime=iso(ms) title=exact(ms)>{relative(ms, now_ms)}</time> }
}

/// Header with the product name, navigation and sign-out.
#[component]
pub fn Header(#[prop(optional, into)] username: Option<String>) -> impl IntoView {
    view! {
        <header class="top">
            <nav aria-label="Main">
                <a class="brand" href="/">"Gatehouse"</a>
                <a href="/approvals">"Approvals"</a>
                <a href="/upstreams">"Upstreams"</a>
            </nav>
            <form method="post" action="/api/auth/sign-out" class="sign-out">
                {username.map(|u| view! { <span class="who">{u}</span> })}
                <button type="submit" class="quiet">"Sign out"</button>
            </form>
        </header>
    }
}

/// The signed-in home page: connected MCP sessions and agent credentials, live.
#[component]
pub fn HomePage() -> impl IntoView {
    let overview = Resource::new(|| (), |_| get_overview());
    let live = use_live_events(routes::LIVE_EVENTS.to_string(), move |_| overview.refetch());
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
                        <div class="table-wrap">
                        <table aria-label="Agent credentials">
                            <thead><tr>
                                <th scope="col">"Agent"</th><th scope="col">"Thread"</th>
                                <th scope="col">"Status"</th><th scope="col">"Last sign of life"</th>
                                <th scope="col">"Lapses"</th>
                            </tr></thead>
                            <tbody>
                            {credentials.into_iter().map(|c| {
                                let active = c.status == CredentialStatus::Active;
                                view! {
                                    <tr data-credential-id=c.id.clone()>
                                        <td><Name text=c.agent/></td>
                                        <td>{match c.thread {
                                            Some(t) => view! { <Name text=t/> }.into_any(),
                                            None => "—".into_any(),
                                        }}</td>
                                        <td><span class=format!("status {}", c.status)>{c.status.as_str()}</span></td>
                                        <td><When ms=c.last_seen_ms now_ms/></td>
                                        <td>{active.then(|| view! { <When ms=c.expires_ms now_ms/> })}</td>
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

/// Sign-in: a plain form posting to `/api/auth/sign-in`, which redirects back to `next`.
#[component]
pub fn SignInPage() -> impl IntoView {
    let query = use_query_map();
    let next = move || {
        query.read().get("next").filter(|n| crate::redirect::safe_next(n).is_some()).unwrap_or_else(|| "/".into())
    };
    let error = move || {
        let q = query.read();
        q.get("error").map(|e| match (e.as_str(), q.get("retry_after")) {
            ("throttled", Some(wait)) => {
                let wait: u64 = wait.parse().unwrap_or(60);
                format!("Too many failed sign-ins. Try again in {}.", crate::time_fmt::duration(wait))
            }
            ("throttled", None) => "Too many failed sign-ins. Try again later.".to_string(),
            _ => "That name and password did not match.".to_string(),
        })
    };
    view! {
        <Title text="Sign in — Gatehouse"/>
        <main class="narrow">
            <h1>"Sign in to Gatehouse"</h1>
            {move || error().map(|e| view! { <p role="alert" class="error">{e}</p> })}
            <form method="post" action="/api/auth/sign-in" class="stack">
                <input type="hidden" name="next" value=next/>
                <label>"Username" <input name="username" autocomplete="username" required/></label>
                <label>"Password" <input name="password" type="password" autocomplete="current-password" required/></label>
                <button type="submit" class="primary">"Sign in"</button>
            </form>
        </main>
    }
}

/// First-run setup: the one-time link printed at start creates the admin.
#[component]
pub fn SetupPage() -> impl IntoView {
    let query = use_query_map();
    let token = move || query.read().get("token").unwrap_or_default();
    let error = move || query.read().get("error");
    view! {
        <Title text="Set up — Gatehouse"/>
        <main class="narrow">
            <h1>"Welcome to Gatehouse"</h1>
            <p>"Create the admin account. This link works once."</p>
            {move || error().map(|e| view! { <p role="alert" class="error">{e}</p> })}
            <form method="post" action="/api/auth/setup" class="stack">
                <input type="hidden" name="token" value=token/>
                <label>"Admin username" <input name="username" autocomplete="username" required/></label>
                <label>"Password (8 characters or more)"
                    <input name="password" type="password" autocomplete="new-password" minlength="8" required/>
                </label>
                <button type="submit" class="primary">"Create admin"</button>
            </form>
        </main>
    }
}

/// Unknown path.
#[component]
pub fn NotFound() -> impl IntoView {
    #[cfg(feature = "ssr")]
    {
        if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
            response.set_status(http::StatusCode::NOT_FOUND);
        }
    }
    view! {
        <Title text="Not found — Gatehouse"/>
        <main class="narrow"><h1>"Not found"</h1><p><a href="/">"Home"</a></p></main>
    }
}

/// `/upstreams`: the fronted MCP servers and their health, live.
#[component]
pub fn UpstreamsPage() -> impl IntoView {
    let upstreams = Resource::new(|| (), |_| crate::api::list_upstreams());
    let live = use_live_events(routes::LIVE_EVENTS.to_string(), move |_| upstreams.refetch());
    view! {
        <Title text="Upstreams — Gatehouse"/>
        <Header/>
        <main class="page">
            <h1>"Upstream MCP servers"</h1>
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || upstreams.get().map(|result| match result {
                    Ok(list) if list.upstreams.is_empty() => view! {
                        <p class="empty">"No upstream is configured. Add " <code>"[[upstream]]"</code> " tables to gatehouse.toml."</p>
                    }.into_any(),
                    Ok(list) => {
                        let show_errors = list.show_errors;
                        view! {
                        <div class="table-wrap">
                        <table aria-label="Upstreams">
                            <thead><tr>
                                <th scope="col">"Name"</th><th scope="col">"Transport"</th><th scope="col">"Health"</th>
                                <th scope="col">"Tools"</th><th scope="col">"Restarts"</th>
                                {show_errors.then(|| view! { <th scope="col">"Last error"</th> })}
                            </tr></thead>
                            <tbody>
                            {list.upstreams.into_iter().map(|u| {
                                let (row_name, class) = (u.name.clone(), if u.health == "up" { "status active" } else { "status revoked" });
                                view! {
                                <tr data-upstream=row_name>
                                    <td><Name text=u.name/></td>
                                    <td>{u.transport}</td>
                                    <td><span class=class>{u.health}</span></td>
                                    <td>{u.tools}</td>
                                    <td>{u.restarts}</td>
                                    {show_errors.then(|| view! {
                                        <td class="error-cell"><Name text=u.last_error.unwrap_or_default()/></td>
                                    })}
                                </tr>
                            }}).collect_view()}
                            </tbody>
                        </table>
                        </div>
                        {(!show_errors).then(|| view! {
                            <p class="hint">"An upstream's last error is shown to admins."</p>
                        })}
                    }.into_any()
                    }
                    Err(e) => view! { <p role="alert">"Could not load: " {e.to_string()}</p> }.into_any(),
                })}
            </Suspense>
            <LiveStatus state=live/>
        </main>
    }
}
