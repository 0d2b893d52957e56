//! Times as people read them: relative, exact on hover.

use leptos::prelude::*;

use crate::time_fmt::{exact, iso, relative};

/// A time shown relative to `now_ms`, exact on hover.
#[component]
pub fn When(ms: i64, now_ms: i64) -> impl IntoView {
    view! { <time datetime=iso(ms) title=exact(ms)>{relative(ms, now_ms)}</time> }
}
