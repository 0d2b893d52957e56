//! The browser end of the live streams: an `EventSource` on an SSE endpoint
//! that calls back on every unnamed message, and keeps the app-wide inbox
//! (the `inbox` events every page stream carries) for the navigation's
//! pending count, the tab title and the inbox page. Pages that re-read what
//! they show when it changes say which kinds of change with [`refetch_on`].

use leptos::prelude::*;
use serde::Serialize;
use serde::de::DeserializeOwned;

use gatehouse_model::{InboxView, LiveEvent, StreamEvent, routes};

use crate::json::Json;
#[cfg(feature = "hydrate")]
use gatehouse_model::{INBOX_EVENT, SIGNED_OUT_EVENT};

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

/// The latest inbox a live stream delivered (`None` until one did: the
/// server renders without it, so hydration matches).
#[derive(Debug, Clone, Copy)]
pub struct LiveInbox(pub RwSignal<Option<InboxView>>);

/// Makes the app-wide [`LiveInbox`] (once, at the root).
pub fn provide_live_inbox() -> RwSignal<Option<InboxView>> {
    let inbox = RwSignal::new(None);
    provide_context(LiveInbox(inbox));
    inbox
}

/// The app-wide inbox, as the live streams last delivered it.
pub fn use_inbox() -> RwSignal<Option<InboxView>> {
    use_context::<LiveInbox>().map(|l| l.0).unwrap_or_else(|| RwSignal::new(None))
}

/// Opens `url` as an `EventSource` once hydrated and calls `on_event` with each
/// unnamed message's data; `inbox` events update the app-wide inbox. Returns
/// the connection state. On the server it does nothing.
pub fn use_live_events(url: String, on_event: impl Fn(String) + 'static) -> ReadSignal<LiveState> {
    let (state, set_state) = signal(LiveState::Connecting);
    #[cfg(feature = "hydrate")]
    {
        use std::rc::Rc;
        use wasm_bindgen::{JsCast, closure::Closure};
        let on_event = Rc::new(on_event);
        let inbox = use_inbox();
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
            let on_inbox = Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |e: web_sys::MessageEvent| {
                if let Ok(view) = crate::json::from_str::<InboxView>(&e.data().as_string().unwrap_or_default()) {
                    inbox.set(Some(view));
                }
            });
            source.set_onopen(Some(on_open.as_ref().unchecked_ref()));
            source.set_onerror(Some(on_error.as_ref().unchecked_ref()));
            source.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
            let _ = source.add_event_listener_with_callback(INBOX_EVENT, on_inbox.as_ref().unchecked_ref());
            // The browser session ended (signed out elsewhere, disabled, removed):
            // reload, and the server sends the page to sign-in.
            let on_signed_out = Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |_| {
                if let Some(window) = web_sys::window() {
                    let _ = window.location().reload();
                }
            });
            let _ = source.add_event_listener_with_callback(SIGNED_OUT_EVENT, on_signed_out.as_ref().unchecked_ref());
            on_signed_out.forget();
            // The closures live as long as the page; the source closes with it.
            on_open.forget();
            on_error.forget();
            on_message.forget();
            on_inbox.forget();
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

/// What a page reads again, and on which kinds of change (see [`refetch_on`]).
pub struct Refetch {
    kinds: &'static [LiveEvent],
    refetch: Box<dyn Fn()>,
    when: Option<Box<dyn Fn() -> bool>>,
}

/// Reads `resource` again whenever a change of one of `kinds` arrives on the
/// page's stream (and when the stream opens or had to resync); give it to
/// [`use_changes`].
pub fn refetch_on<T>(kinds: &'static [LiveEvent], resource: Resource<T, Json>) -> Refetch
where
    T: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    Refetch { kinds, refetch: Box::new(move || resource.refetch()), when: None }
}

impl Refetch {
    /// Only while `condition` holds when the change arrives (it is read
    /// untracked).
    pub fn when(self, condition: impl Fn() -> bool + 'static) -> Self {
        Self { when: Some(Box::new(condition)), ..self }
    }

    fn on(&self, event: StreamEvent) {
        if event.touches(self.kinds) && self.when.as_ref().is_none_or(|holds| holds()) {
            (self.refetch)();
        }
    }
}

/// Opens the page's change stream ([`routes::LIVE_EVENTS`], one per page)
/// and re-reads what `refetches` say on each change. Returns the connection
/// state.
pub fn use_changes(refetches: impl IntoIterator<Item = Refetch>) -> ReadSignal<LiveState> {
    let refetches: Vec<Refetch> = refetches.into_iter().collect();
    use_live_events(routes::LIVE_EVENTS.to_string(), move |data| {
        if let Some(event) = StreamEvent::parse(&data) {
            refetches.iter().for_each(|r| r.on(event));
        }
    })
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
