//! `/`: the home page at a glance, live — what waits for a person, what
//! people decided lately and how fast, the busiest tools and agents, the
//! upstreams' health, the agents connected now, and, until it is done, the
//! first-run checklist.

use leptos::prelude::*;
use leptos_meta::Title;

use gatehouse_model::{
    Activity, AuditEntry, Busiest, CredentialView, HistoryFilter, LiveEvent, McpSessionInfo, State, UpstreamInfo,
    routes,
};

use crate::components::header::Header;
use crate::components::live::{LiveStatus, refetch_on, use_changes};
use crate::components::name::Name;
use crate::components::when::When;
use crate::server_fns::{Overview, Setup, get_overview};
use crate::time_fmt::{duration, exact, short_duration};

/// A session whose agent showed no sign of life for this long reads as idle:
/// its client may have exited without closing it.
const IDLE_AFTER_MS: i64 = 5 * 60 * 1000;

/// `/`
#[component]
pub fn HomePage() -> impl IntoView {
    let overview = crate::json::resource(|| (), |_| get_overview());
    let live = use_changes([refetch_on(
        &[
            LiveEvent::SessionsChanged,
            LiveEvent::CredentialsChanged,
            LiveEvent::ApprovalsChanged,
            LiveEvent::UpstreamsChanged,
        ],
        overview,
    )]);
    view! {
        <Title text="Gatehouse"/>
        <Header/>
        <main class="page home">
            <h1>"At a glance"</h1>
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || overview.get().map(|result| match result {
                    Ok(o) => view! { <Home overview=o/> }.into_any(),
                    Err(e) => view! {
                        <p role="alert" class="error">"Could not load: " {crate::outcome::message(&e)}</p>
                        <p><a href="/sign-in">"Sign in"</a></p>
                    }.into_any(),
                })}
            </Suspense>
        </main>
        <LiveStatus state=live/>
    }
}

#[component]
fn Home(overview: Overview) -> impl IntoView {
    let Overview {
        is_admin,
        now_ms,
        pending,
        oldest_pending_ms,
        activity,
        upstreams,
        held,
        sessions,
        credentials,
        setup,
        failures,
        ..
    } = overview;
    let show_checklist = if is_admin { !setup.done() } else { !(setup.credential && setup.connected) };
    view! {
        {show_checklist.then(|| view! { <Checklist setup is_admin sessions=sessions.clone()/> })}
        <Tiles pending oldest_pending_ms now_ms activity=activity.clone() upstreams=upstreams.clone() held is_admin/>
        <DecisionsChart activity=activity.clone()/>
        <Failures failures now_ms/>
        <div class="two-up">
            <BusiestList title="Busiest tools" id="busiest-tools" items=activity.tools.clone() empty="No call in these two weeks."/>
            <BusiestList title="Busiest agents" id="busiest-agents" items=activity.agents.clone() empty="No agent called anything in these two weeks."/>
        </div>
        <UpstreamHealth upstreams/>
        <Sessions sessions credentials now_ms is_admin/>
    }
}

/// The first-run path, each step with a link to where it is done; it goes
/// once every step is.
#[component]
fn Checklist(setup: Setup, is_admin: bool, sessions: Vec<McpSessionInfo>) -> impl IntoView {
    let connected = sessions.first().map(|s| s.agent.clone());
    let step = |done: bool, title: &'static str, body: AnyView| {
        view! {
            <li class:done=done data-done=done.to_string()>
                <span class="check" aria-hidden="true">{if done { "✓" } else { "" }}</span>
                <div><strong>{title}</strong> {if done { view! { <span class="visually-hidden">" (done)"</span> }.into_any() } else { ().into_any() }}
                <p class="hint">{body}</p></div>
            </li>
        }
    };
    view! {
        <section class="panel checklist" aria-labelledby="checklist-h" data-testid="checklist">
            <h2 id="checklist-h">"Get started"</h2>
            <ol>
                {step(setup.credential, "Mint a credential for your agent", view! {
                    "On the " <a href=routes::AGENTS>"Agents"</a> " page: name the agent, copy the token and the config for your client."
                }.into_any())}
                {step(setup.connected, "Connect your agent", match connected {
                    Some(agent) => view! { "Connected: " <Name text=agent/> "." }.into_any(),
                    None if setup.connected => view! { "An agent has connected." }.into_any(),
                    None => view! { <span data-testid="waiting-for-agent">"Paste the config into your MCP client and start it; this step ticks itself as soon as it connects."</span> }.into_any(),
                })}
                {is_admin.then(|| step(setup.upstream, "Add an upstream MCP server", view! {
                    "Its tools are served through the gate. Add it to " <code>"gatehouse.toml"</code> " under "
                    <code>"[[upstream]]"</code> "; the " <a href=routes::UPSTREAMS>"Upstreams"</a> " page shows its health. "
                    "Its tools ask a person until you trust what it says of them (read-only, not destructive) on that page, "
                    "or a rule allows them."
                }.into_any()))}
                {is_admin.then(|| step(setup.rule, "Add a rule", view! {
                    "On the " <a href=routes::POLICIES>"Policies"</a> " page: which tools run at once, wait for a person, or never run."
                }.into_any()))}
            </ol>
        </section>
    }
}

/// The numbers that matter most, one tile each.
#[component]
fn Tiles(
    pending: usize,
    oldest_pending_ms: Option<i64>,
    now_ms: i64,
    activity: Activity,
    upstreams: Vec<UpstreamInfo>,
    held: usize,
    is_admin: bool,
) -> impl IntoView {
    let approved: u64 = activity.days.iter().map(|d| d.approved).sum();
    let declined: u64 = activity.days.iter().map(|d| d.declined).sum();
    let healthy = upstreams.iter().filter(|u| u.health == "up").count();
    let oldest = oldest_pending_ms.map(|ms| duration(u64::try_from((now_ms - ms).max(0) / 1000).unwrap_or(0)));
    view! {
        <section class="tiles" aria-label="At a glance">
            <a class="tile" class:attention={pending > 0} href=routes::APPROVALS data-testid="tile-pending">
                <span class="tile-label">"Waiting for you"</span>
                <span class="tile-value">{pending}</span>
                <span class="tile-note">{match oldest {
                    Some(wait) => format!("the oldest for {wait}"),
                    None => "nothing waits".to_string(),
                }}</span>
            </a>
            <a class="tile" href=routes::HISTORY data-testid="tile-decided">
                <span class="tile-label">"Decided, 14 days"</span>
                <span class="tile-value">{approved + declined}</span>
                <span class="tile-note">{format!("{approved} approved, {declined} declined")}</span>
            </a>
            <div class="tile" data-testid="tile-speed">
                <span class="tile-label">"Time to decide"</span>
                <span class="tile-value">{activity.median_decision_ms.map(|ms| short_duration(u64::try_from(ms / 1000).unwrap_or(0))).unwrap_or_else(|| "—".into())}</span>
                <span class="tile-note">{match activity.decisions {
                    0 => "no decision yet".to_string(),
                    n => format!("median of {n} decisions"),
                }}</span>
            </div>
            <a class="tile" href=routes::HISTORY data-testid="tile-calls">
                <span class="tile-label">"Calls, 14 days"</span>
                <span class="tile-value">{activity.calls}</span>
                <span class="tile-note">"every call, gated or not"</span>
            </a>
            <a class="tile" class:attention={healthy < upstreams.len()} href=routes::UPSTREAMS data-testid="tile-upstreams">
                <span class="tile-label">"Upstreams"</span>
                <span class="tile-value">{if upstreams.is_empty() { "none".to_string() } else { format!("{healthy} of {}", upstreams.len()) }}</span>
                <span class="tile-note">{if upstreams.is_empty() { "only Gatehouse's own tools" } else { "up" }}</span>
            </a>
            {(held > 0).then(|| view! {
                <a class="tile attention" href=routes::TOOLS data-testid="tile-held">
                    <span class="tile-label">"Held back"</span>
                    <span class="tile-value">{held}</span>
                    <span class="tile-note">{if is_admin { "tools changed upstream: review them" } else { "tools wait for an admin's review" }}</span>
                </a>
            })}
        </section>
    }
}

/// Decisions per day as a bar chart drawn on the server (SVG): approvals
/// and declines stacked, with the same numbers in a table for screen readers.
#[component]
fn DecisionsChart(activity: Activity) -> impl IntoView {
    const W: f64 = 24.0;
    const H: f64 = 90.0;
    let days = activity.days;
    let max = days.iter().map(|d| d.approved + d.declined).max().unwrap_or(0).max(1) as f64;
    let width = W * days.len() as f64;
    let total: u64 = days.iter().map(|d| d.approved + d.declined).sum();
    let summary = format!("Decisions per day over the last {} days: {total} in all.", days.len());
    let last = days.len().saturating_sub(1);
    view! {
        <section aria-labelledby="chart-h" class="panel chart">
            <h2 id="chart-h">"Decisions per day"</h2>
            <p class="legend"><span class="key approved"></span>"approved" <span class="key declined"></span>"declined"</p>
            <svg viewBox=format!("0 0 {width} {}", H + 16.0) role="img" aria-label=summary.clone() preserveAspectRatio="xMidYMid meet">
                <line class="axis" x1="0" x2=width.to_string() y1=H.to_string() y2=H.to_string()/>
                {days.iter().enumerate().map(|(i, d)| {
                    let x = i as f64 * W + 4.0;
                    let ha = d.approved as f64 / max * (H - 8.0);
                    let hd = d.declined as f64 / max * (H - 8.0);
                    let label = if i == last { "today".to_string() } else if i % 2 == last % 2 { day_of_month(d.day_ms) } else { String::new() };
                    let title = format!("{}: {} approved, {} declined", &exact(d.day_ms)[..10], d.approved, d.declined);
                    view! {
                        <g>
                            <title>{title}</title>
                            <rect class="bar approved" x=x.to_string() width=(W - 8.0).to_string() y=(H - ha).to_string() height=ha.to_string()/>
                            <rect class="bar declined" x=x.to_string() width=(W - 8.0).to_string() y=(H - ha - hd).to_string() height=hd.to_string()/>
                            // The last label ends at the chart's edge: centred, "today" overhangs it.
                            {if i == last {
                                view! { <text x=width.to_string() y=(H + 12.0).to_string() text-anchor="end">{label}</text> }
                            } else {
                                view! { <text x=(x + (W - 8.0) / 2.0).to_string() y=(H + 12.0).to_string() text-anchor="middle">{label}</text> }
                            }}
                        </g>
                    }
                }).collect_view()}
            </svg>
            <table class="visually-hidden" aria-label="Decisions per day">
                <thead><tr><th scope="col">"Day (UTC)"</th><th scope="col">"Approved"</th><th scope="col">"Declined"</th></tr></thead>
                <tbody>
                {days.iter().map(|d| view! {
                    <tr><td>{exact(d.day_ms)[..10].to_string()}</td><td>{d.approved}</td><td>{d.declined}</td></tr>
                }).collect_view()}
                </tbody>
            </table>
            {(total == 0).then(|| view! { <p class="empty">"No decision in these two weeks: calls that wait for a person show up here once someone decides them."</p> })}
        </section>
    }
}

/// The calls that failed lately, each with where and why; nothing when
/// none did.
#[component]
fn Failures(failures: Vec<AuditEntry>, now_ms: i64) -> impl IntoView {
    (!failures.is_empty()).then(|| {
        view! {
            <section class="panel failures" aria-labelledby="failures-h">
                <h2 id="failures-h">"Failed lately"</h2>
                <ul data-testid="failures">
                    {failures.into_iter().map(|e| {
                        let tool = view! { <Name text=e.tool.clone() joints=true/> };
                        // A paused call has a page; one that ran at once, its history.
                        let href = if e.execution_id.as_str().starts_with("exec_") {
                            routes::resume(e.execution_id.as_str(), None)
                        } else {
                            routes::history(&HistoryFilter { tool: e.tool.clone(), ..Default::default() })
                        };
                        view! {
                            <li>
                                <a class="tool-link" href=href>{tool}</a>
                                <span class="hint">" · " <Name text=e.agent/> " · " <When ms=e.at_ms now_ms/></span>
                                {e.detail.map(|d| view! { <div class="why"><Name text=d/></div> })}
                            </li>
                        }
                    }).collect_view()}
                </ul>
                <p><a href=routes::history(&HistoryFilter { outcome: State::Failed.as_str().into(), ..Default::default() })>"Every failed call"</a></p>
            </section>
        }
    })
}

/// The day of the month of a UTC midnight (Unix ms), e.g. "7".
fn day_of_month(day_ms: i64) -> String {
    exact(day_ms)[8..10].trim_start_matches('0').to_string()
}

/// A top-five list with bars proportional to the first.
#[component]
fn BusiestList(title: &'static str, id: &'static str, items: Vec<Busiest>, empty: &'static str) -> impl IntoView {
    let max = items.first().map(|b| b.calls).unwrap_or(1).max(1);
    view! {
        <section class="panel busiest" aria-labelledby=id>
            <h2 id=id>{title}</h2>
            {if items.is_empty() {
                view! { <p class="empty">{empty}</p> }.into_any()
            } else {
                view! {
                    <ol class="bars" data-testid=id>
                        {items.into_iter().map(|b| {
                            let pct = (b.calls * 100 / max).max(2);
                            view! {
                                <li>
                                    <span class="bar-name"><Name text=b.name/></span>
                                    <span class="bar-count">{b.calls}</span>
                                    // An SVG bar: the policy allows no inline style.
                                    <svg class="bar-track" viewBox="0 0 100 4" preserveAspectRatio="none" aria-hidden="true">
                                        <rect class="bar-back" width="100" height="4"/>
                                        <rect class="bar-fill" width=pct.to_string() height="4"/>
                                    </svg>
                                </li>
                            }
                        }).collect_view()}
                    </ol>
                }.into_any()
            }}
        </section>
    }
}

/// Each upstream and its health.
#[component]
fn UpstreamHealth(upstreams: Vec<UpstreamInfo>) -> impl IntoView {
    (!upstreams.is_empty()).then(|| {
        view! {
            <section class="panel" aria-labelledby="upstreams-h">
                <h2 id="upstreams-h">"Upstreams"</h2>
                <ul class="health">
                    {upstreams.into_iter().map(|u| { let key = u.name.clone(); view! {
                        <li data-upstream=key>
                            <span class=format!("dot {}", u.health) aria-hidden="true"></span>
                            <Name text=u.name/> " " <span class="hint">{format!("{} · {} tools", u.health, u.tools)}</span>
                        </li>
                    }}).collect_view()}
                </ul>
            </section>
        }
    })
}

/// One agent's MCP sessions, as one card.
struct AgentSessions {
    owner: Option<String>,
    agent: String,
    sessions: usize,
    /// Its threads and clients, each once, in the order first seen.
    threads: Vec<String>,
    clients: Vec<String>,
    last_seen: i64,
}

impl AgentSessions {
    fn new(at: i64, s: &McpSessionInfo) -> Self {
        let mut a = Self {
            owner: s.owner.clone(),
            agent: s.agent.clone(),
            sessions: 0,
            threads: Vec::new(),
            clients: Vec::new(),
            last_seen: at,
        };
        a.add(at, s);
        a
    }

    fn add(&mut self, at: i64, s: &McpSessionInfo) {
        self.sessions += 1;
        self.last_seen = self.last_seen.max(at);
        if let Some(t) = &s.thread
            && !self.threads.contains(t)
        {
            self.threads.push(t.clone());
        }
        let client = s.client();
        if !client.is_empty() && !self.clients.contains(&client) {
            self.clients.push(client);
        }
    }
}

/// Connected agents, one card each with its MCP sessions counted: those
/// that showed a sign of life lately, then the idle ones (their client may
/// have exited without closing their sessions).
#[component]
fn Sessions(
    sessions: Vec<McpSessionInfo>,
    credentials: Vec<CredentialView>,
    now_ms: i64,
    is_admin: bool,
) -> impl IntoView {
    let scope = if is_admin { "all agents" } else { "your agents" };
    let seen = |s: &McpSessionInfo| {
        credentials.iter().find(|c| c.id == s.credential_id).map(|c| c.last_seen_ms).unwrap_or(s.opened_at_ms)
    };
    // One card per agent (owner and name), its sessions counted: a client
    // that opens a session per task would otherwise fill the page with
    // identical cards.
    let mut agents: Vec<AgentSessions> = Vec::new();
    for s in sessions {
        let at = seen(&s);
        match agents.iter_mut().find(|a| a.owner == s.owner && a.agent == s.agent) {
            Some(a) => a.add(at, &s),
            None => agents.push(AgentSessions::new(at, &s)),
        }
    }
    agents.sort_by(|a, b| b.last_seen.cmp(&a.last_seen).then_with(|| a.agent.cmp(&b.agent)));
    let (live, idle): (Vec<_>, Vec<_>) = agents.into_iter().partition(|a| now_ms - a.last_seen < IDLE_AFTER_MS);
    let card = move |a: AgentSessions| {
        view! {
            <li class="card">
                <strong class="agent"><Name text=a.agent/></strong>
                {is_admin.then_some(a.owner).flatten().map(|o| view! { <span class="tag">"of " <Name text=o/></span> })}
                {a.threads.into_iter().map(|t| view! { <span class="tag">"thread " <Name text=t/></span> }).collect_view()}
                <div class="meta">
                    <span>{crate::words::count(a.sessions as u64, "session")}</span>
                    {a.clients.into_iter().map(|c| view! { " · " <span><Name text=c/></span> }).collect_view()}
                    " · last sign of life " <When ms=a.last_seen now_ms/>
                </div>
            </li>
        }
    };
    let idle_count = idle.len();
    view! {
        <section aria-labelledby="sessions-h">
            <h2 id="sessions-h">"Connected now"</h2>
            <p class="hint">"Agents connected to " <code>"/mcp"</code> " (" {scope} ") that showed a sign of life in the last five minutes."</p>
            {if live.is_empty() {
                view! { <p class="empty">"No agent is connected. Mint a credential on the " <a href=routes::AGENTS>"Agents"</a> " page and paste its config into your MCP client."</p> }.into_any()
            } else {
                view! { <ul class="cards" aria-label="Connected agents">{live.into_iter().map(card).collect_view()}</ul> }.into_any()
            }}
            {(idle_count > 0).then(|| view! {
                <details class="idle-sessions">
                    <summary>{crate::words::count(idle_count as u64, "idle agent")}</summary>
                    <p class="hint">"No sign of life for five minutes or more: the client may have exited without closing them. They end on their own."</p>
                    <ul class="cards" aria-label="Idle agents">{idle.into_iter().map(card).collect_view()}</ul>
                </details>
            })}
        </section>
    }
}
