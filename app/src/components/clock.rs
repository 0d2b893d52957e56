//! The page's clock: a countdown that ticks once hydrated (or, on a
//! phone's light page, in `light.js`, which mirrors `countdown`).

use leptos::prelude::*;

/// "4:59" / "1:02:03" / "expired".
pub fn countdown(remaining_ms: i64) -> String {
    if remaining_ms <= 0 {
        return "expired".into();
    }
    let s = remaining_ms / 1000;
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s % 3600 / 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

/// A clock that ticks every second once hydrated (the server renders `start`).
pub fn use_now(start: i64) -> ReadSignal<i64> {
    let (now, set_now) = signal(start);
    #[cfg(feature = "hydrate")]
    {
        let offset = start - js_sys_now();
        set_now.set(js_sys_now() + offset);
        let handle =
            set_interval_with_handle(move || set_now.set(js_sys_now() + offset), std::time::Duration::from_secs(1));
        if let Ok(handle) = handle {
            on_cleanup(move || handle.clear());
        }
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = set_now;
    now
}

#[cfg(feature = "hydrate")]
fn js_sys_now() -> i64 {
    web_sys::window().and_then(|w| w.performance()).map(|p| (p.time_origin() + p.now()) as i64).unwrap_or(0)
}
