//! A call's arguments shown in full, hidden characters made visible.

use leptos::prelude::*;

use crate::components::name::HiddenChar;
use crate::reveal::{Piece, reveal};

/// Arguments shown in full, hidden characters made visible.
#[component]
pub fn Arguments(text: String) -> impl IntoView {
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

/// A settled call's arguments as the record kept them: in full (redacted
/// names said), or cut past the size bound (said, with the sizes).
#[component]
pub fn KeptArgumentsView(kept: gatehouse_model::KeptArguments) -> impl IntoView {
    use gatehouse_model::KeptArguments;
    let redacted = kept.redacted().join(", ");
    let cut = match &kept {
        KeptArguments::Cut { size, first, .. } => Some(format!(
            "Kept cut: the first {} of {size} bytes (keep_arguments_max_bytes); the digest identifies them whole.",
            first.len()
        )),
        KeptArguments::Whole { .. } => None,
    };
    view! {
        <div class="kept-arguments" data-testid="kept-arguments">
            <Arguments text=kept.shown()/>
            {cut.map(|c| view! { <p class="hint" data-testid="kept-cut">{c}</p> })}
            {(!redacted.is_empty()).then(|| view! {
                <p class="hint" data-testid="kept-redacted">{format!("Not kept (redact_arguments): {redacted}.")}</p>
            })}
        </div>
    }
}
