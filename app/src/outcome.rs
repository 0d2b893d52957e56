//! What came of a form a person sent: a plain sentence, the latest only.
//!
//! Three rules every form on the console follows:
//! - an error reads as the server wrote it, without Leptos' "error running
//!   server function:" prefix ([`message`]);
//! - a page re-reads its data only after a success ([`on_success`]), so a
//!   refused form keeps what the person typed;
//! - one line per section shows the outcome of the last form sent there
//!   ([`report`], [`OutcomeLine`]): a later success clears an earlier error
//!   and says, briefly, what was done.

use leptos::prelude::*;
use server_fn::ServerFn;

/// A server function's error as a sentence a person reads.
pub fn message(e: &ServerFnError) -> String {
    match e {
        ServerFnError::ServerError(text) => text.clone(),
        ServerFnError::Request(_) => "Gatehouse could not be reached. Check your connection and try again.".into(),
        ServerFnError::Args(text) | ServerFnError::MissingArg(text) => format!("The form was incomplete: {text}"),
        other => other.to_string().trim_start_matches("error running server function: ").to_string(),
    }
}

/// What the last form of a section came to: done (with what was done) or
/// refused (with why).
pub type Outcome = RwSignal<Option<Result<String, String>>>;

/// Runs `then` each time `action` succeeds (never when it fails).
pub fn on_success<S>(action: ServerAction<S>, then: impl Fn() + 'static)
where
    S: ServerFn<Error = ServerFnError> + Send + Sync + Clone + 'static,
    S::Output: Send + Sync + 'static,
{
    Effect::new(move |_| {
        if action.value().with(|v| matches!(v, Some(Ok(_)))) {
            then();
        }
    });
}

/// Sets `outcome` each time `action` ends: `done` on success, the error's
/// message on failure.
pub fn report<S>(outcome: Outcome, action: ServerAction<S>, done: &'static str)
where
    S: ServerFn<Error = ServerFnError> + Send + Sync + Clone + 'static,
    S::Output: Send + Sync + 'static,
{
    let read = move || action.value().with(|v| v.as_ref().map(|r| r.as_ref().map(|_| ()).map_err(message)));
    // What the action starts with: a plain form's error, carried back in
    // the URL, drawn by the server too (effects run only in the browser).
    if let Some(Err(why)) = untrack(read) {
        outcome.set(Some(Err(why)));
    }
    Effect::new(move |_| {
        if let Some(result) = read() {
            outcome.set(Some(result.map(|()| done.to_string())));
        }
    });
}

/// The refusal of `action`'s last run when it names `field` (the core's
/// "invalid <field>: …"), for the sentence shown next to that field.
pub fn field_error<S>(action: ServerAction<S>, field: &'static str) -> impl Fn() -> Option<String> + Copy
where
    S: ServerFn<Error = ServerFnError> + Send + Sync + Clone + 'static,
    S::Output: Send + Sync + 'static,
{
    move || {
        action
            .value()
            .with(|v| v.as_ref().and_then(|r| r.as_ref().err()).map(message))
            .filter(|e| e.contains(&format!("invalid {field}:")))
    }
}

/// The outcome's line: an alert for an error, a status for a success.
#[component]
pub fn OutcomeLine(outcome: Outcome) -> impl IntoView {
    move || {
        outcome.get().map(|result| match result {
            Ok(done) => view! { <p role="status" class="notice" data-testid="outcome">{done}</p> }.into_any(),
            Err(why) => view! { <p role="alert" class="error" data-testid="outcome">{why}</p> }.into_any(),
        })
    }
}
