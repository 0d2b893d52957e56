//! `/upstreams`

use leptos::prelude::*;
use leptos_meta::Title;

use gatehouse_model::LiveEvent;

use crate::components::header::Header;
use crate::components::live::{LiveStatus, refetch_on, use_changes};
use crate::components::name::Name;
use crate::pages::notify_admin::{IdleTargets, NOTIFY_FIELDS, NotifyForm, NotifyTable, editing_target};
use crate::pages::upstream_admin::{
    NotRunning, Picked, UPSTREAM_FIELDS, UpstreamActions, UpstreamForm, editing_upstream,
};

/// `/upstreams`: the fronted MCP servers and their health, live.
#[component]
pub fn UpstreamsPage() -> impl IntoView {
    let trust = ServerAction::<crate::server_fns::SetUpstreamTrust>::new();
    let save = ServerAction::<crate::server_fns::SaveUpstream>::new();
    let act = ServerAction::<crate::server_fns::UpstreamAction>::new();
    let outcome: crate::outcome::Outcome = RwSignal::new(None);
    crate::outcome::report(outcome, trust, "Saved.");
    // The answer says what was done: saved, or what a test found.
    crate::outcome::report_fields_with(outcome, save, |done: &String| done.clone(), UPSTREAM_FIELDS);
    crate::outcome::report_with(outcome, act, |done: &String| done.clone());
    let upstreams = crate::json::resource(
        move || (trust.version().get(), save.version().get(), act.version().get()),
        |_| crate::server_fns::list_upstreams(),
    );
    let managed = crate::json::resource(
        move || (save.version().get(), act.version().get()),
        |_| crate::server_fns::list_managed_upstreams(),
    );
    let save_notify = ServerAction::<crate::server_fns::SaveNotify>::new();
    let notify_act = ServerAction::<crate::server_fns::NotifyAction>::new();
    let notify_outcome: crate::outcome::Outcome = RwSignal::new(None);
    crate::outcome::report_fields(
        notify_outcome,
        save_notify,
        "Saved: every replica sends to it within a second. Send a test to check it.",
        NOTIFY_FIELDS,
    );
    crate::outcome::report_with(notify_outcome, notify_act, |done: &String| done.clone());
    let notify = crate::json::resource(
        move || (save_notify.version().get(), notify_act.version().get()),
        |_| crate::server_fns::list_notify_targets(),
    );
    let editing_notify = editing_target();
    let editing = editing_upstream();
    let live = use_changes([
        refetch_on(&[LiveEvent::UpstreamsChanged], upstreams),
        refetch_on(&[LiveEvent::UpstreamsChanged], managed),
        // Deliveries follow approvals: re-read the targets' status then.
        refetch_on(&[LiveEvent::ApprovalsChanged], notify),
    ]);
    view! {
        <Title text="Upstreams — Gatehouse"/>
        <Header/>
        <main class="page">
            <h1>"Upstream MCP servers"</h1>
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || upstreams.get().map(|result| match result {
                    Ok(list) if list.upstreams.is_empty() => view! {
                        <p class="empty">{if list.is_admin {
                            "No upstream yet. Add one below, or as an [[upstream]] table in gatehouse.toml."
                        } else {
                            "No upstream is configured yet: an admin adds them."
                        }}</p>
                        <crate::outcome::OutcomeLine outcome/>
                        {(!list.elsewhere.is_empty()).then(|| view! { <Elsewhere replicas=list.elsewhere show_errors=list.show_errors/> })}
                    }.into_any(),
                    Ok(list) => {
                        let show_errors = list.show_errors;
                        view! {
                        <div class="table-wrap" tabindex="0" role="region" aria-label="Upstreams (scrolls sideways)">
                        <table class="responsive" aria-label="Upstreams">
                            <thead><tr>
                                <th scope="col">"Name"</th><th scope="col">"Transport"</th><th scope="col">"Health"</th>
                                <th scope="col">"Tools"</th><th scope="col">"Restarts"</th>
                                {show_errors.then(|| view! { <th scope="col">"Last error"</th> })}
                                <th scope="col">"Annotations"</th>
                                {list.is_admin.then(|| view! { <th scope="col">"Manage"</th> })}
                            </tr></thead>
                            <tbody>
                            {list.upstreams.into_iter().map(|u| {
                                let row_name = u.name.clone();
                                let (trusted, by_admin) = list.trust.iter().find(|(n, ..)| *n == u.name).map(|(_, t, a)| (*t, *a)).unwrap_or_default();
                                let name = u.name.clone();
                                let is_admin = list.is_admin;
                                view! {
                                <tr data-upstream=row_name>
                                    <td data-label="Name"><Name text=u.name.clone()/></td>
                                    <td data-label="Transport">{u.transport.clone()}</td>
                                    <HealthCells u=u show_errors=show_errors/>
                                    <td data-label="Annotations" data-testid="trust">
                                        <TrustCell name=name.clone() trusted by_admin is_admin trust/>
                                    </td>
                                    {is_admin.then(|| view! {
                                        <td data-label="Manage" data-testid="manage">
                                            {move || managed.get().and_then(Result::ok).map(|m| view! {
                                                <UpstreamActions name=name.clone() managed=m act/>
                                            })}
                                        </td>
                                    })}
                                </tr>
                            }}).collect_view()}
                            </tbody>
                        </table>
                        </div>
                        <crate::outcome::OutcomeLine outcome/>
                        <p class="hint">"An upstream's tool annotations (\"read-only\", \"not destructive\") are what its server says of its tools: until an admin trusts them, they decide nothing and its tools ask unless a rule allows them. Trusted, a tool it calls read-only runs at once."</p>
                        {(!show_errors).then(|| view! {
                            <p class="hint">"An upstream's last error is shown to admins."</p>
                        })}
                        {(!list.elsewhere.is_empty()).then(|| view! { <Elsewhere replicas=list.elsewhere show_errors=show_errors/> })}
                    }.into_any()
                    }
                    Err(e) => view! { <p role="alert">"Could not load: " {crate::outcome::message(&e)}</p> }.into_any(),
                })}
            </Suspense>
            <Suspense fallback=|| ()>
                {move || {
                    let list = upstreams.get().and_then(Result::ok).filter(|l| l.is_admin)?;
                    let running = list.upstreams.iter().map(|u| u.name.clone()).collect::<Vec<_>>();
                    managed.get().and_then(Result::ok).map(|m| view! { <NotRunning managed=m running act/> })
                }}
            </Suspense>
            // A new form when the upstream being edited changes (Edit is a
            // link on this page); rebuilt in place, keeping what was typed,
            // when the upstreams are read again.
            <For each=move || [editing()] key=|chosen| chosen.clone() children=move |chosen| {
                // What the selects hold outlives a re-read, as typed text does.
                let picked = Picked::default();
                view! {
                <Suspense fallback=|| ()>
                    {move || managed.get().and_then(Result::ok).filter(|_| {
                        upstreams.get().and_then(Result::ok).is_some_and(|l| l.is_admin)
                    }).map(|m| view! { <UpstreamForm managed=m save editing=chosen.clone() picked/> })}
                </Suspense>
            }}/>
            <Suspense fallback=|| ()>
                {move || notify.get().and_then(Result::ok).filter(|n| n.is_admin).map(|list| view! {
                    <section aria-labelledby="notify-heading">
                        <h2 id="notify-heading">"Notifications"</h2>
                        <NotifyTable list=list.clone() act=notify_act/>
                        <crate::outcome::OutcomeLine outcome=notify_outcome/>
                        <IdleTargets idle=list.idle act=notify_act/>
                    </section>
                })}
            </Suspense>
            <For each=move || [editing_notify()] key=|chosen| chosen.clone() children=move |chosen| {
                let picked = Picked::default();
                view! {
                <Suspense fallback=|| ()>
                    {move || notify.get().and_then(Result::ok).filter(|n| n.is_admin).map(|list| view! {
                        <NotifyForm list save=save_notify editing=chosen.clone() picked/>
                    })}
                </Suspense>
            }}/>
            <LiveStatus state=live/>
        </main>
    }
}

/// The same upstreams as the other replicas on one PostgreSQL see them (each
/// replica runs its own connections, so health can differ).
#[component]
fn Elsewhere(replicas: Vec<(String, Vec<gatehouse_model::UpstreamInfo>)>, show_errors: bool) -> impl IntoView {
    view! {
        <section aria-labelledby="elsewhere-heading">
            <h2 id="elsewhere-heading">"On the other replicas"</h2>
            <div class="table-wrap" tabindex="0" role="region" aria-label="Upstreams on the other replicas (scrolls sideways)">
            <table class="responsive" aria-label="Upstreams on the other replicas">
                <thead><tr>
                    <th scope="col">"Replica"</th><th scope="col">"Name"</th><th scope="col">"Health"</th>
                    <th scope="col">"Tools"</th><th scope="col">"Restarts"</th>
                    {show_errors.then(|| view! { <th scope="col">"Last error"</th> })}
                </tr></thead>
                <tbody>
                {replicas.into_iter().flat_map(|(replica, list)| list.into_iter().map(move |u| (replica.clone(), u))).map(|(replica, u)| {
                    let row = replica.clone();
                    view! {
                    <tr data-replica=row>
                        <td data-label="Replica"><code>{replica}</code></td>
                        <td data-label="Name"><Name text=u.name.clone()/></td>
                        <HealthCells u=u show_errors=show_errors/>
                    </tr>
                }}).collect_view()}
                </tbody>
            </table>
            </div>
        </section>
    }
}

/// Whether an upstream's annotations are trusted, and (admins) the switch.
#[component]
fn TrustCell(
    name: String,
    trusted: bool,
    by_admin: bool,
    is_admin: bool,
    trust: ServerAction<crate::server_fns::SetUpstreamTrust>,
) -> impl IntoView {
    let said = match (trusted, by_admin) {
        (true, true) => "trusted (by an admin)",
        (true, false) => "trusted (gatehouse.toml)",
        (false, true) => "not trusted (by an admin)",
        (false, false) => "not trusted",
    };
    let (label, value) = if trusted { ("Stop trusting", "off") } else { ("Trust", "on") };
    view! {
        <span class=if trusted { "status active" } else { "status" }>{said}</span>
        {is_admin.then(|| view! {
            <ActionForm action=trust attr:class="row-form trust-form">
                <input type="hidden" name="upstream" value=name.clone()/>
                <input type="hidden" name="trust" value=value/>
                <button type="submit" class="quiet" aria-label=format!("{label} the annotations of {name}")>{label}</button>
            </ActionForm>
        })}
    }
}

/// An upstream's health, tool count, restarts and (for admins) last error:
/// the cells both tables share.
#[component]
fn HealthCells(u: gatehouse_model::UpstreamInfo, show_errors: bool) -> impl IntoView {
    let class = if u.health == "up" { "status active" } else { "status revoked" };
    view! {
        <td data-label="Health"><span class=class>{u.health}</span></td>
        <td data-label="Tools">{u.tools}</td>
        <td data-label="Restarts">{u.restarts}</td>
        {show_errors.then(|| view! {
            <td data-label="Last error" class="error-cell"><Name text=u.last_error.unwrap_or_default()/></td>
        })}
    }
}
