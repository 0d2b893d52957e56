//! `/sign-in`

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

/// Sign-in: a plain form posting to `/api/auth/sign-in`, which redirects back to `next`.
#[component]
pub fn SignInPage() -> impl IntoView {
    let query = use_query_map();
    let next = move || {
        query.read().get("next").filter(|n| crate::redirect::safe_next(n).is_some()).unwrap_or_else(|| "/".into())
    };
    let error = move || {
        let q = query.read();
        q.get("error").map(|e| match (e.as_str(), q.get("retry_after")) {
            ("throttled", Some(wait)) => {
                let wait: u64 = wait.parse().unwrap_or(60);
                format!("Too many failed sign-ins. Try again in {}.", crate::time_fmt::duration(wait))
            }
            ("throttled", None) => "Too many failed sign-ins. Try again later.".to_string(),
            _ => "That name and password did not match.".to_string(),
        })
    };
    view! {
        <Title text="Sign in — Gatehouse"/>
        <main class="narrow">
            <h1>"Sign in to Gatehouse"</h1>
            {move || error().map(|e| view! { <p role="alert" class="error">{e}</p> })}
            <form method="post" action="/api/auth/sign-in" class="stack">
                <input type="hidden" name="next" value=next/>
                <label>"Username" <input name="username" autocomplete="username" required/></label>
                <label>"Password" <input name="password" type="password" autocomplete="current-password" required/></label>
                <button type="submit" class="primary">"Sign in"</button>
            </form>
        </main>
    }
}
