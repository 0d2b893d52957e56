//! `/users`, for admins: invite users with a one-time link (shown once,
//! with a copy button), make reset links, disable, enable, promote, demote
//! and remove users, and see the latest user changes. Everyone's own
//! password and sessions are on `/account`.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use gatehouse_model::{ChangeEntry, LinkPurpose, LiveEvent, PasswordLink, UserStatus, UserView, routes};

use crate::components::copy::CopyButton;
use crate::components::header::Header;
use crate::components::live::{LiveStatus, refetch_on, use_changes};
use crate::components::name::Name;
use crate::components::when::When;
use crate::outcome::{Outcome, OutcomeLine, on_success, report};
use crate::server_fns::{
    InviteUser, MintApiToken, RemoveUser, ResetLink, RevokeApiToken, SetUserAdmin, SetUserDisabled, UsersView,
    list_api_tokens, list_users, take_api_token, take_link,
};
use crate::time_fmt::{exact, iso};

/// The actions the page's forms post to.
#[derive(Clone, Copy)]
struct Actions {
    /// What came of the last of these, shown above the list.
    outcome: Outcome,
    reset: ServerAction<ResetLink>,
    disable: ServerAction<SetUserDisabled>,
    admin: ServerAction<SetUserAdmin>,
    remove: ServerAction<RemoveUser>,
}

/// `/users`
#[component]
pub fn UsersPage() -> impl IntoView {
    let invite = ServerAction::<InviteUser>::new();
    let actions = Actions {
        outcome: RwSignal::new(None),
        reset: ServerAction::new(),
        disable: ServerAction::new(),
        admin: ServerAction::new(),
        remove: ServerAction::new(),
    };
    let users = crate::json::resource(|| (), |_| list_users());
    // Read again after a change that succeeded; a refused form keeps what
    // was typed, and the list says what came of the last change.
    on_success(invite, move || users.refetch());
    on_success(actions.disable, move || users.refetch());
    on_success(actions.admin, move || users.refetch());
    on_success(actions.remove, move || users.refetch());
    let outcome = actions.outcome;
    report(outcome, actions.reset, "Link made: it is shown above, this once.");
    report(outcome, actions.disable, "Saved.");
    report(outcome, actions.admin, "Saved.");
    report(outcome, actions.remove, "User removed.");
    let live = use_changes([refetch_on(&[LiveEvent::UsersChanged], users)]);
    let query = use_query_map();
    let link = crate::json::resource(
        move || query.read().get("link"),
        |id| async move {
            match id {
                Some(id) => take_link(id).await.ok().flatten(),
                None => None,
            }
        },
    );
    view! {
        <Title text="Users — Gatehouse"/>
        <Header/>
        <main class="page">
            <h1>"Users"</h1>
            <Suspense fallback=|| ()>
                {move || link.get().flatten().map(|l| view! { <LinkShown link=l/> })}
            </Suspense>
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || users.get().map(|result| match result {
                    Ok(view) => view! { <UsersBody view invite actions/> }.into_any(),
                    Err(e) => view! {
                        <p role="alert" class="error">"Could not load: " {crate::outcome::message(&e)}</p>
                        <p>"Your own password and browser sessions are on " <a href=routes::ACCOUNT>"your account page"</a> "."</p>
                    }.into_any(),
                })}
            </Suspense>
            <LiveStatus state=live/>
        </main>
    }
}

/// What the page shows once loaded.
#[component]
fn UsersBody(view: UsersView, invite: ServerAction<InviteUser>, actions: Actions) -> impl IntoView {
    let UsersView { now_ms, username, users, changes } = view;
    view! {
        <p class="hint">"Your own password and browser sessions are on " <a href=routes::ACCOUNT>"your account page"</a> "."</p>
        <InviteForm invite/>
        <UserList users now_ms me=username actions/>
        <ApiTokens now_ms/>
        <Changes changes now_ms/>
    }
}

/// The form that invites a user.
#[component]
fn InviteForm(invite: ServerAction<InviteUser>) -> impl IntoView {
    let error = move || invite.value().get().and_then(|r| r.err()).map(|e| crate::outcome::message(&e));
    view! {
        <section aria-labelledby="invite-h" class="panel">
            <h2 id="invite-h">"Add a user"</h2>
            <ActionForm action=invite attr:class="invite-form">
                <label>"Username" <input name="username" required autocomplete="off" maxlength="64"
                    pattern="[A-Za-z0-9._@\\-]+" title="letters, digits, '-', '_', '.' or '@'" placeholder="grace"/></label>
                <label class="check"><input type="checkbox" name="admin" value="on"/> "Admin (manages users, decides every call)"</label>
                <button type="submit" class="primary">"Create invite link"</button>
            </ActionForm>
            <p class="hint">"They get no password from you: send them the one-time link, and they choose their own. It works once, for 24 hours."</p>
            {move || error().map(|e| view! { <p role="alert" class="error">{e}</p> })}
        </section>
    }
}

/// The link just made, shown this once.
#[component]
fn LinkShown(link: PasswordLink) -> impl IntoView {
    let what = match link.purpose {
        LinkPurpose::Invite => "Invite link for ",
        LinkPurpose::Reset => "Password reset link for ",
    };
    let url = link.url.clone();
    view! {
        <section class="panel minted" aria-labelledby="link-h">
            <h2 id="link-h">{what} {link.username.clone()}</h2>
            <p class="warning">"Copy it now and send it to them: it is shown only this once, and only its hash is kept."</p>
            <div class="secret">
                <code data-testid="password-link">{url.clone()}</code>
                <CopyButton text=url label="Copy the link"/>
            </div>
            <p class="hint">"It works once, until " <time datetime=iso(link.expires_ms) data-testid="link-expires">{exact(link.expires_ms)}</time>
                "; a newer link for the same user replaces it."</p>
        </section>
    }
}

/// Every user with what an admin can do to them.
#[component]
fn UserList(users: Vec<UserView>, now_ms: i64, me: String, actions: Actions) -> impl IntoView {
    let only_me = users.len() <= 1;
    // The server refuses to demote, disable or remove the last admin who can
    // sign in: the page does not offer it.
    let sign_in_admins = users.iter().filter(|u| u.is_admin && u.status == UserStatus::Active).count();
    view! {
        <section aria-labelledby="users-h">
            <h2 id="users-h">"Everyone"</h2>
            <OutcomeLine outcome=actions.outcome/>
            <div class="table-wrap" tabindex="0" role="region" aria-label="Users (scrolls sideways)">
            <table class="responsive users" aria-label="Users">
                <thead><tr>
                    <th scope="col">"User"</th><th scope="col">"Role"</th><th scope="col">"Status"</th>
                    <th scope="col">"Added"</th><th scope="col">"Sessions"</th>
                    <th scope="col"><span class="visually-hidden">"Actions"</span></th>
                </tr></thead>
                <tbody>
                {users.into_iter().map(|u| {
                    let last_admin = sign_in_admins == 1 && u.is_admin && u.status == UserStatus::Active;
                    view! { <UserRow user=u now_ms me=me.clone() last_admin actions/> }
                }).collect_view()}
                </tbody>
            </table>
            </div>
            {only_me.then(|| view! {
                <p class="empty">"Only you so far. Add a user above: you get a link to send them, and they choose their own password."</p>
            })}
        </section>
    }
}

/// One user's row.
#[component]
fn UserRow(user: UserView, now_ms: i64, me: String, last_admin: bool, actions: Actions) -> impl IntoView {
    let name = user.username.clone();
    let is_me = name == me;
    let status = match (user.status, user.link_expires_ms) {
        (UserStatus::Invited, Some(at)) => view! { "invited, link expires " <When ms=at now_ms/> }.into_any(),
        (UserStatus::Invited, None) => "invited, link expired".into_any(),
        (UserStatus::Active, Some(at)) => view! { "active, reset link expires " <When ms=at now_ms/> }.into_any(),
        (s, _) => s.as_str().into_any(),
    };
    let link_label = if user.status == UserStatus::Invited { "New invite link" } else { "Reset password" };
    let disabled = user.status == UserStatus::Disabled;
    let reset_form = (!disabled).then(|| {
        let name = name.clone();
        view! {
            <ActionForm action=actions.reset attr:class="row-form">
                <input type="hidden" name="username" value=name.clone()/>
                <button type="submit" class="quiet" aria-label=format!("{link_label} for {name}")>{link_label}</button>
            </ActionForm>
        }
    });
    let (admin_label, admin_value, admin_text) = if user.is_admin {
        (format!("Remove admin: {name}"), "false", "Remove admin")
    } else {
        (format!("Make admin: {name}"), "true", "Make admin")
    };
    let (disable_label, disable_value, disable_text, disable_class) = if disabled {
        (format!("Enable {name}"), "false", "Enable", "quiet")
    } else {
        (format!("Disable {name}"), "true", "Disable", "quiet danger")
    };
    let (for_admin, for_disable, for_remove) = (name.clone(), name.clone(), name.clone());
    let remove_label = format!("Remove {name}");
    let remove_text = format!("Remove {name} for good");
    let row_key = name.clone();
    view! {
        <tr data-user=row_key data-status=user.status.as_str()>
            <th scope="row" data-label="User">{name} {is_me.then(|| view! { <span class="tag">"you"</span> })}</th>
            <td data-label="Role">{if user.is_admin { "admin" } else { "user" }}</td>
            <td data-label="Status"><span class=format!("status {}", user.status)>{status}</span></td>
            <td data-label="Added"><When ms=user.created_ms now_ms/></td>
            <td data-label="Sessions">{user.sessions}</td>
            <td data-label="Actions" class="actions">
                {reset_form}
                {if last_admin {
                    view! { <p class="hint" data-testid="last-admin">"The only admin who can sign in: make another user an admin before you demote, disable or remove them."</p> }.into_any()
                } else {
                    view! {
                    <ActionForm action=actions.admin attr:class="row-form">
                        <input type="hidden" name="username" value=for_admin/>
                        <input type="hidden" name="admin" value=admin_value/>
                        <button type="submit" class="quiet" aria-label=admin_label>{admin_text}</button>
                    </ActionForm>
                    <ActionForm action=actions.disable attr:class="row-form">
                        <input type="hidden" name="username" value=for_disable/>
                        <input type="hidden" name="disabled" value=disable_value/>
                        <button type="submit" class=disable_class aria-label=disable_label>{disable_text}</button>
                    </ActionForm>
                    <details class="confirm">
                        <summary aria-label=remove_label>"Remove"</summary>
                        <ActionForm action=actions.remove attr:class="row-form">
                            <input type="hidden" name="username" value=for_remove/>
                            <p class="hint">"Their sessions end and their agents' credentials are revoked."</p>
                            <button type="submit" class="danger quiet">{remove_text}</button>
                        </ActionForm>
                    </details>
                    }.into_any()
                }}
            </td>
        </tr>
    }
}

/// Admin API tokens (admins): mint one (its token shown once), the list,
/// revoke. For scripts that call the admin API without a browser.
#[component]
fn ApiTokens(now_ms: i64) -> impl IntoView {
    let mint = ServerAction::<MintApiToken>::new();
    let revoke = ServerAction::<RevokeApiToken>::new();
    let tokens = crate::json::resource(|| (), |_| list_api_tokens());
    on_success(mint, move || tokens.refetch());
    on_success(revoke, move || tokens.refetch());
    let outcome: Outcome = RwSignal::new(None);
    report(outcome, mint, "Token minted: it is shown above, this once.");
    report(outcome, revoke, "Token revoked: it no longer signs anything in.");
    let query = use_query_map();
    let minted = crate::json::resource(
        move || query.read().get("api_token"),
        |handle| async move {
            match handle {
                Some(handle) => take_api_token(handle).await.ok().flatten(),
                None => None,
            }
        },
    );
    view! {
        <section aria-labelledby="api-tokens-h" class="panel">
            <h2 id="api-tokens-h">"Admin API tokens"</h2>
            <p class="hint">"For scripts and orchestrators that call the admin API without a browser ("
                <code>"Authorization: Bearer …"</code> "). A token acts as an admin: mint one per script, revoke it when the script goes."</p>
            <Suspense fallback=|| ()>
                {move || minted.get().flatten().map(|m| {
                    let token = m.token.clone();
                    view! {
                        <div class="minted" data-testid="api-token-minted">
                            <p class="warning">"Copy it now: it is shown only this once, and only its hash is kept."</p>
                            <div class="secret">
                                <code data-testid="api-token">{token.clone()}</code>
                                <CopyButton text=token label="Copy the token"/>
                            </div>
                            <p class="hint">{format!("{} ({})", m.name, m.id)}</p>
                        </div>
                    }
                })}
            </Suspense>
            <ActionForm action=mint attr:class="mint-form">
                <label>"What it is for" <input name="name" required maxlength="200" autocomplete="off" placeholder="deploy pipeline"/></label>
                <button type="submit" class="primary">"Mint token"</button>
            </ActionForm>
            <OutcomeLine outcome/>
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || tokens.get().map(|result| match result {
                    Ok(list) if list.is_empty() => view! { <p class="empty">"No API token yet. Mint one above for a script that manages Gatehouse."</p> }.into_any(),
                    Ok(list) => view! {
                        <table class="responsive" aria-label="Admin API tokens">
                            <thead><tr><th scope="col">"For"</th><th scope="col">"Id"</th><th scope="col">"Minted"</th>
                                <th scope="col">"Status"</th><th scope="col"><span class="visually-hidden">"Actions"</span></th></tr></thead>
                            <tbody>
                            {list.into_iter().map(|t| {
                                let id = t.id.clone();
                                view! {
                                <tr data-api-token=t.id.clone()>
                                    <td data-label="For"><Name text=t.name.clone()/></td>
                                    <td data-label="Id" class="mono">{t.id.clone()}</td>
                                    <td data-label="Minted"><When ms=t.created_ms now_ms/></td>
                                    <td data-label="Status">{if t.revoked { "revoked" } else { "live" }}</td>
                                    <td data-label="Actions">{(!t.revoked).then(|| view! {
                                        <ActionForm action=revoke attr:class="row-form">
                                            <input type="hidden" name="id" value=id.clone()/>
                                            <button type="submit" class="quiet danger" aria-label=format!("Revoke {}", t.name)>"Revoke"</button>
                                        </ActionForm>
                                    })}</td>
                                </tr>
                            }}).collect_view()}
                            </tbody>
                        </table>
                    }.into_any(),
                    Err(e) => view! { <p role="alert" class="error">"Could not load: " {crate::outcome::message(&e)}</p> }.into_any(),
                })}
            </Suspense>
        </section>
    }
}

/// The latest user changes.
#[component]
fn Changes(changes: Vec<ChangeEntry>, now_ms: i64) -> impl IntoView {
    (!changes.is_empty()).then(|| {
        view! {
            <section aria-labelledby="changes-h">
                <h2 id="changes-h">"Recent changes"</h2>
                <ul class="changes">
                    {changes.into_iter().map(|c| view! {
                        <li>
                            <When ms=c.at_ms now_ms/> " " <span>{crate::words::actor(&c.actor, &[])}</span> " "
                            <strong>{c.action}</strong> " " <span class="mono">{c.target}</span>
                            {c.detail.map(|d| view! { <span class="hint">" — " {d}</span> })}
                        </li>
                    }).collect_view()}
                </ul>
            </section>
        }
    })
}
