//! `/approvals`: the inbox, for triage. Each waiting call with what it asks
//! (its arguments on one line), how long it has waited and how long it has
//! left; Approve or Decline it from the list, or select several and decide
//! them at once with one reason. From the keyboard: `j`/`k` move, `a`/`d`
//! ask to approve or decline the call in focus (`a`/`d` again or Enter
//! confirms, Escape cancels), `?` lists the keys. Live: the stream's `inbox`
//! events replace the list the server rendered.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use gatehouse_model::{ExecutionId, ExecutionView, InboxView, routes};

use crate::components::clock::use_now;
use crate::components::header::Header;
use crate::components::live::{LiveStatus, use_inbox, use_live_events};
use crate::components::name::Name;
use crate::outcome::{Outcome, OutcomeLine, report_with};
use crate::server_fns::{DecideExecution, DecideMany, DecidedCall, DecidedMany, ToConfirm, confirm_many, list_pending};
use crate::time_fmt::{duration, exact, iso, relative};

/// A decision asked for from the keyboard, waiting for its confirmation:
/// the call's id and `accept` or `decline`.
type Asked = Option<(String, &'static str)>;

/// `/approvals`
#[component]
pub fn InboxPage() -> impl IntoView {
    let rendered = crate::json::resource(|| (), |_| list_pending());
    let latest = use_inbox();
    let live = use_live_events(routes::APPROVAL_EVENTS.to_string(), |_| {});
    let decide = ServerAction::<DecideExecution>::new();
    let many = ServerAction::<DecideMany>::new();
    let outcome: Outcome = RwSignal::new(None);
    let confirming = RwSignal::new(None::<ToConfirm>);
    // A plain form (no JavaScript) asked to approve several: its
    // confirmation comes in the address (`?approve=<ids>&reason=…`).
    let query = use_query_map();
    let linked = crate::json::resource(
        move || query.with(|q| (q.get("approve"), q.get("reason"))),
        |(ids, reason)| async move {
            let ids: Vec<ExecutionId> =
                ids.unwrap_or_default().split(',').filter(|id| !id.is_empty()).map(ExecutionId::from).collect();
            if ids.is_empty() {
                return None;
            }
            confirm_many(ids, reason.filter(|r| !r.is_empty())).await.ok()
        },
    );
    let navigate = leptos_router::hooks::use_navigate();
    report_with(outcome, decide, DecidedCall::sentence);
    // Several at once: say how many, and which could not be; an approval
    // first comes back to be confirmed.
    Effect::new(move |_| {
        if let Some(result) = many.value().get() {
            if let Ok(DecidedMany { to_confirm: Some(asked), .. }) = &result {
                confirming.set(Some(asked.clone()));
                outcome.set(None);
                return;
            }
            confirming.set(None);
            // Confirmed on a confirmation drawn from the address: leave it.
            if query.with_untracked(|q| q.get("approve").is_some()) {
                navigate(routes::APPROVALS, Default::default());
            }
            outcome.set(Some(match result {
                Ok(done) if done.refused.is_empty() => Ok(format!("Decided {}.", done.decided)),
                Ok(done) => Err(format!(
                    "Decided {}; {} could not be: {}",
                    done.decided,
                    done.refused.len(),
                    done.refused.iter().map(|(id, why)| format!("{id} ({why})")).collect::<Vec<_>>().join("; ")
                )),
                Err(e) => Err(crate::outcome::message(&e)),
            }));
        }
    });
    view! {
        <Title text="Approvals — Gatehouse"/>
        <a class="skip" href="#pending">"Skip to the waiting calls"</a>
        <Header/>
        <main class="page">
            <h1>"Waiting for approval"</h1>
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || rendered.get().map(|result| match result {
                    Ok(first) => {
                        let current = Signal::derive(move || latest.get().unwrap_or_else(|| first.clone()));
                        view! { <Pending current decide many outcome confirming linked/> }.into_any()
                    }
                    Err(e) => view! { <p role="alert">"Could not load: " {crate::outcome::message(&e)}</p> }.into_any(),
                })}
            </Suspense>
            <LiveStatus state=live/>
        </main>
    }
}

#[component]
fn Pending(
    current: Signal<InboxView>,
    decide: ServerAction<DecideExecution>,
    many: ServerAction<DecideMany>,
    outcome: Outcome,
    confirming: RwSignal<Option<ToConfirm>>,
    linked: Resource<Option<ToConfirm>, crate::json::Json>,
) -> impl IntoView {
    // Ticks once hydrated, so "expires soon" and the relative times move
    // with the clock without refetching; the server renders its own now.
    let now = use_now(current.get_untracked().now_ms);
    let focused = RwSignal::new(None::<usize>);
    let asked = RwSignal::new(None as Asked);
    let help = RwSignal::new(false);
    keyboard(current, focused, asked, help, decide);
    let list = move || {
        let inbox = current.get();
        if inbox.pending.is_empty() {
            return view! { <p class="empty">"No call is waiting for a decision. When an agent's call needs you, it appears here at once."</p> }.into_any();
        }
        // A long backlog lists only the soonest to expire (INBOX_LIMIT).
        let more = inbox.truncated().then(|| {
            let text = format!(
                "Showing the {} that expire soonest of {} waiting; the next ones appear as these are decided.",
                inbox.pending.len(),
                inbox.total
            );
            view! { <p class="more" data-testid="inbox-more">{text}</p> }
        });
        let is_admin = inbox.is_admin;
        view! {
            {more}
            <ActionForm action=many attr:id="bulk-form" attr:class="bulk panel">
                <label>"Reason for the selected (optional; on a decline the agents see it)"
                    <input name="reason" maxlength=gatehouse_model::MAX_NOTE_CHARS.to_string() autocomplete="off"/>
                </label>
                <div class="bulk-buttons">
                    <button type="submit" name="action" value="decline" class="quiet danger">"Decline selected"</button>
                    // Never the most prominent control: it only asks, and the next step names what it approves.
                    <button type="submit" name="action" value="accept" class="quiet">"Approve selected…"</button>
                </div>
            </ActionForm>
            {move || {
                confirming.get().or_else(|| linked.get().flatten()).map(|asked| view! { <ConfirmBulk asked many confirming/> })
            }}
            <ul class="cards inbox" aria-label="Pending approvals">
                {inbox.pending.into_iter().enumerate().map(|(i, e)| {
                    view! { <Card i e now is_admin focused asked decide/> }
                }).collect_view()}
            </ul>
        }
        .into_any()
    };
    view! {
        <OutcomeLine outcome/>
        <p class="hint keys-hint">"Keys: " <kbd>"j"</kbd> " " <kbd>"k"</kbd> " move, " <kbd>"a"</kbd> " approve, "
            <kbd>"d"</kbd> " decline (each asks you to confirm), " <kbd>"?"</kbd> " all keys."</p>
        <Show when=move || help.get()>
            <section class="panel keys" aria-labelledby="keys-h" data-testid="keys-help">
                <h2 id="keys-h">"Keys"</h2>
                <dl>
                    <dt><kbd>"j"</kbd> " / " <kbd>"k"</kbd></dt><dd>"next / previous call"</dd>
                    <dt><kbd>"a"</kbd></dt><dd>"approve the call in focus: press " <kbd>"a"</kbd> " again or " <kbd>"Enter"</kbd> " to confirm"</dd>
                    <dt><kbd>"d"</kbd></dt><dd>"decline it: " <kbd>"d"</kbd> " again or " <kbd>"Enter"</kbd> " to confirm"</dd>
                    <dt><kbd>"Esc"</kbd></dt><dd>"cancel, close this list"</dd>
                    <dt><kbd>"?"</kbd></dt><dd>"show or hide this list"</dd>
                </dl>
            </section>
        </Show>
        <div id="pending" tabindex="-1">{list}</div>
    }
}

/// One waiting call: what it asks, its ages, its own buttons, its box for
/// deciding several at once, and a keyboard decision's confirmation.
#[component]
fn Card(
    i: usize,
    e: ExecutionView,
    now: ReadSignal<i64>,
    is_admin: bool,
    focused: RwSignal<Option<usize>>,
    asked: RwSignal<Asked>,
    decide: ServerAction<DecideExecution>,
) -> impl IntoView {
    let id = e.execution_id.to_string();
    let soon = {
        let e = e.clone();
        move || e.expires_soon(now.get())
    };
    let soon_class = soon.clone();
    let expires = e.expires_at_ms;
    let created = e.created_at_ms;
    let decidable = e.decidable_by(is_admin);
    let confirm = {
        let id = id.clone();
        move || asked.get().filter(|(a, _)| *a == id).map(|(_, action)| action)
    };
    let (id_a, id_d, id_box) = (id.clone(), id.clone(), id.clone());
    let tool = e.tool.clone();
    view! {
        <li class="card" class:expiring=soon_class class:focused=move || focused.get() == Some(i)
            id=format!("call-{i}") tabindex="-1" data-execution-id=id.clone()
            data-expiring=move || soon().to_string() on:focus=move |_| focused.set(Some(i))>
            <div class="card-head">
                {decidable.then(|| view! {
                    <input type="checkbox" name="ids[]" value=id_box form="bulk-form"
                        aria-label=format!("Select {}", tool)/>
                })}
                <a class="tool-link" href=routes::resume(&e.execution_id, None)>
                    <strong><Name text=e.tool.clone()/></strong>
                </a>
                {e.admin_only.then(|| view! {
                    <span class="tag admin-only" title="It changes the gate for everyone">
                        {if decidable { "admin decision" } else { "needs an admin" }}
                    </span>
                })}
            </div>
            <div class="meta">"from " <Name text=e.agent.clone()/>
                {created.map(|c| view! { " · waiting " <span data-testid="waited" data-clock="duration" data-left-ms=c - now.get_untracked()>{move || duration(u64::try_from((now.get() - c).max(0) / 1000).unwrap_or(0))}</span> })}
                {expires.map(|x| view! { " · expires " <time datetime=iso(x) title=exact(x) data-clock="relative" data-left-ms=x - now.get_untracked()>{move || relative(x, now.get())}</time> })}
            </div>
            {e.preview.clone().map(|p| view! { <WholeArguments id=e.execution_id.clone() preview=p/> })}
            {decidable.then(|| view! {
                <div class="card-actions">
                    <ActionForm action=decide attr:class="row-form">
                        <input type="hidden" name="id" value=id_d/>
                        <input type="hidden" name="action" value="decline"/>
                        <button type="submit" class="quiet danger">"Decline"</button>
                    </ActionForm>
                    <ActionForm action=decide attr:class="row-form">
                        <input type="hidden" name="id" value=id_a/>
                        <input type="hidden" name="action" value="accept"/>
                        <button type="submit" class="quiet">"Approve"</button>
                    </ActionForm>
                </div>
            })}
            {move || confirm().map(|action| view! {
                <p class="confirm-line" role="alert" data-testid="confirm">
                    {if action == "accept" { "Approve this call? " } else { "Decline this call? " }}
                    <kbd>{if action == "accept" { "a" } else { "d" }}</kbd> " or " <kbd>"Enter"</kbd> " to confirm, "
                    <kbd>"Esc"</kbd> " to cancel."
                </p>
            })}
        </li>
    }
}

/// The confirmation of an approval of several calls: how many, and which
/// tools; its button approves exactly these (the token names them).
#[component]
fn ConfirmBulk(
    asked: ToConfirm,
    many: ServerAction<DecideMany>,
    confirming: RwSignal<Option<ToConfirm>>,
) -> impl IntoView {
    let n = asked.ids.len();
    let calls = if n == 1 { "1 call".to_string() } else { format!("{n} calls") };
    let tools = asked
        .tools
        .iter()
        .map(|(tool, count)| if *count > 1 { format!("{tool} (×{count})") } else { tool.clone() })
        .collect::<Vec<_>>()
        .join(", ");
    view! {
        <section class="panel confirm-bulk" role="alertdialog" aria-labelledby="confirm-bulk-h" data-testid="confirm-bulk">
            <h2 id="confirm-bulk-h">{format!("Approve {calls}?")}</h2>
            <p>"They run at once, each as its agent asked: " <Name text=tools/></p>
            <ActionForm action=many>
                {asked.ids.iter().map(|id| view! { <input type="hidden" name="ids[]" value=id.to_string()/> }).collect_view()}
                <input type="hidden" name="action" value="accept"/>
                <input type="hidden" name="confirm" value=asked.token.clone()/>
                {asked.reason.clone().map(|r| view! { <input type="hidden" name="reason" value=r/> })}
                <div class="bulk-buttons">
                    // A link: without JavaScript it leaves the confirmation too.
                    <a href=routes::APPROVALS class="button-link quiet" on:click=move |_| confirming.set(None)>"Cancel"</a>
                    <button type="submit" class="approve">{format!("Approve {calls}")}</button>
                </div>
            </ActionForm>
        </section>
    }
}

/// A call's arguments on one line, opening in place to the whole of them,
/// shown as on the call's page (hidden characters visible, scrollable, never
/// cut). Read when first opened: the list stays light on a phone; before the
/// page is live, a link to the call's page.
#[component]
fn WholeArguments(id: gatehouse_model::ExecutionId, preview: String) -> impl IntoView {
    use crate::components::arguments::Arguments;
    let whole = RwSignal::new(None::<String>);
    let href = routes::resume(&id, None);
    let on_toggle = move |_e: leptos::ev::Event| {
        #[cfg(feature = "hydrate")]
        {
            use wasm_bindgen::JsCast;
            let opened =
                _e.target().and_then(|t| t.dyn_into::<web_sys::HtmlDetailsElement>().ok()).is_some_and(|d| d.open());
            if opened && whole.get_untracked().is_none() {
                let id = id.clone();
                leptos::task::spawn_local(async move {
                    use crate::server_fns::{Lookup, get_execution};
                    if let Ok(Lookup::Found { execution, .. }) = get_execution(id).await {
                        whole.set(execution.arguments.map(|a| serde_json::to_string_pretty(&a).unwrap_or_default()));
                    }
                });
            }
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = &id;
    };
    view! {
        <details class="whole-arguments" on:toggle=on_toggle>
            <summary><code class="preview" data-testid="preview"><Name text=preview/></code></summary>
            {move || match whole.get() {
                Some(text) => view! { <Arguments text/> }.into_any(),
                None => view! { <p class="hint"><a href=href.clone()>"See the whole arguments on the call's page"</a></p> }.into_any(),
            }}
        </details>
    }
}

/// The inbox's keys, once the page is live (nothing to do on the server).
#[allow(unused_variables)]
fn keyboard(
    current: Signal<InboxView>,
    focused: RwSignal<Option<usize>>,
    asked: RwSignal<Asked>,
    help: RwSignal<bool>,
    decide: ServerAction<DecideExecution>,
) {
    #[cfg(feature = "hydrate")]
    {
        use wasm_bindgen::JsCast;
        let focus = |i: usize| {
            if let Some(el) = document().get_element_by_id(&format!("call-{i}"))
                && let Ok(el) = el.dyn_into::<web_sys::HtmlElement>()
            {
                let _ = el.focus();
            }
        };
        let handle = window_event_listener(leptos::ev::keydown, move |ev| {
            // Never while typing, nor a browser's or the system's shortcut.
            let typing = ev
                .target()
                .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
                .is_some_and(|el| matches!(el.tag_name().as_str(), "INPUT" | "TEXTAREA" | "SELECT"));
            if typing || ev.ctrl_key() || ev.meta_key() || ev.alt_key() {
                return;
            }
            let inbox = current.get_untracked();
            let n = inbox.pending.len();
            let at = focused.get_untracked();
            let decidable = |i: usize| inbox.pending.get(i).filter(|e| e.decidable_by(inbox.is_admin));
            let key = ev.key();
            match key.as_str() {
                "j" | "k" if n > 0 => {
                    let next = match (key.as_str(), at) {
                        ("j", Some(i)) => (i + 1).min(n - 1),
                        ("k", Some(i)) => i.saturating_sub(1),
                        _ => 0,
                    };
                    asked.set(None);
                    focused.set(Some(next));
                    focus(next);
                }
                "a" | "d" | "Enter" => {
                    let Some(e) = at.and_then(decidable) else { return };
                    let id = e.execution_id.to_string();
                    let action = match key.as_str() {
                        "a" => "accept",
                        "d" => "decline",
                        _ => match asked.get_untracked() {
                            Some((_, action)) => action,
                            None => return,
                        },
                    };
                    match asked.get_untracked() {
                        Some((asked_id, asked_action)) if asked_id == id && asked_action == action => {
                            ev.prevent_default();
                            asked.set(None);
                            decide.dispatch(DecideExecution {
                                id: e.execution_id.clone(),
                                action: action.into(),
                                reason: None,
                            });
                        }
                        _ if key != "Enter" => asked.set(Some((id, action))),
                        _ => {}
                    }
                }
                "Escape" => {
                    asked.set(None);
                    help.set(false);
                }
                "?" => help.update(|h| *h = !*h),
                _ => {}
            }
        });
        on_cleanup(move || handle.remove());
    }
}
