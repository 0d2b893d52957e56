//! `/grants`: every "allow this tool for this agent" the viewer may see —
//! agent, tool, argument constraints, scope, who made it, uses — each
//! revocable at once.

use leptos::prelude::*;
use leptos_meta::Title;

use gatehouse_model::{GrantView, GrantsView, LiveEvent, routes};

use crate::components::header::Header;
use crate::components::live::{LiveStatus, refetch_on, use_changes};
use crate::components::name::Name;
use crate::components::when::When;
use crate::outcome::{Outcome, OutcomeLine, on_success, report};
use crate::server_fns::{RevokeGrant, list_grants};

/// `/grants`
#[component]
pub fn GrantsPage() -> impl IntoView {
    let revoke = ServerAction::<RevokeGrant>::new();
    let grants = crate::json::resource(|| (), |_| list_grants());
    // Read again after each revocation; made, revoked, ended, expired or used
    // elsewhere: read again too.
    let outcome: Outcome = RwSignal::new(None);
    on_success(revoke, move || grants.refetch());
    report(outcome, revoke, "Grant revoked: the agent's next call to that tool waits for a person.");
    let live = use_changes([refetch_on(&[LiveEvent::GrantsChanged], grants)]);
    view! {
        <Title text="Grants — Gatehouse"/>
        <Header/>
        <main class="page">
            <h1>"Grants"</h1>
            <p class="hint">
                "A grant lets an agent run one tool without asking again, for a session, a while, or until revoked. "
                "It covers every credential of that agent (same name and owner), never a rule marked human-only. "
                "Make one on a waiting call's page; revoke it here, and the next call waits for a person again."
            </p>
            <OutcomeLine outcome/>
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || grants.get().map(|result| match result {
                    Ok(view) => view! { <GrantsTable view revoke/> }.into_any(),
                    Err(e) => view! { <p role="alert" class="error">"Could not load: " {crate::outcome::message(&e)}</p> }.into_any(),
                })}
            </Suspense>
            <LiveStatus state=live/>
        </main>
    }
}

#[component]
fn GrantsTable(view: GrantsView, revoke: ServerAction<RevokeGrant>) -> impl IntoView {
    let GrantsView { now_ms, is_admin, grants } = view;
    if grants.is_empty() {
        return view! {
            <p class="empty">"No grants. On a waiting call's page, choose “Allow this tool for this agent” to make one."</p>
        }
        .into_any();
    }
    view! {
        <div class="table-wrap" tabindex="0" role="region" aria-label="Grants (scrolls sideways)">
        <table class="responsive grants" aria-label="Grants">
            <thead><tr>
                <th scope="col">"Agent"</th><th scope="col">"Tool"</th><th scope="col">"Only when"</th>
                <th scope="col">"Lasts"</th><th scope="col">"Made"</th><th scope="col">"Uses"</th>
                <th scope="col"><span class="visually-hidden">"Actions"</span></th>
            </tr></thead>
            <tbody>
                {grants.into_iter().map(|g| view! { <GrantRow grant=g now_ms revoke/> }).collect_view()}
            </tbody>
        </table>
        </div>
        {(!is_admin).then(|| view! { <p class="hint">"You see the grants of the agents you own. Admins see everyone's."</p> })}
    }
    .into_any()
}

#[component]
fn GrantRow(grant: GrantView, now_ms: i64, revoke: ServerAction<RevokeGrant>) -> impl IntoView {
    let GrantView {
        id,
        agent,
        owner,
        tool,
        arguments,
        scope,
        created_by,
        created_at_ms,
        expires_at_ms,
        uses,
        last_used_ms,
        execution_id,
        ..
    } = grant;
    let only: Vec<String> = arguments.iter().map(|(name, m)| m.describe(name)).collect();
    let label = format!("Revoke the grant of {tool} to {agent}");
    let (row_id, row_tool) = (id.to_string(), tool.clone());
    view! {
        <tr data-grant-id=row_id data-tool=row_tool>
            <td data-label="Agent"><Name text=agent/>{owner.map(|o| view! { <span class="meta">" (" <Name text=o/> ")"</span> })}</td>
            <td data-label="Tool"><a class="tool-link" href=routes::resume(&execution_id, None) title="The call it was made from"><Name text=tool/></a></td>
            <td data-label="Only when" class="only">{if only.is_empty() {
                view! { <span class="hint">"any arguments"</span> }.into_any()
            } else {
                view! { <Name text=only.join(" and ")/> }.into_any()
            }}</td>
            <td data-label="Lasts">{match expires_at_ms {
                Some(at) => view! { "ends " <When ms=at now_ms/> }.into_any(),
                None => scope.label().trim_start_matches("for ").to_string().into_any(),
            }}</td>
            <td data-label="Made"><When ms=created_at_ms now_ms/> " by " <Name text=crate::words::actor(&created_by, &[])/></td>
            <td data-label="Uses"><span class="uses">{uses}</span>{match last_used_ms {
                Some(at) => view! { <span class="meta">" · last " <When ms=at now_ms/></span> }.into_any(),
                None => view! { <span class="meta">" · never used"</span> }.into_any(),
            }}</td>
            <td data-label="Actions" class="actions">
                <ActionForm action=revoke attr:class="revoke-form">
                    <input type="hidden" name="id" value=id.into_string()/>
                    <button type="submit" class="danger quiet" aria-label=label>"Revoke"</button>
                </ActionForm>
            </td>
        </tr>
    }
}
