//! Names and text from outside, shown so they cannot hide or disguise anything.

use leptos::prelude::*;

use crate::reveal::{Piece, code_point, reveal};

/// One hidden character, marked and titled with its code point.
#[component]
pub fn HiddenChar(c: char) -> impl IntoView {
    view! {
        <mark class="hidden-char" title=format!("hidden character {}", code_point(c))>{format!("⟨{}⟩", code_point(c))}</mark>
    }
}

/// A name from outside (a tool, agent, upstream, client, owner, or an
/// upstream's error): hidden characters shown as code points, and isolated
/// (`<bdi>`) so right-to-left letters in it cannot reorder the text around it.
/// `joints`: a long name (a tool's) may wrap after `_`, `.`, `-` and `/`.
#[component]
pub fn Name(#[prop(into)] text: String, #[prop(optional)] joints: bool) -> impl IntoView {
    let pieces = reveal(&text);
    view! {
        <bdi>
            {pieces.into_iter().map(|p| match p {
                Piece::Text(t) if joints => view! { <WordJoints text=t/> }.into_any(),
                Piece::Text(t) => t.into_any(),
                Piece::Hidden(c) => view! { <HiddenChar c/> }.into_any(),
            }).collect_view()}
        </bdi>
    }
}

/// Text with a line-break opportunity (`<wbr>`) after each `_`, `.`, `-`
/// and `/`: a long tool or file name wraps at its joints, never mid-word.
#[component]
fn WordJoints(text: String) -> impl IntoView {
    let mut parts = Vec::new();
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if matches!(c, '_' | '.' | '-' | '/') {
            parts.push(text[start..i + 1].to_string());
            start = i + 1;
        }
    }
    parts.push(text[start..].to_string());
    let last = parts.len() - 1;
    parts.into_iter().enumerate().map(|(i, p)| view! { {p} {(i < last).then(|| view! { <wbr/> })} }).collect_view()
}
