//! Times as people read them: relative, exact on hover — in UTC as the
//! server draws it, then in the viewer's own time zone once the page is live.

use leptos::prelude::*;

use crate::time_fmt::{exact, iso, relative};

/// A time shown relative to `now_ms`, exact on hover.
#[component]
pub fn When(ms: i64, now_ms: i64) -> impl IntoView {
    let here = use_local_zone();
    let title = move || if here.get() { local_exact(ms) } else { exact(ms) };
    view! { <time datetime=iso(ms) title=title>{relative(ms, now_ms)}</time> }
}

/// True once the page runs in the browser (after hydration), where the
/// viewer's time zone is known; the server draws UTC.
pub fn use_local_zone() -> ReadSignal<bool> {
    let (here, set_here) = signal(false);
    Effect::new(move |_| set_here.set(true));
    here
}

/// The exact time in the browser's time zone, with the zone named
/// ("Fri Dec 04 2026 11:12:21 GMT+0100 (Central European Standard Time)");
/// UTC on the server.
pub fn local_exact(ms: i64) -> String {
    #[cfg(feature = "hydrate")]
    {
        String::from(js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(ms as f64)).to_string())
    }
    #[cfg(not(feature = "hydrate"))]
    {
        exact(ms)
    }
}
