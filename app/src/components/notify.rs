//! System notifications for calls that wait for the signed-in person: a
//! "Notify me" button (browsers ask for permission only after a
//! click), and one notification per newly pending call they may decide,
//! which opens the call's page when clicked.

use leptos::prelude::*;

/// Raises a notification for each call that becomes pending in `inbox`
/// after the page loaded (the first inbox is what was already waiting), once
/// per call for the page's lifetime; when more arrive than the inbox lists
/// (a long backlog lists only the soonest to expire), one notification says
/// how many wait. Call once, at the root.
pub fn notify_new_pending(inbox: RwSignal<Option<gatehouse_model::InboxView>>) {
    #[cfg(feature = "hydrate")]
    {
        use std::collections::HashSet;
        // The calls already seen, the total last told and when it was read.
        let seen = StoredValue::new_local(None::<(HashSet<gatehouse_model::ExecutionId>, usize, i64)>);
        Effect::new(move |_| {
            let Some(view) = inbox.get() else { return };
            seen.update_value(|seen| match seen {
                None => {
                    let known = view.pending.iter().map(|e| e.execution_id.clone()).collect();
                    *seen = Some((known, view.total, view.now_ms));
                }
                Some((known, total, read_at)) => {
                    let mut raised = 0;
                    for e in &view.pending {
                        // Created since the last inbox: one that only moved
                        // up into a long backlog's list is not new.
                        let new = e.created_at_ms.is_none_or(|c| c >= *read_at);
                        if known.insert(e.execution_id.clone()) && new {
                            raised += 1;
                            if e.decidable_by(view.is_admin) {
                                raise_for(e);
                            }
                        }
                    }
                    if view.truncated() && view.total > *total + raised {
                        raise_backlog(view.total);
                    }
                    (*total, *read_at) = (view.total, view.now_ms);
                }
            });
        });
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = inbox;
}

/// Whether this browser has notifications at all (some phones do not).
#[cfg(feature = "hydrate")]
fn supported() -> bool {
    web_sys::window().is_some_and(|w| web_sys::js_sys::Reflect::has(&w, &"Notification".into()).unwrap_or(false))
}

#[cfg(feature = "hydrate")]
fn permission() -> Option<web_sys::NotificationPermission> {
    supported().then(web_sys::Notification::permission)
}

/// "Approve TOOL?", opening the call's page.
#[cfg(feature = "hydrate")]
fn raise_for(e: &gatehouse_model::ExecutionView) {
    let owner = e.owner.as_deref().map(|o| format!(" (owner {o})")).unwrap_or_default();
    let body = format!("{}{owner} wants to run {}", e.agent, e.tool);
    let url = gatehouse_model::routes::resume(&e.execution_id, e.session_id.as_deref());
    // Several open tabs raise the same tag: the system shows it once.
    raise(&format!("Approve {}?", e.tool), &body, &e.execution_id, url);
}

/// "N calls wait for you", opening the inbox (one notification, replaced as
/// the count moves).
#[cfg(feature = "hydrate")]
fn raise_backlog(total: usize) {
    let body = format!("{total} calls are waiting for your decision");
    raise("New calls to approve", &body, "gatehouse-backlog", gatehouse_model::routes::APPROVALS.to_string());
}

#[cfg(feature = "hydrate")]
fn raise(title: &str, body: &str, tag: &str, url: String) {
    use wasm_bindgen::{JsCast, closure::Closure};
    if permission() != Some(web_sys::NotificationPermission::Granted) {
        return;
    }
    let options = web_sys::NotificationOptions::new();
    options.set_body(body);
    options.set_tag(tag);
    let Ok(note) = web_sys::Notification::new_with_options(title, &options) else {
        return;
    };
    let shown = note.clone();
    let on_click = Closure::<dyn FnMut()>::new(move || {
        if let Some(window) = web_sys::window() {
            let _ = window.focus();
            let _ = window.location().assign(&url);
        }
        shown.close();
    });
    note.set_onclick(Some(on_click.as_ref().unchecked_ref()));
    // Lives as long as the notification may be clicked: the page's lifetime.
    on_click.forget();
}

/// The header's "Notify me" button: shown only where the
/// browser supports notifications and has not been asked yet (a person who
/// said no is not asked again); a click asks once.
#[component]
pub fn NotifyButton() -> impl IntoView {
    // Hidden on the server and until hydrated: only the browser knows.
    let (ask, set_ask) = signal(false);
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| set_ask.set(permission() == Some(web_sys::NotificationPermission::Default)));
    let on_click = move |_| {
        #[cfg(feature = "hydrate")]
        {
            use wasm_bindgen::closure::Closure;
            if let Ok(promise) = web_sys::Notification::request_permission() {
                let done = Closure::once(move |_: wasm_bindgen::JsValue| {
                    set_ask.set(permission() == Some(web_sys::NotificationPermission::Default));
                });
                let _ = promise.then(&done);
                done.forget();
            }
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = set_ask;
    };
    view! {
        <Show when=move || ask.get()>
            <button type="button" class="quiet notify-on" on:click=on_click
                title="Get a system notification when a call waits for you">
                // Short, so the header keeps one row at desktop width.
                "Notify me"
            </button>
        </Show>
    }
}

/// Where this browser stands on notifications, in words, with the button
/// to turn them on while it has not been asked (the account page).
#[component]
pub fn NotifyStatus() -> impl IntoView {
    // Only the browser knows: nothing is said before hydration.
    let (said, set_said) = signal(None::<&'static str>);
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        use web_sys::NotificationPermission as P;
        set_said.set(Some(match permission() {
            Some(P::Granted) => "On in this browser.",
            Some(P::Denied) => "Blocked in this browser: allow notifications for this site in its settings.",
            Some(_) => "Off in this browser.",
            None => "This browser cannot show notifications.",
        }));
    });
    #[cfg(not(feature = "hydrate"))]
    let _ = set_said;
    view! {
        <p data-testid="notify-status">{move || said.get()} " " <NotifyButton/></p>
    }
}
