//! `/history`: every call, a row each (a paused call's steps folded in),
//! newest first. The filters live in the query
//! string, so a view can be shared as a link; pages go back by cursor; new
//! entries arrive live on the first page.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_location;

use gatehouse_model::{CallRow, CallsPage, ExportFormat, HistoryFilter, HistoryPickers, LiveEvent, State, routes};

use crate::components::arguments::KeptArgumentsView;
use crate::components::header::Header;
use crate::components::live::{LiveStatus, refetch_on, use_changes};
use crate::components::name::Name;
use crate::components::when::When;
use crate::server_fns::{get_calls, get_history_pickers};

/// `/history`
#[component]
pub fn HistoryPage() -> impl IntoView {
    let search = use_location().search;
    let filter = Memo::new(move |_| search.with(|q| HistoryFilter::from_query(q)));
    let history = crate::json::resource(move || search.get(), get_calls);
    let pickers = crate::json::resource(|| (), |_| get_history_pickers());
    // Only the newest page grows; an older page stays as it was asked for.
    let first_page = move || filter.with_untracked(|f| f.as_ref().is_ok_and(|f| f.before.is_none()));
    let live = use_changes([refetch_on(&[LiveEvent::ApprovalsChanged], history).when(first_page)]);
    view! {
        <Title text="History — Gatehouse"/>
        <Header/>
        <main class="page wide">
            <h1>"History"</h1>
            <p class="hint">"Every call: those that waited for a person, with their decision, and those that ran or were refused at once — newest first."</p>
            // Apart from the calls, so a live update never resets a filter
            // being typed; its suggestions are read once.
            <Suspense fallback=|| ()>
                {move || filter.get().ok().map(|f| view! { <Filters filter=f pickers=pickers.get().and_then(Result::ok).unwrap_or_default()/> })}
            </Suspense>
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || history.get().map(|result| match (result.map_err(|e| crate::outcome::message(&e)), filter.get()) {
                    (Ok(page), Ok(filter)) => view! { <Calls page filter/> }.into_any(),
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
fn Filters(filter: HistoryFilter, pickers: HistoryPickers) -> impl IntoView {
    // Suggestions for the free-text filters: what exists, as the viewer sees it.
    let suggest = |id: &'static str, names: Vec<String>| {
        view! {
            <datalist id=id>{names.into_iter().map(|n| view! { <option value=n/> }).collect_view()}</datalist>
        }
    };
    let narrowed = filter.is_narrowed();
    let outcome = filter.outcome.clone();
    let kind = filter.kind.clone();
    view! {
        <form method="get" action=routes::HISTORY class="filters" aria-label="Filter the history">
            <label>"Agent" <input name="agent" list="agents-known" value=filter.agent.clone() autocomplete="off"/></label>
            <label>"Tool" <input name="tool" list="tools-known" value=filter.tool.clone() autocomplete="off"/></label>
            <label>"Upstream" <input name="upstream" list="upstreams-known" value=filter.upstream.clone() placeholder="gatehouse = built-in" autocomplete="off"/></label>
            {suggest("agents-known", pickers.agents)}
            {suggest("tools-known", pickers.tools)}
            {suggest("upstreams-known", pickers.upstreams)}
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

/// One page of calls, a row each, with the way to older ones.
#[component]
fn Calls(page: CallsPage, filter: HistoryFilter) -> impl IntoView {
    let CallsPage { now_ms, calls, next_before, grants, .. } = page;
    if calls.is_empty() {
        let text = if filter.is_narrowed() || filter.before.is_some() {
            "No call matches these filters."
        } else {
            "No call yet. Every call an agent makes through Gatehouse, and what became of it, appears here."
        };
        return view! { <p class="empty">{text}</p> }.into_any();
    }
    let newer = filter.before.map(|_| routes::history(&filter.at_page(None)));
    let older = next_before.map(|b| routes::history(&filter.at_page(Some(b))));
    view! {
        <div class="table-wrap" tabindex="0" role="region" aria-label="History (scrolls sideways)">
        <table class="responsive history" aria-label="History">
            <thead><tr>
                <th scope="col">"When"</th><th scope="col">"Call"</th><th scope="col">"Outcome"</th>
                <th scope="col">"Decided by"</th><th scope="col">"Detail"</th>
            </tr></thead>
            <tbody>
            {calls.into_iter().map(|call| {
                let decided = call.decider().map(|a| crate::words::actor(a, &grants));
                let CallRow { latest, steps } = call;
                let gated = latest.execution_id.as_str().starts_with("exec_");
                let id = latest.execution_id.to_string();
                let tool = view! { <Name text=latest.tool.clone() joints=true/> };
                // The arguments, where the record kept them (`keep_arguments`).
                let kept = steps.iter().find_map(|s| s.arguments.clone());
                let folded = (steps.len() > 1).then(|| {
                    let n = steps.len();
                    let grants = grants.clone();
                    view! {
                        <details class="steps">
                            <summary>{format!("{n} steps")}</summary>
                            <ol>
                                {steps.into_iter().map(|step| view! {
                                    <li data-state=step.state.as_str()>
                                        <When ms=step.at_ms now_ms/> " " <strong>{step.state.as_str()}</strong>
                                        {step.actor.map(|a| view! { " by " <Name text=crate::words::actor(&a, &grants)/> })}
                                        {step.detail.map(|d| view! { <span class="hint">" — " <Name text=d/></span> })}
                                    </li>
                                }).collect_view()}
                            </ol>
                        </details>
                    }
                });
                view! {
                <tr data-execution-id=id.clone() data-state=latest.state.as_str()>
                    <td data-label="When"><When ms=latest.at_ms now_ms/></td>
                    <td data-label="Call" class="call-cell">
                        {if gated {
                            view! { <a class="tool-link" href=routes::resume(&id, None)>{tool}</a> }.into_any()
                        } else {
                            view! { <code class="tool-link">{tool}</code> }.into_any()
                        }}
                        <div class="meta">
                            <Name text=latest.agent.clone()/> " · "
                            {match latest.upstream.clone() {
                                Some(u) => view! { <Name text=u/> }.into_any(),
                                None => view! { <span>"gatehouse"</span> }.into_any(),
                            }}
                        </div>
                        {kept.map(|kept| view! {
                            <details class="kept">
                                <summary>"Arguments"</summary>
                                <KeptArgumentsView kept/>
                            </details>
                        })}
                    </td>
                    <td data-label="Outcome"><span class=format!("badge {}", latest.state)>{latest.state.as_str()}</span></td>
                    <td data-label="Decided by" class="by-cell">{decided.map(|d| view! { <Name text=d/> })}</td>
                    <td data-label="Detail" class="detail-cell">
                        {latest.detail.clone().map(|d| view! { <Name text=d/> })}
                        {folded}
                    </td>
                </tr>
            }}).collect_view()}
            </tbody>
        </table>
        </div>
        <nav class="pager" aria-label="Pages">
            {newer.map(|href| view! { <a href=href>"← Newest"</a> })}
            {older.map(|href| view! { <a href=href class="older">"Older calls →"</a> })}
        </nav>
    }
    .into_any()
}
