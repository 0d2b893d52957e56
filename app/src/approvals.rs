//! The resume page (one paused call: what, who, arguments, countdown,
//! Approve/Decline, live state) and the approvals inbox.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;

use gatehouse_model::{ExecutionView, State, routes};

use crate::api::{DecideExecution, Lookup, get_execution, list_pending};
use crate::live::{LiveState, LiveStatus, use_live_events};
use crate::pages::Header;
use crate::reveal::{HiddenChar, Name, Piece, reveal, visible};
use crate::time_fmt::{exact, iso};

/// "4:59" / "1:02:03" / "expired".
fn countdown(remaining_ms: i64) -> String {
    if remaining_ms <= 0 {
        return "expired".into();
    }
    let s = remaining_ms / 1000;
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s % 3600 / 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

/// A clock that ticks every second once hydrated (the server renders `start`).
fn use_now(start: i64) -> ReadSignal<i64> {
    let (now, set_now) = signal(start);
    #[cfg(feature = "hydrate")]
    {
        let offset = start - js_sys_now();
        set_now.set(js_sys_now() + offset);
        let handle =
            set_interval_with_handle(move || set_now.set(js_sys_now() + offset), std::time::Duration::from_secs(1));
        if let Ok(handle) = handle {
            on_cleanup(move || handle.clear());
        }
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = set_now;
    now
}

#[cfg(feature = "hydrate")]
fn js_sys_now() -> i64 {
    web_sys::window().and_then(|w| w.performance()).map(|p| (p.time_origin() + p.now()) as i64).unwrap_or(0)
}

/// Arguments shown in full, hidden characters made visible.
#[component]
fn Arguments(text: String) -> impl IntoView {
    let pieces = reveal(&text);
    let hidden = pieces.iter().filter(|p| matches!(p, Piece::Hidden(_))).count();
    view! {
        {(hidden > 0).then(|| view! {
            <p class="warning" role="note">
                {format!("These arguments contain {hidden} invisible or direction-changing character{}; each is shown as its code point.", if hidden == 1 { "" } else { "s" })}
            </p>
        })}
        <pre class="arguments" tabindex="0" aria-label="Arguments" dir="ltr">
            {pieces.into_iter().map(|p| match p {
                Piece::Text(t) => view! { <span>{t}</span> }.into_any(),
                Piece::Hidden(c) => view! { <HiddenChar c/> }.into_any(),
            }).collect_view()}
        </pre>
    }
}

fn state_label(state: State) -> &'static str {
    match state {
        State::Pending => "Waiting for your decision",
        State::Approved => "Approved — waiting for the agent to run it",
        State::Running => "Running",
        State::Completed => "Completed",
        State::Failed => "Failed",
        State::Declined => "Declined",
        State::Expired => "Expired",
        // A revoked credential's call reads as cancelled, as it always has.
        State::Cancelled | State::Revoked => "Cancelled",
    }
}

/// `/resume/{eid}`
#[component]
pub fn ResumePage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.read().get("eid").unwrap_or_default();
    let execution = Resource::new(id, get_execution);
    let decide = ServerAction::<DecideExecution>::new();
    // The stream sends the execution's view now and on every change (our own
    // decision included): the page shows the latest, nothing is read again.
    let latest = RwSignal::new(None::<ExecutionView>);
    let live = use_live_events(routes::execution_events(&id()), move |data| {
        if let Ok(view) = serde_json::from_str::<ExecutionView>(&data) {
            latest.set(Some(view));
        }
    });
    view! {
        <Suspense fallback=|| view! { <main class="page"><p>"Loading…"</p></main> }>
            {move || execution.get().map(|result| match result {
                Ok(Lookup::Found { execution, now_ms, is_admin }) => {
                    let current = Signal::derive(move || {
                        latest.get().filter(|v| v.execution_id == execution.execution_id).unwrap_or_else(|| (*execution).clone())
                    });
                    view! { <Resume current now_ms is_admin decide live/> }.into_any()
                }
                Ok(Lookup::Forbidden) => view! {
                    <Title text="Not yours — Gatehouse"/>
                    <main class="narrow"><h1>"403 — not yours to decide"</h1>
                    <p>"This call was made by an agent that belongs to another user."</p>
                    <p><a href="/approvals">"Your approvals"</a></p></main>
                }.into_any(),
                Ok(Lookup::NotFound) => view! {
                    <Title text="Not found — Gatehouse"/>
                    <main class="narrow"><h1>"404 — no such call"</h1>
                    <p>"There is no paused call with this id. It may be from before a restart."</p>
                    <p><a href="/approvals">"Your approvals"</a></p></main>
                }.into_any(),
                Err(e) => view! { <main class="narrow"><p role="alert">"Could not load: " {e.to_string()}</p></main> }.into_any(),
            })}
        </Suspense>
    }
}

#[component]
fn Resume(
    current: Signal<ExecutionView>,
    now_ms: i64,
    is_admin: bool,
    decide: ServerAction<DecideExecution>,
    live: ReadSignal<LiveState>,
) -> impl IntoView {
    // One clock for the page: it keeps ticking while the view changes.
    let now = use_now(now_ms);
    view! {
        <Header/>
        <main class="page resume">
            {move || view! { <ResumeBody execution=current.get() now is_admin decide/> }.into_any()}
            <LiveStatus state=live/>
        </main>
    }
}

/// What the resume page shows of one state of the execution.
#[component]
fn ResumeBody(
    execution: ExecutionView,
    now: ReadSignal<i64>,
    is_admin: bool,
    decide: ServerAction<DecideExecution>,
) -> impl IntoView {
    let can_decide = execution.decidable_by(is_admin);
    let ExecutionView {
        execution_id,
        state,
        tool,
        upstream,
        arguments,
        arguments_digest,
        agent,
        owner,
        expires_at_ms,
        decision,
        admin_only,
        ..
    } = execution;
    let arguments = arguments.map(|a| serde_json::to_string_pretty(&a).unwrap_or_default());
    let decided_by = decision.map(|d| d.by);
    let pending = state == State::Pending;
    let title = if pending {
        format!("Approve {}? — Gatehouse", visible(&tool))
    } else {
        format!("{}: {state} — Gatehouse", visible(&tool))
    };
    let remaining = move || expires_at_ms.map(|e| countdown(e - now.get()));
    let error = move || decide.value().get().and_then(|r| r.err()).map(|e| e.to_string());
    let id_a = execution_id.clone();
    let id_d = execution_id.clone();
    view! {
        <Title text=title/>
            <p class="eyebrow">"Agent " <strong class="agent"><Name text=agent.clone()/></strong> " wants to run"</p>
            <h1 class="tool-name"><Name text=tool.clone()/></h1>
            <dl class="facts">
                <div><dt>"Agent"</dt><dd><Name text=agent/></dd></div>
                <div><dt>"Upstream"</dt><dd>{match upstream {
                    Some(u) => view! { <Name text=u/> }.into_any(),
                    None => "gatehouse (built-in)".into_any(),
                }}</dd></div>
                <div><dt>"Owner"</dt><dd>{match owner {
                    Some(o) => view! { <Name text=o/> }.into_any(),
                    None => "— (admins decide)".into_any(),
                }}</dd></div>
                {expires_at_ms.map(|e| view! {
                    <div><dt>"Time left"</dt><dd><time class="countdown" datetime=iso(e) title=exact(e)>{remaining}</time></dd></div>
                })}
            </dl>
            <p class="state" role="status" aria-live="polite" data-state=state.as_str()>
                <span class=format!("badge {state}")>{
                    if pending && !can_decide { "Waiting for an admin's decision" } else { state_label(state) }
                }</span>
                {decided_by.map(|by| view! { <span class="by">" by " <Name text=by.trim_start_matches("user:").to_string()/></span> })}
            </p>
            <h2>"Arguments"</h2>
            {match arguments {
                Some(text) => view! { <Arguments text/> }.into_any(),
                None => view! { <p class="hint">"The arguments are no longer kept once a call has settled; the digest below identifies them."</p> }.into_any(),
            }}
            <p class="digest">"SHA-256 " <code>{arguments_digest}</code></p>
            <Show when=move || error().is_some()>
                <p role="alert" class="error">{error}</p>
            </Show>
            {(admin_only && pending).then(|| view! {
                <p class="hint admin-only">
                    {if can_decide {
                        "This call changes the gate for everyone: only an admin can decide it."
                    } else {
                        "This call changes the gate for everyone: only an admin can decide it. Ask an admin to open this page."
                    }}
                </p>
            })}
            {(pending && can_decide).then(|| view! {
                <div class="decide">
                    <ActionForm action=decide attr:class="decide-form">
                        <input type="hidden" name="id" value=id_d.clone()/>
                        <input type="hidden" name="action" value="decline"/>
                        <button type="submit" class="decline">"Decline"</button>
                    </ActionForm>
                    <ActionForm action=decide attr:class="decide-form">
                        <input type="hidden" name="id" value=id_a.clone()/>
                        <input type="hidden" name="action" value="accept"/>
                        <button type="submit" class="approve">"Approve"</button>
                    </ActionForm>
                </div>
            })}
    }
}

/// `/approvals`: pending calls, arriving and leaving live.
#[component]
pub fn InboxPage() -> impl IntoView {
    let pending = Resource::new(|| (), |_| list_pending());
    let live = use_live_events(routes::APPROVAL_EVENTS.to_string(), move |_| pending.refetch());
    view! {
        <Title text="Approvals — Gatehouse"/>
        <Header/>
        <main class="page">
            <h1>"Waiting for approval"</h1>
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || pending.get().map(|result| match result {
                    Ok(inbox) if inbox.pending.is_empty() => view! { <p class="empty">"No call is waiting for a decision."</p> }.into_any(),
                    Ok(inbox) => view! {
                        <ul class="cards" aria-label="Pending approvals">
                            {inbox.pending.into_iter().map(|e| view! {
                                <li class="card" data-execution-id=e.execution_id.clone()>
                                    <a class="tool-link" href=routes::resume(&e.execution_id, None)>
                                        <strong><Name text=e.tool.clone()/></strong>
                                    </a>
                                    {e.admin_only.then(|| view! {
                                        <span class="tag admin-only" title="It changes the gate for everyone">
                                            {if e.decidable_by(inbox.is_admin) { "admin decision" } else { "needs an admin" }}
                                        </span>
                                    })}
                                    <div class="meta">"from " <Name text=e.agent.clone()/>
                                        {e.expires_at_ms.map(|x| view! { " · expires " <time datetime=iso(x) title=exact(x)>{crate::time_fmt::relative(x, inbox.now_ms)}</time> })}
                                    </div>
                                </li>
                            }).collect_view()}
                        </ul>
                    }.into_any(),
                    Err(e) => view! { <p role="alert">"Could not load: " {e.to_string()}</p> }.into_any(),
                })}
            </Suspense>
            <LiveStatus state=live/>
        </main>
    }
}
