//! The browser end of the live stream: an `EventSource` on an SSE endpoint that
//! calls back on every event. Pages use it to re-read their data; the approval
//! page will use the same hook.

use leptos::prelude::*;

/// Connection state of a live stream, for the status line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveState {
    /// Not connected yet (also what the server renders).
    Connecting,
    /// Events are flowing.
    Live,
    /// The browser is reconnecting.
    Reconnecting,
}

/// Opens `url` as an `EventSource` once hydrated and calls `on_event` with each
/// message's data. Returns the connection state. On the server it does nothing.
pub fn use_live_events(url: String, on_event: impl Fn(String) + 'static) -> ReadSignal<LiveState> {
    let (state, set_state) = signal(LiveState::Connecting);
    #[cfg(feature = "hydrate")]
    {
        use std::rc::Rc;
        use wasm_bindgen::{JsCast, closure::Closure};
        let on_event = Rc::new(on_event);
        Effect::new(move |_| {
            let Ok(source) = web_sys::EventSource::new(&url) else {
                set_state.set(LiveState::Reconnecting);
                return;
            };
            let on_open = Closure::<dyn FnMut(web_sys::Event)>::new(move |_| set_state.set(LiveState::Live));
            let on_error = Closure::<dyn FnMut(web_sys::Event)>::new(move |_| set_state.set(LiveState::Reconnecting));
            let handler = on_event.clone();
            let on_message = Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |e: web_sys::MessageEvent| {
                handler(e.data().as_string().unwrap_or_default());
            });
            source.set_onopen(Some(on_open.as_ref().unchecked_ref()));
            source.set_onerror(Some(on_error.as_ref().unchecked_ref()));
            source.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
            // The closures live as long as the page; the source closes with it.
            on_open.forget();
            on_error.forget();
            on_message.forget();
            let source = send_wrapper::SendWrapper::new(source);
            on_cleanup(move || source.close());
        });
    }
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = (url, on_event, set_state);
    }
    state
}

/// The "Live" / "Connecting…" line under a live page.
#[component]
pub fn LiveStatus(state: ReadSignal<LiveState>) -> impl IntoView {
    view! {
        <p class="live-status" data-state=move || format!("{:?}", state.get()).to_lowercase()>
            {move || match state.get() {
                LiveState::Connecting => "Connecting to live updates…",
                LiveState::Live => "Live",
                LiveState::Reconnecting => "Reconnecting…",
            }}
        </p>
    }
}
