//! `/sign-in`

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use crate::server_fns::sign_in_attempt;

/// Sign-in: a plain form posting to `/api/auth/sign-in`, which redirects
/// back to `next`, or here with the refused attempt in a one-time cookie:
/// the name stays typed and the refusal is said once.
#[component]
pub fn SignInPage() -> impl IntoView {
    let query = use_query_map();
    let next = move || {
        query.read().get("next").filter(|n| crate::redirect::safe_next(n).is_some()).unwrap_or_else(|| "/".into())
    };
    let attempt = crate::json::resource(|| (), |_| async { sign_in_attempt().await.ok().flatten() });
    view! {
        <Title text="Sign in — Gatehouse"/>
        <main class="narrow">
            <h1>"Sign in to Gatehouse"</h1>
            <Suspense fallback=|| ()>
                {move || attempt.get().map(|attempt| {
                    let error = attempt.as_ref().map(|a| match a.retry_after_secs {
                        Some(wait) => format!("Too many failed sign-ins. Try again in {}.", crate::time_fmt::duration(wait)),
                        None => "That name and password did not match.".to_string(),
                    });
                    let typed = attempt.map(|a| a.username).unwrap_or_default();
                    let refused = error.is_some();
                    view! {
                        {error.map(|e| view! { <p role="alert" class="error" id="sign-in-error">{e}</p> })}
                        <form method="post" action="/api/auth/sign-in" class="stack">
                            <input type="hidden" name="next" value=next/>
                            <label>"Username"
                                <input name="username" autocomplete="username" required value=typed
                                    aria-describedby=refused.then_some("sign-in-error")/>
                            </label>
                            // After a refusal the name is kept: the password is where to type.
                            <label>"Password"
                                <input name="password" type="password" autocomplete="current-password" required
                                    autofocus=refused aria-invalid=refused.then_some("true")/>
                            </label>
                            <button type="submit" class="primary">"Sign in"</button>
                        </form>
                    }
                })}
            </Suspense>
        </main>
    }
}
