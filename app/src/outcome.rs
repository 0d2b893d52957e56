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
    report_with(outcome, action, move |_| done.to_string());
}

/// [`report`], saying what was done in words drawn from the action's answer.
pub fn report_with<S>(outcome: Outcome, action: ServerAction<S>, done: impl Fn(&S::Output) -> String + 'static)
where
    S: ServerFn<Error = ServerFnError> + Send + Sync + Clone + 'static,
    S::Output: Send + Sync + 'static,
{
    report_as(outcome, action, done, |why| why);
}

/// [`report`] for a form that marks each of its `marked` fields beside it
/// when refused ([`field_error`]): a refusal naming only those says only
/// that they are marked, so no reason is printed twice (or hidden).
pub fn report_fields<S>(outcome: Outcome, action: ServerAction<S>, done: &'static str, marked: &'static [&'static str])
where
    S: ServerFn<Error = ServerFnError> + Send + Sync + Clone + 'static,
    S::Output: Send + Sync + 'static,
{
    report_fields_with(outcome, action, move |_| done.to_string(), marked);
}

/// [`report_fields`], saying what was done in words drawn from the action's answer.
pub fn report_fields_with<S>(
    outcome: Outcome,
    action: ServerAction<S>,
    done: impl Fn(&S::Output) -> String + 'static,
    marked: &'static [&'static str],
) where
    S: ServerFn<Error = ServerFnError> + Send + Sync + Clone + 'static,
    S::Output: Send + Sync + 'static,
{
    report_as(outcome, action, done, move |why| match fields_named(&why, marked) {
        0 => why,
        1 => "Not saved: the marked field needs a change.".into(),
        n => format!("Not saved: the {n} marked fields need a change."),
    });
}

fn report_as<S>(
    outcome: Outcome,
    action: ServerAction<S>,
    done: impl Fn(&S::Output) -> String + 'static,
    refused: impl Fn(String) -> String + 'static,
) where
    S: ServerFn<Error = ServerFnError> + Send + Sync + Clone + 'static,
    S::Output: Send + Sync + 'static,
{
    let read =
        move || action.value().with(|v| v.as_ref().map(|r| r.as_ref().map(&done).map_err(|e| refused(message(e)))));
    // What the action starts with: a plain form's error, carried back in
    // the URL, drawn by the server too (effects run only in the browser).
    if let Some(Err(why)) = untrack(&read) {
        outcome.set(Some(Err(why)));
    }
    Effect::new(move |_| {
        if let Some(result) = read() {
            outcome.set(Some(result));
        }
    });
}

/// How many fields a refusal names when every line of it is one of the
/// `marked` fields' (`invalid <field>: <why>`, the core's way: each is said
/// beside its field); 0 when any line is anything else, a field the form
/// does not mark included, so the whole refusal is said instead.
pub fn fields_named(message: &str, marked: &[&str]) -> usize {
    let lines: Vec<&str> = message.lines().collect();
    let of_marked = |line: &&&str| {
        line.strip_prefix("invalid ")
            .and_then(|rest| rest.split_once(": "))
            .is_some_and(|(field, _)| marked.contains(&field))
    };
    let named = lines.iter().filter(of_marked).count();
    if named == lines.len() { named } else { 0 }
}

/// What a refusal says of `field` (its line `invalid <field>: <why>`), as
/// a sentence: "Line 1, column 15: it ends too soon."
pub fn field_line(message: &str, field: &str) -> Option<String> {
    let prefix = format!("invalid {field}: ");
    message.lines().find_map(|line| line.strip_prefix(prefix.as_str())).map(|why| {
        let mut chars = why.chars();
        let mut said: String = chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default();
        if !said.ends_with(['.', '!', '?', '…']) {
            said.push('.');
        }
        said
    })
}

/// What the refusal of `action`'s last run says of `field` ([`field_line`]),
/// for the sentence shown next to that field.
pub fn field_error<S>(action: ServerAction<S>, field: &'static str) -> impl Fn() -> Option<String> + Copy
where
    S: ServerFn<Error = ServerFnError> + Send + Sync + Clone + 'static,
    S::Output: Send + Sync + 'static,
{
    move || {
        action.value().with(|v| v.as_ref().and_then(|r| r.as_ref().err()).and_then(|e| field_line(&message(e), field)))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_left_to_the_fields_only_when_each_line_is_a_marked_fields() {
        let marked = &["pattern", "when"];
        assert_eq!(fields_named("invalid pattern: empty\ninvalid when: line 1, column 3: it ends too soon", marked), 2);
        assert_eq!(fields_named("invalid when: it ends too soon", marked), 1);
        // A field the form does not mark: the whole refusal is said, not hidden.
        assert_eq!(fields_named("invalid pattern: empty\ninvalid profile: no such profile", marked), 0);
        assert_eq!(fields_named("the database is away", marked), 0);
    }
}
