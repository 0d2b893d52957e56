//! `/set-password`: the page a one-time invite or reset link opens. No
//! sign-in needed: the link is the key. The form posts to the HTTP API
//! (like setup), so it works before hydration.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use gatehouse_model::{LinkPurpose, routes};

use crate::server_fns::{LinkInfo, password_link_info};

/// Choose a password with a one-time link; signs the user in.
#[component]
pub fn SetPasswordPage() -> impl IntoView {
    let query = use_query_map();
    let token = move || query.read().get("token").unwrap_or_default();
    let error = move || query.read().get("error");
    let link = crate::json::resource(token, password_link_info);
    view! {
        <Title text="Choose a password — Gatehouse"/>
        <main class="narrow">
            <Suspense fallback=|| view! { <p>"Checking the link…"</p> }>
                {move || link.get().map(|info| match info {
                    Ok(LinkInfo::Valid { username, purpose }) => view! {
                        <h1>{match purpose {
                            LinkPurpose::Invite => "Welcome to Gatehouse",
                            LinkPurpose::Reset => "Choose a new password",
                        }}</h1>
                        <p>"Choose a password for " <strong data-testid="link-user">{username.clone()}</strong>
                            ". This link works once; afterwards you sign in with this name and password."</p>
                        {error().map(|e| view! { <p role="alert" class="error">{e}</p> })}
                        <form method="post" action=routes::API_SET_PASSWORD class="stack">
                            <input type="hidden" name="token" value=token()/>
                            // For password managers: which account this password belongs to.
                            <input type="text" name="username" value=username autocomplete="username" readonly hidden/>
                            <label>"New password (8 characters or more)"
                                <input name="password" type="password" autocomplete="new-password" minlength="8" required/>
                            </label>
                            <button type="submit" class="primary">"Set password and sign in"</button>
                        </form>
                    }.into_any(),
                    Ok(LinkInfo::Refused(why)) => view! {
                        <h1>"This link cannot be used"</h1>
                        <p role="alert" class="error">{why}</p>
                        <p>"Ask an admin for a new link, or " <a href=routes::SIGN_IN>"sign in"</a> " if you have a password."</p>
                    }.into_any(),
                    Err(e) => view! { <p role="alert" class="error">"Could not check the link: " {crate::outcome::message(&e)}</p> }.into_any(),
                })}
            </Suspense>
        </main>
    }
}
