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
