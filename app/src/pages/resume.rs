//! `/resume/{eid}`: one paused call (what, who, arguments, countdown,
//! Approve/Decline), updated from the execution's live stream.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;

use gatehouse_model::{
    ArgMatch, ExecutionId, ExecutionView, GrantScope, GrantSuggestion, MAX_NOTE_CHARS, State, routes,
};

use crate::components::arguments::{Arguments, KeptArgumentsView};
use crate::components::clock::{countdown, use_now};
use crate::components::header::Header;
use crate::components::live::{LiveState, LiveStatus, use_live_events};
use crate::components::name::Name;
use crate::components::when::When;
use crate::reveal::visible;
use crate::server_fns::{DecideExecution, DeclineSuggestion, GrantExecution, Lookup, get_execution, get_timeline};
use crate::time_fmt::{exact, iso};

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
        // Never the state of a paused call; only of a request in the history.
        State::Allowed => "Allowed by policy",
        State::Blocked => "Blocked by policy",
        State::Limited => "Over a rate limit",
        State::Shadow => "What a shadow rule would have done",
    }
}

/// `/resume/{eid}`
#[component]
pub fn ResumePage() -> impl IntoView {
    let params = use_params_map();
    let id = move || ExecutionId::from(params.read().get("eid").unwrap_or_default());
    let execution = crate::json::resource(id, get_execution);
    let decide = ServerAction::<DecideExecution>::new();
    let grant = ServerAction::<GrantExecution>::new();
    // The stream sends the execution's view now and on every change (our own
    // decision included): the page shows the latest, nothing is read again.
    let latest = RwSignal::new(None::<ExecutionView>);
    let live = use_live_events(routes::execution_events(&id()), move |data| {
        if let Ok(view) = crate::json::from_str::<ExecutionView>(&data) {
            latest.set(Some(view));
        }
    });
    view! {
        <Header/>
        <Suspense fallback=|| view! { <main class="page"><p>"Loading…"</p></main> }>
            {move || execution.get().map(|result| match result {
                Ok(Lookup::Found { execution, now_ms, is_admin }) => {
                    // A memo, so an event that repeats what the page shows (the
                    // stream's first one always does) re-renders nothing.
                    let current: Signal<ExecutionView> = Memo::new(move |_| {
                        // A live event carries no offer: the one the page was loaded with stays.
                        latest.get().filter(|v| v.execution_id == execution.execution_id)
                            .map(|v| ExecutionView { suggestion: execution.suggestion.clone(), ..v })
                            .unwrap_or_else(|| (*execution).clone())
                    }).into();
                    view! { <Resume current now_ms is_admin decide grant live/> }.into_any()
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
                    <p>"No call has this id. Check the link: paused calls keep their page across restarts, and the history keeps every call once it is settled."</p>
                    <p><a href="/history">"The history"</a></p>
                    <p><a href="/approvals">"Your approvals"</a></p></main>
                }.into_any(),
                Err(e) => view! { <main class="narrow"><p role="alert">"Could not load: " {crate::outcome::message(&e)}</p></main> }.into_any(),
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
    grant: ServerAction<GrantExecution>,
    live: ReadSignal<LiveState>,
) -> impl IntoView {
    // One clock for the page: it keeps ticking while the view changes.
    let now = use_now(now_ms);
    let id = current.with_untracked(|c| c.execution_id.clone());
    let state = Memo::new(move |_| current.get().state);
    view! {
        <main class="page resume">
            {move || view! { <ResumeBody execution=current.get() now is_admin decide grant/> }.into_any()}
            <Timeline id state now/>
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
    grant: ServerAction<GrantExecution>,
) -> impl IntoView {
    let can_decide = execution.decidable_by(is_admin);
    let ExecutionView {
        execution_id,
        state,
        tool,
        upstream,
        arguments,
        kept,
        arguments_digest,
        agent,
        owner,
        expires_at_ms,
        decision,
        admin_only,
        human_only,
        session_id,
        suggestion,
        failure,
        ..
    } = execution;
    let string_args = arguments.as_ref().map(constrainable).unwrap_or_default();
    let arguments = arguments.map(|a| serde_json::to_string_pretty(&a).unwrap_or_default());
    let decided_by = decision.map(|d| d.by);
    let pending = state == State::Pending;
    let title = if pending {
        format!("Approve {}? — Gatehouse", visible(&tool))
    } else {
        format!("{}: {state} — Gatehouse", visible(&tool))
    };
    let remaining = move || expires_at_ms.map(|e| countdown(e - now.get()));
    let error = move || {
        let decided = decide.value().get().and_then(|r| r.err());
        let granted = grant.value().get().and_then(|r| r.err());
        decided.or(granted).map(|e| crate::outcome::message(&e))
    };
    let id_a = execution_id.clone();
    let id_d = execution_id.clone();
    let approve_note = NodeRef::<leptos::html::Textarea>::new();
    let id_g = execution_id.clone();
    view! {
        <Title text=title/>
            <p class="eyebrow" data-testid="wants">"Agent " <strong class="agent"><Name text=agent.clone()/></strong> " " {crate::words::wants(state)}</p>
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
                    <div><dt>"Time left"</dt><dd><time class="countdown" datetime=iso(e) title=exact(e) data-clock="countdown" data-left-ms=e - now.get_untracked()>{remaining}</time></dd></div>
                })}
            </dl>
            <p class="state" role="status" aria-live="polite" data-state=state.as_str()>
                <span class=format!("badge {state}")>{
                    if pending && !can_decide { "Waiting for an admin's decision" } else { state_label(state) }
                }</span>
                // What took it out of pending, and who: "approved by alice"
                // even once it has run (the badge says where it is now).
                {decided_by.map(|by| {
                    // "Declined by ada"; once it has moved on, "Completed · approved by ada".
                    let lead = match state {
                        State::Approved | State::Declined => " by ".to_string(),
                        _ => format!(" · {} by ", crate::words::decision(state).unwrap_or("decided")),
                    };
                    view! { <span class="by" data-testid="decided-by">{lead} <Name text=crate::words::actor(&by, &[])/></span> }
                })}
            </p>
            {failure.map(|why| view! { <p class="failure" data-testid="failure"><Name text=why/></p> })}
            <h2>"Arguments"</h2>
            {match (arguments, kept) {
                (Some(text), _) => view! { <Arguments text/> }.into_any(),
                (None, Some(kept)) => view! { <KeptArgumentsView kept/> }.into_any(),
                (None, None) => view! { <p class="hint">"The record did not keep this call's arguments (keep_arguments); the digest below identifies them."</p> }.into_any(),
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
                // The words sit above the buttons and join their forms by
                // the `form` attribute, so the buttons stay within thumb reach.
                <div class="words">
                    <label>"Reason for declining (optional; the agent sees it)"
                        <textarea form="decline-form" name="reason" rows="2" maxlength=MAX_NOTE_CHARS.to_string()></textarea>
                    </label>
                    <label class="approve-note">"Note on approving (optional)"
                        <textarea form="approve-form" name="reason" rows="2" maxlength=MAX_NOTE_CHARS.to_string() node_ref=approve_note></textarea>
                    </label>
                </div>
                {(!human_only).then(|| view! {
                    <GrantForm grant id=id_g.clone() has_session=session_id.is_some() string_args=string_args.clone() approve_note/>
                })}
                <div class="decide">
                    <ActionForm action=decide attr:class="decide-form" attr:id="decline-form">
                        <input type="hidden" name="id" value=id_d.to_string()/>
                        <input type="hidden" name="action" value="decline"/>
                        <button type="submit" class="decline">"Decline"</button>
                    </ActionForm>
                    <ActionForm action=decide attr:class="decide-form" attr:id="approve-form">
                        <input type="hidden" name="id" value=id_a.to_string()/>
                        <input type="hidden" name="action" value="accept"/>
                        <button type="submit" class="approve">"Approve"</button>
                    </ActionForm>
                </div>
                // After the sticky decide bar, so the bar never covers it.
                {suggestion.filter(|_| !human_only).map(|offer| view! {
                    <Suggestion offer grant id=execution_id.clone()/>
                })}
            })}
            {(pending && can_decide && human_only).then(|| view! {
                <p class="hint">"A person decides every call to this tool: it cannot be allowed in advance."</p>
            })}
    }
}

/// Top-level string arguments a grant may be narrowed by, as (name, value);
/// names that do not fit a form field name plainly are not offered.
fn constrainable(arguments: &serde_json::Value) -> Vec<(String, String)> {
    arguments
        .as_object()
        .map(|map| {
            map.iter()
                .filter(|(name, _)| gatehouse_model::form_field_name(name))
                .filter_map(|(name, value)| value.as_str().map(|v| (name.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// The grant offered once people approved calls like this one: one
/// step to approve it and allow the like (the grant form's own action,
/// pre-filled), or a turn-down that is remembered.
#[component]
fn Suggestion(offer: GrantSuggestion, grant: ServerAction<GrantExecution>, id: ExecutionId) -> impl IntoView {
    let turn_down = ServerAction::<DeclineSuggestion>::new();
    let turned_down = move || turn_down.value().get().is_some_and(|r| r.is_ok());
    let shown = move || (!turned_down()).then(|| offer_view(&offer, grant, turn_down, &id));
    view! { {shown} }
}

/// The offer itself ([`Suggestion`]).
fn offer_view(
    offer: &GrantSuggestion,
    grant: ServerAction<GrantExecution>,
    turn_down: ServerAction<DeclineSuggestion>,
    id: &ExecutionId,
) -> impl IntoView + use<> {
    let when = offer
        .arguments
        .iter()
        .enumerate()
        .map(|(i, (name, want))| {
            let (words, value) = match want {
                ArgMatch::Exact(v) => (" is exactly ", v.clone()),
                ArgMatch::Prefix(p) => (" is under ", p.clone()),
            };
            view! { {if i == 0 { " when " } else { " and " }}<code>{name.clone()}</code>{words}<code class="value"><Name text=value/></code> }
        })
        .collect_view();
    let times = match offer.approvals {
        1 => "once".to_string(),
        2 => "twice".to_string(),
        n => format!("{n} times"),
    };
    let free = (!offer.free.is_empty()).then(|| {
        let names = offer
            .free
            .iter()
            .enumerate()
            .map(|(i, name)| view! { {(i > 0).then_some(", ")}<code><Name text=name.clone()/></code> })
            .collect_view();
        view! { <p class="hint" data-testid="left-free">"Any value of " {names} ": these varied too much to hold."</p> }
    });
    let fields = offer
        .arguments
        .iter()
        .map(|(name, want)| match want {
            ArgMatch::Exact(_) => view! { <input type="hidden" name=format!("exact[{name}]") value="on"/> }.into_any(),
            ArgMatch::Prefix(p) => {
                view! { <input type="hidden" name=format!("prefix[{name}]") value=p.clone()/> }.into_any()
            }
        })
        .collect_view();
    let (scope, label) = (offer.scope.as_str(), offer.scope.label());
    let (id_d, id_g) = (id.to_string(), id.to_string());
    view! {
        <section class="panel suggestion" data-testid="suggestion" aria-label="Suggested grant">
            <p>{format!("Calls like this were approved {times} in the last 7 days. Allow them {label}")}{when}"?"</p>
            {free}
            <p class="hint">"Approves this call too. Revoke it any time on the Grants page."</p>
            <div class="offer-answers">
                <ActionForm action=turn_down attr:class="decide-form">
                    <input type="hidden" name="id" value=id_d/>
                    <button type="submit" class="quiet">"Don't suggest this again"</button>
                </ActionForm>
                <ActionForm action=grant attr:class="decide-form">
                    <input type="hidden" name="id" value=id_g/>
                    <input type="hidden" name="scope" value=scope/>
                    {fields}
                    <button type="submit" class="approve">"Approve and allow"</button>
                </ActionForm>
            </div>
        </section>
    }
}

/// "Allow this tool for this agent": approves this call and stores a grant
/// for a scope, optionally only for this call's values of some arguments.
#[component]
fn GrantForm(
    grant: ServerAction<GrantExecution>,
    id: ExecutionId,
    has_session: bool,
    string_args: Vec<(String, String)>,
    approve_note: NodeRef<leptos::html::Textarea>,
) -> impl IntoView {
    // One note per approval: while this panel is open it stands in for the
    // note above (hidden by the style sheet), and starts with what was typed there.
    let grant_note = NodeRef::<leptos::html::Textarea>::new();
    let carry_note = move |_| {
        if let (Some(above), Some(here)) = (approve_note.get(), grant_note.get())
            && here.value().is_empty()
        {
            here.set_value(&above.value());
        }
    };
    let scopes: Vec<GrantScope> =
        GrantScope::ALL.into_iter().filter(|s| has_session || *s != GrantScope::Session).collect();
    let scope_label = |s: GrantScope| match s {
        GrantScope::Session => "This MCP session",
        GrantScope::OneHour => "1 hour",
        GrantScope::EightHours => "8 hours",
        GrantScope::Day => "24 hours",
        GrantScope::UntilRevoked => "Until revoked",
    };
    view! {
        <details class="panel grant" on:toggle=carry_note>
            <summary>"Allow this tool for this agent…"</summary>
            <p class="hint">"Approves this call, and lets the next ones run without asking, for every credential of this agent. Revoke it any time on the Grants page."</p>
            <ActionForm action=grant attr:class="grant-form">
                <input type="hidden" name="id" value=id.to_string()/>
                <fieldset>
                    <legend>"For how long"</legend>
                    {scopes.into_iter().enumerate().map(|(i, s)| view! {
                        <label class="choice"><input type="radio" name="scope" value=s.as_str() checked=i == 0/>{scope_label(s)}</label>
                    }).collect_view()}
                </fieldset>
                {(!string_args.is_empty()).then(|| view! {
                    <fieldset>
                        <legend>"Only when (optional)"</legend>
                        {string_args.into_iter().map(|(name, value)| view! {
                            <div class="constraint">
                                <label class="choice">
                                    <input type="checkbox" name=format!("exact[{name}]") value="on"/>
                                    <span><code>{name.clone()}</code>" is exactly " <code class="value"><Name text=value/></code></span>
                                </label>
                                <label>{format!("or {name} starts with")}
                                    <input name=format!("prefix[{name}]") autocomplete="off" spellcheck="false"/>
                                </label>
                            </div>
                        }).collect_view()}
                    </fieldset>
                })}
                <label>"Note on approving (optional)"
                    <textarea name="note" rows="2" maxlength=MAX_NOTE_CHARS.to_string() node_ref=grant_note></textarea>
                </label>
                <button type="submit" class="approve">"Approve and allow"</button>
            </ActionForm>
        </details>
    }
}

/// Every audit entry of the execution, oldest first; read again whenever
/// its state changes.
#[component]
fn Timeline(id: ExecutionId, state: Memo<State>, now: ReadSignal<i64>) -> impl IntoView {
    let timeline = crate::json::resource(move || state.get(), move |_| get_timeline(id.clone()));
    view! {
        <section aria-labelledby="timeline-h" class="timeline-section">
            <h2 id="timeline-h">"Timeline"</h2>
            <Transition fallback=|| view! { <p>"Loading…"</p> }>
                {move || timeline.get().map(|result| match result {
                    Ok(entries) => view! {
                        <ol class="timeline" aria-label="Timeline">
                            {entries.into_iter().map(|e| {
                                // How a run ended is nobody's doing: its detail says what happened.
                                let ended = matches!(e.state, State::Completed | State::Failed);
                                let by = e.actor.as_deref().filter(|_| !ended).map(|a| crate::words::actor(a, &[])).unwrap_or_default();
                                view! {
                                    <li data-state=e.state.as_str()>
                                        <When ms=e.at_ms now_ms=now.get_untracked()/>
                                        " " <span class=format!("badge {}", e.state)>{e.state.as_str()}</span>
                                        {(!by.is_empty()).then(|| view! { <span class="by">" by " <Name text=by/></span> })}
                                        {e.detail.map(|d| view! { <div class="meta"><Name text=d/></div> })}
                                    </li>
                                }
                            }).collect_view()}
                        </ol>
                    }.into_any(),
                    Err(e) => view! { <p class="hint">"The timeline could not be read: " {crate::outcome::message(&e)}</p> }.into_any(),
                })}
            </Transition>
        </section>
    }
}
