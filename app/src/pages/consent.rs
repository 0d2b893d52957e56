//! `/oauth/authorize`: an MCP client asks to connect as an agent of the
//! signed-in person. The page says which client (and whether its name is
//! vouched for), where the browser goes next, and who will own the agent;
//! Allow makes the agent's credential. The form is a plain post to the
//! authorization endpoint, so it works before hydration and without
//! JavaScript; the endpoint checks everything again.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_location;

use gatehouse_model::{ConsentInfo, routes};

use crate::components::name::Name;
use crate::server_fns::load_consent;

/// The consent page.
#[component]
pub fn ConsentPage() -> impl IntoView {
    let location = use_location();
    let query = move || location.search.get().trim_start_matches('?').to_string();
    let info = crate::json::resource(query, load_consent);
    view! {
        <Title text="Connect an agent — Gatehouse"/>
        <main class="narrow consent">
            <Suspense fallback=|| view! { <p>"Checking the request…"</p> }>
                {move || info.get().map(|info| match info {
                    Ok(ConsentInfo::Ask(c)) => view! {
                        <p class="eyebrow">"Signed in as " <strong data-testid="consent-user"><Name text=c.user.clone()/></strong></p>
                        <h1>"Connect " <Name text=c.client_name.clone()/> " as your agent?"</h1>
                        <dl class="facts consent-facts">
                            <div><dt>"Client"</dt><dd data-testid="consent-client"><Name text=c.client_name.clone()/></dd></div>
                            <div><dt>"Vouched for by"</dt><dd>{match c.verified_host.clone() {
                                Some(host) => view! { <Name text=host/> }.into_any(),
                                None => view! { <span class="warning">"Nobody: the name is the client's own claim"</span> }.into_any(),
                            }}</dd></div>
                            <div><dt>"Returns you to"</dt><dd data-testid="consent-redirect"><code><Name text=c.redirect_uri.clone()/></code><br/><span class="hint"><Name text=c.redirect_to.clone()/></span></dd></div>
                        </dl>
                        {if c.agent_exists {
                            view! {
                                <p>"Allowing lets this client act as your existing agent: it can use the tools Gatehouse offers, calls that agent's grants cover run without asking you, and every other call a rule gates waits for "
                                    <strong>"your"</strong>" approval. It stays connected while it is in use and lapses when it goes quiet; you can revoke it on the Agents page at any time."</p>
                            }.into_any()
                        } else {
                            view! {
                                <p>"Allowing makes a new agent owned by you: it can use the tools Gatehouse offers, and every call a rule gates waits for "
                                    <strong>"your"</strong>" approval. It stays connected while it is in use and lapses when it goes quiet; you can revoke it on the Agents page at any time."</p>
                            }.into_any()
                        }}
                        <p class="hint">"Only allow this if you just started connecting this client yourself."</p>
                        <form method="post" action=routes::OAUTH_AUTHORIZE class="stack consent-form">
                            {c.fields.iter().map(|(name, value)| view! {
                                <input type="hidden" name=name.clone() value=value.clone()/>
                            }).collect_view()}
                            <label>"Agent name"
                                <input name="agent" type="text" value=c.agent.clone() maxlength="200" required autocomplete="off"
                                    aria-invalid=c.agent_error.is_some().then_some("true") aria-describedby=c.agent_error.is_some().then_some("agent-error")/>
                            </label>
                            {c.agent_error.clone().map(|why| view! {
                                <p role="alert" class="error" id="agent-error" data-testid="agent-error">{why}</p>
                            })}
                            {c.agent_exists.then(|| {
                                let grants = c.inherited_grants;
                                view! {
                                    <div class="warning" data-testid="consent-inherit">
                                        <p>"You already have an agent called " <strong><Name text=c.agent.clone()/></strong>
                                            ". Allowed under this name, the client acts as that agent and inherits its "
                                            <strong data-testid="consent-inherit-grants">{grants.to_string()}</strong>
                                            {if grants == 1 { " grant" } else { " grants" }}
                                            ": the calls they cover run without asking you. Choose another name to start with none."</p>
                                        // One span: the label is a flex row, and loose text would
                                        // become columns on a phone.
                                        <label class="check"><input type="checkbox" name="inherit" value="yes"/>
                                            <span>"Let this client act as " <Name text=c.agent.clone()/> " and inherit its grants"</span></label>
                                    </div>
                                }
                            })}
                            <div class="decide">
                                <button type="submit" name="decision" value="deny" class="decline">"Deny"</button>
                                <button type="submit" name="decision" value="approve" class="approve">"Allow"</button>
                            </div>
                        </form>
                    }.into_any(),
                    Ok(ConsentInfo::Refused(why)) => view! {
                        <h1>"This sign-in request cannot be used"</h1>
                        <p role="alert" class="error">{why}</p>
                        <p>"Start connecting from the client again. If it keeps failing, the client may be misconfigured."</p>
                    }.into_any(),
                    Err(e) => view! { <p role="alert" class="error">"Could not check the request: " {crate::outcome::message(&e)}</p> }.into_any(),
                })}
            </Suspense>
        </main>
    }
}
