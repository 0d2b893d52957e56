//! A "Copy" button for a token or a config. It needs JavaScript; before
//! hydration the text beside it is plain, selectable text.

use leptos::prelude::*;

/// Copies `text` to the clipboard and says so.
#[component]
pub fn CopyButton(#[prop(into)] text: String, #[prop(into)] label: String) -> impl IntoView {
    let (copied, set_copied) = signal(false);
    let on_click = move |_| {
        #[cfg(feature = "hydrate")]
        if let Some(window) = web_sys::window() {
            let _ = window.navigator().clipboard().write_text(&text);
            set_copied.set(true);
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = (&text, set_copied);
    };
    view! {
        <button type="button" class="quiet copy" on:click=on_click aria-label=label>
            {move || if copied.get() { "Copied" } else { "Copy" }}
        </button>
    }
}
