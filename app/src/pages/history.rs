//! `/history`: the audit log, newest first. The filters live in the query
//! string, so a view can be shared as a link; pages go back by cursor; new
//! entries arrive live on the first page.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_location;

use gatehouse_model::{ExportFormat, HistoryFilter, HistoryPage, LiveEvent, State, routes};

use crate::components::header::Header;
use crate::components::live::{LiveStatus, refetch_on, use_changes};
use crate::components::name::Name;
use crate::components::when::When;
use crate::server_fns::get_history;

/// `/history`
#[component]
pub fn HistoryPage() -> impl IntoView {
    let search = use_location().search;
    let filter = Memo::new(move |_| search.with(|q| HistoryFilter::from_query(q)));
    let history = crate::json::resource(move || search.get(), get_history);
    // Only the newest page grows; an older page stays as it was asked for.
    let first_page = move || filter.with_untracked(|f| f.as_ref().is_ok_and(|f| f.before.is_none()));
    let live = use_changes([refetch_on(&[LiveEvent::ApprovalsChanged], history).when(first_page)]);
    view! {
        <Title text="History — Gatehouse"/>
        <Header/>
        <main class="page">
            <h1>"History"</h1>
            <p class="hint">"Every call: those that waited for a person, with their decision, and those that ran or were refused at once — newest first."</p>
            {move || filter.get().ok().map(|f| view! { <Filters filter=f/> })}
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || history.get().map(|result| match (result.map_err(|e| e.to_string()), filter.get()) {
                    (Ok(page), Ok(filter)) => view! { <Entries page filter/> }.into_any(),
                    (Err(e), _) | (_, Err(e)) => view! {
                        <p role="alert" class="error">"Could not load the history: " {e}</p>
                        <p><a href=routes::HISTORY>"Show all history"</a></p>
                    }.into_any(),
                })}
            </Suspense>
            <LiveStatus state=live/>
        </main>
    }
}

/// The filter form: a plain GET form, so it works before hydration and its
/// result is a link.
#[component]
fn Filters(filter: HistoryFilter) -> impl IntoView {
    let narrowed = filter.is_narrowed();
    let outcome = filter.outcome.clone();
    let kind = filter.kind.clone();
    view! {
        <form method="get" action=routes::HISTORY class="filters" aria-label="Filter the history">
            <label>"Agent" <input name="agent" value=filter.agent.clone() autocomplete="off"/></label>
            <label>"Tool" <input name="tool" value=filter.tool.clone() autocomplete="off"/></label>
            <label>"Upstream" <input name="upstream" value=filter.upstream.clone() placeholder="gatehouse = built-in" autocomplete="off"/></label>
            <label>"Calls"
                <select name="kind">
                    {[("", "All"), ("gated", "Waited for a person"), ("at_once", "Ran or refused at once")].into_iter().map(|(value, label)| view! {
                        <option value=value selected=kind == value>{label}</option>
                    }).collect_view()}
                </select>
            </label>
            <label>"Outcome"
                <select name="outcome">
                    <option value="" selected=outcome.is_empty()>"Any"</option>
                    {State::ALL.iter().map(|s| view! {
                        <option value=s.as_str() selected=outcome == s.as_str()>{s.as_str()}</option>
                    }).collect_view()}
                </select>
            </label>
            <label>"Decided by" <input name="decider" value=filter.decider.clone() placeholder="user name" autocomplete="off"/></label>
            <label>"From (UTC)" <input name="from" type="date" value=filter.from.clone()/></label>
            <label>"To (UTC)" <input name="to" type="date" value=filter.to.clone()/></label>
            <div class="filter-actions">
                <button type="submit" class="primary">"Filter"</button>
                {narrowed.then(|| view! { <a href=routes::HISTORY>"Clear filters"</a> })}
            </div>
        </form>
        <p class="exports">"Download this view: "
            <a href=routes::history_export(ExportFormat::Jsonl, &filter) download rel="external">"JSON Lines"</a>
            " · "
            <a href=routes::history_export(ExportFormat::Csv, &filter) download rel="external">"CSV"</a>
        </p>
    }
}

/// One page of entries, with the way to older ones.
#[component]
fn Entries(page: HistoryPage, filter: HistoryFilter) -> impl IntoView {
    let HistoryPage { now_ms, entries, next_before } = page;
    if entries.is_empty() {
        let text = if filter.is_narrowed() || filter.before.is_some() {
            "No entry matches these filters."
        } else {
            "Nothing has been audited yet. Every call the gate pauses, and what became of it, appears here."
        };
        return view! { <p class="empty">{text}</p> }.into_any();
    }
    let newer = filter.before.map(|_| routes::history(&filter.at_page(None)));
    let older = next_before.map(|b| routes::history(&filter.at_page(Some(b))));
    view! {
        <div class="table-wrap" tabindex="0" role="region" aria-label="History (scrolls sideways)">
        <table class="responsive" aria-label="History">
            <thead><tr>
                <th scope="col">"When"</th><th scope="col">"Agent"</th><th scope="col">"Tool"</th>
                <th scope="col">"Upstream"</th><th scope="col">"Outcome"</th><th scope="col">"By"</th>
                <th scope="col">"Detail"</th>
            </tr></thead>
            <tbody>
            {entries.into_iter().map(|e| {
                let by = e.actor.clone().unwrap_or_default();
                let by = by.strip_prefix("user:").map(str::to_string).unwrap_or(by);
                view! {
                <tr data-execution-id=e.execution_id.to_string() data-state=e.state.as_str()>
                    <td data-label="When"><When ms=e.at_ms now_ms/></td>
                    <td data-label="Agent"><Name text=e.agent/></td>
                    <td data-label="Tool"><a class="tool-link" href=routes::resume(&e.execution_id, None)><Name text=e.tool/></a></td>
                    <td data-label="Upstream">{match e.upstream {
                        Some(u) => view! { <Name text=u/> }.into_any(),
                        None => view! { <span class="hint">"gatehouse"</span> }.into_any(),
                    }}</td>
                    <td data-label="Outcome"><span class=format!("badge {}", e.state)>{e.state.as_str()}</span></td>
                    <td data-label="By"><Name text=by/></td>
                    <td data-label="Detail" class="detail-cell">{e.detail.map(|d| view! { <Name text=d/> })}</td>
                </tr>
            }}).collect_view()}
            </tbody>
        </table>
        </div>
        <nav class="pager" aria-label="Pages">
            {newer.map(|href| view! { <a href=href>"← Newest"</a> })}
            {older.map(|href| view! { <a href=href class="older">"Older entries →"</a> })}
        </nav>
    }
    .into_any()
}
