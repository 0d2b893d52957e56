//! `/tools`: every tool agents can see — its upstream, annotations,
//! description (hidden characters visible), input schema, and what the gate
//! does with it and why — and the upstream tools held back because their
//! upstream changed a pinned definition (each with a side-by-side diff) or
//! added them after its tools were pinned (each with its definition), with,
//! for admins, Accept and Reject. Live.

use leptos::prelude::*;
use leptos_meta::Title;

use gatehouse_model::{
    Action, ChangeEntry, DiffLine, LiveEvent, ToolChange, ToolGate, definition_field, definition_fields, line_diff,
};
use serde_json::Value;

use crate::components::header::Header;
use crate::components::live::{LiveStatus, refetch_on, use_changes};
use crate::components::name::Name;
use crate::components::when::When;
use crate::outcome::{Outcome, OutcomeLine, on_success, report};
use crate::server_fns::{ReviewToolChange, ToolsView, list_tools};

/// `/tools`
#[component]
pub fn ToolsPage() -> impl IntoView {
    // `?agent=owner/agent`: the list as that agent sees it.
    let query = leptos_router::hooks::use_query_map();
    let tools = crate::json::resource(move || query.with(|q| q.get("agent")), list_tools);
    let live = use_changes([refetch_on(&[LiveEvent::UpstreamsChanged], tools)]);
    let review = ServerAction::<ReviewToolChange>::new();
    let outcome: Outcome = RwSignal::new(None);
    on_success(review, move || tools.refetch());
    report(outcome, review, "Reviewed: the tool's definition is settled as you chose.");
    view! {
        <Title text="Tools — Gatehouse"/>
        <Header/>
        <main class="page">
            <h1>"Tools"</h1>
            <p class="lead">
                "Every tool your agents can see, and what happens when they call it: it runs at once, waits for "
                "a person, or is refused, and why."
            </p>
            <details class="about">
                <summary>"How Gatehouse checks tools"</summary>
                <p class="hint">
                    "Gatehouse remembers each upstream tool as it first saw it. If the upstream later changes a tool, "
                    "or adds one, that tool is held back: agents can neither see nor call it until an admin looks "
                    "at the change and accepts it."
                </p>
                <p class="hint">
                    "An upstream may say that a tool only reads. Gatehouse believes it only for upstreams an admin "
                    "trusts (on the Upstreams page); until then those tools wait for a person unless a rule allows "
                    "them. \"Not destructive\" alone never lets a call run."
                </p>
            </details>
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || tools.get().map(|result| match result {
                    Ok(view) => view! { <Tools view review outcome/> }.into_any(),
                    Err(e) => view! { <p role="alert" class="error">"Could not load: " {crate::outcome::message(&e)}</p> }.into_any(),
                })}
            </Suspense>
            <LiveStatus state=live/>
        </main>
    }
}

#[component]
fn Tools(view: ToolsView, review: ServerAction<ReviewToolChange>, outcome: Outcome) -> impl IntoView {
    let ToolsView { now_ms, is_admin, tools, held, reviews, agents, seen_as } = view;
    let held_count = held.len();
    view! {
        <OutcomeLine outcome/>
        {(!held.is_empty()).then(|| view! {
            <section class="panel held" aria-labelledby="held-h">
                <h2 id="held-h">"Held back for review (" {held_count} ")"</h2>
                <p class="hint">
                    "These tools changed at their upstream since their definition was pinned, or are new at an "
                    "upstream whose tools were pinned. Agents do not see them and cannot call them. Accept pins the "
                    "offered definition and makes the tool available; reject keeps it held back until the upstream "
                    "returns to the pinned definition (a new tool: until an admin accepts it)."
                </p>
                {held.into_iter().map(|change| view! { <HeldTool change is_admin now_ms review/> }).collect_view()}
            </section>
        })}
        <section aria-labelledby="exposed-h">
            {match seen_as.clone() {
                None => view! { <h2 id="exposed-h">"Exposed tools (" {tools.len()} ")"</h2> }.into_any(),
                Some(seen) => view! {
                    <h2 id="exposed-h">"Tools " <Name text=seen.agent.clone()/> " sees (" {tools.len()} ")"</h2>
                    <p class="hint seen-as" data-hidden=seen.hidden.to_string() data-profiles=seen.profiles.join(",")>
                        {if seen.profiles.is_empty() {
                            "No profile names it".to_string()
                        } else {
                            format!("Held to profile{} {}", if seen.profiles.len() == 1 { "" } else { "s" }, seen.profiles.join(", "))
                        }}
                        {format!("; {} tool{} hidden from it (its profiles, or rules that block them for it). Rules with a condition decide when it calls.",
                            seen.hidden, if seen.hidden == 1 { " is" } else { "s are" })}
                    </p>
                }.into_any(),
            }}
            <ToolSearch tools agents seen_as=seen_as.map(|s| s.agent)/>
        </section>
        {(!reviews.is_empty()).then(|| view! { <Reviews reviews now_ms/> })}
    }
}

/// Whether `gate` is one the search asks for: `text` in its name, title,
/// upstream or description (any case), and `action` its gate (empty: any).
fn matches(gate: &ToolGate, text: &str, action: &str) -> bool {
    let text = text.trim().to_lowercase();
    let t = &gate.tool;
    let found = text.is_empty()
        || [Some(&t.name), t.title.as_ref(), t.upstream.as_ref(), t.description.as_ref()]
            .into_iter()
            .flatten()
            .any(|field| field.to_lowercase().contains(&text));
    found && (action.is_empty() || gate.action.as_str() == action)
}

/// The search over the exposed tools: a form that works without JavaScript
/// (`?q=…&gate=…`), and filters as the person types once the page is live.
#[component]
fn ToolSearch(tools: Vec<ToolGate>, agents: Vec<String>, seen_as: Option<String>) -> impl IntoView {
    let query = leptos_router::hooks::use_query_map();
    let text = RwSignal::new(query.read_untracked().get("q").unwrap_or_default());
    let action = RwSignal::new(query.read_untracked().get("gate").unwrap_or_default());
    let total = tools.len();
    let tools = StoredValue::new(tools);
    let shown = move || {
        tools.with_value(|all| {
            all.iter().filter(|g| matches(g, &text.get(), &action.get())).cloned().collect::<Vec<_>>()
        })
    };
    view! {
        <form method="get" action=gatehouse_model::routes::TOOLS class="tool-search" role="search" aria-label="Search the tools">
            <label>"Find"
                <input type="search" name="q" autocomplete="off" placeholder="name, upstream or description"
                    value=text.get_untracked() prop:value=text on:input=move |e| text.set(event_target_value(&e))/>
            </label>
            <label>"Gate"
                <select name="gate" on:change=move |e| action.set(event_target_value(&e))>
                    <option value="" selected=action.get_untracked().is_empty()>"any"</option>
                    {Action::ALL.iter().map(|a| {
                        let value = a.as_str();
                        view! { <option value=value selected=action.get_untracked() == value>{a.label()}</option> }
                    }).collect_view()}
                </select>
            </label>
            <label>"As agent"
                // A new list comes from the server: the form is sent.
                <select name="agent" on:change=move |e| {
                    if let Some(form) = event_target::<web_sys::HtmlSelectElement>(&e).form() {
                        let _ = form.request_submit();
                    }
                }>
                    <option value="" selected=seen_as.is_none()>"anyone (every tool)"</option>
                    {agents.into_iter().map(|a| {
                        let selected = seen_as.as_deref() == Some(a.as_str());
                        view! { <option value=a.clone() selected=selected>{a.clone()}</option> }
                    }).collect_view()}
                </select>
            </label>
            <button type="submit" class="quiet">"Search"</button>
        </form>
        {move || {
            let shown = shown();
            let n = shown.len();
            view! {
                <p class="hint" role="status" data-testid="tools-shown">{if n == total {
                    format!("All {total} tools.")
                } else {
                    format!("{n} of {total} tools match.")
                }}</p>
                {if shown.is_empty() {
                    view! { <p class="empty">"No tool matches: try part of its name, or any gate."</p> }.into_any()
                } else {
                    view! { <ExposedTools tools=shown/> }.into_any()
                }}
            }
        }}
    }
}

/// The exposed tools, one row each.
#[component]
fn ExposedTools(tools: Vec<ToolGate>) -> impl IntoView {
    view! {
        <div class="table-wrap" tabindex="0" role="region" aria-label="Exposed tools (scrolls sideways)">
        <table class="responsive tools" aria-label="Exposed tools">
            <thead><tr>
                <th scope="col">"Tool"</th><th scope="col">"Upstream"</th><th scope="col">"Gate"</th>
                <th scope="col">"Annotations"</th><th scope="col">"Description and input"</th>
            </tr></thead>
            <tbody>
            {tools.into_iter().map(|gate| {
                let t = gate.tool;
                let schema = serde_json::to_string_pretty(&t.input_schema).unwrap_or_default();
                let hints = [("read-only", t.read_only), ("destructive", t.destructive), ("idempotent", t.idempotent), ("open world", t.open_world)];
                let said: Vec<String> = hints.iter().filter_map(|(label, v)| v.map(|v| if v { label.to_string() } else { format!("not {label}") })).collect();
                view! {
                <tr data-tool=t.name.clone() data-action=gate.action.as_str()>
                    <td data-label="Tool">
                        <code class="tool-link tool-name-cell"><Name text=t.name.clone() joints=true/></code>
                        {t.title.clone().map(|title| view! { <div class="meta"><Name text=title/></div> })}
                    </td>
                    <td data-label="Upstream">{match t.upstream.clone() {
                        Some(u) => view! { <Name text=u/> }.into_any(),
                        None => view! { <span class="hint">"Gatehouse"</span> }.into_any(),
                    }}</td>
                    <td data-label="Gate">
                        <ActionBadge action=gate.action/>
                        <div class="meta">
                            {gate.basis.describe()}
                            {(gate.basis == gatehouse_model::Basis::UntrustedHints).then(|| view! {
                                " · " <a href=gatehouse_model::routes::UPSTREAMS>"trust its upstream's annotations"</a>
                                " or " <a href=gatehouse_model::routes::POLICIES>"add a rule"</a>
                            })}
                            {if t.changes_gate { Some(" · changes the gate: an admin decides") } else if gate.human_only { Some(" · a person decides") } else { None }}
                        </div>
                    </td>
                    <td data-label="Annotations">{if said.is_empty() {
                        view! { <span class="hint">"none"</span> }.into_any()
                    } else {
                        said.join(", ").into_any()
                    }}</td>
                    <td data-label="Description" class="description-cell">
                        <p class="description">{match t.description.clone() {
                            Some(d) if !d.is_empty() => view! { <Name text=d/> }.into_any(),
                            _ => view! { <span class="hint">"no description"</span> }.into_any(),
                        }}</p>
                        <details class="schema">
                            <summary>"Input schema"</summary>
                            <pre tabindex="0">{schema}</pre>
                        </details>
                    </td>
                </tr>
            }}).collect_view()}
            </tbody>
        </table>
        </div>
    }
}

/// What the gate does, as a badge.
#[component]
fn ActionBadge(action: Action) -> impl IntoView {
    let class = match action {
        Action::Allow => "badge approved",
        Action::RequireApproval => "badge pending",
        Action::Block => "badge declined",
    };
    view! { <span class=class>{action.label()}</span> }
}

/// One held-back tool: what changed, side by side (a new tool: what is
/// offered), and the decision.
#[component]
fn HeldTool(change: ToolChange, is_admin: bool, now_ms: i64, review: ServerAction<ReviewToolChange>) -> impl IntoView {
    let ToolChange { name, upstream, tool, pinned, is_new, offered, offered_digest, rejected } = change;
    let old = pinned.as_ref().map(|p| p.definition.clone()).unwrap_or(Value::Null);
    let has_pin = pinned.is_some();
    // Pinned: every field, changed or not (absent and null alike). Nothing
    // pinned: the fields offered, all of them new.
    let (changed, same): (Vec<String>, Vec<String>) = definition_fields(&old, &offered)
        .into_iter()
        .filter(|f| has_pin || definition_field(&offered, f).is_some())
        .partition(|f| !has_pin || definition_field(&old, f) != definition_field(&offered, f));
    let heading = format!("held-{name}");
    let labelled_by = heading.clone();
    let noun = if has_pin { "change" } else { "tool" };
    let table_label = if has_pin {
        format!("Pinned and offered definitions of {name}")
    } else {
        format!("Offered definition of {name}")
    };
    view! {
        <article class="card tool-change" data-tool=name.clone() data-new=is_new.to_string() aria-labelledby=labelled_by>
            <h3 id=heading><code><Name text=name.clone()/></code> " from " <Name text=upstream.clone()/></h3>
            <p class="meta">{match (pinned.as_ref(), is_new) {
                (Some(p), _) => view! { "Pinned " <When ms=p.at_ms now_ms/> " (" {p.by.clone()} "). Changed fields: " {changed.join(", ")} "." }.into_any(),
                (None, true) => "New tool: its upstream did not offer it when its tools were pinned; nothing of it has been reviewed.".into_any(),
                (None, false) => "No pinned definition could be read; held back all the same.".into_any(),
            }}</p>
            {rejected.map(|(by, at)| view! {
                <p class="warning" data-testid="rejected">
                    "Rejected by " <Name text=by/> " " <When ms=at now_ms/> ": it stays held back until "
                    {if has_pin { "the upstream returns to the pinned definition." } else { "an admin accepts it." }}
                </p>
            })}
            <div class="table-wrap" tabindex="0" role="region" aria-label=format!("Changes to {name}")>
            <table class="responsive diff" aria-label=table_label>
                <thead><tr>
                    <th scope="col">"Field"</th>
                    {has_pin.then(|| view! { <th scope="col">"Pinned"</th> })}
                    <th scope="col">"Now offered"</th>
                </tr></thead>
                <tbody>
                {changed.iter().map(|field| {
                    // Nothing pinned: every line is new (not a diff against "—").
                    let old_text = if has_pin { field_text(&old, field) } else { String::new() };
                    let lines = line_diff(&old_text, &field_text(&offered, field));
                    let pinned_side = has_pin.then(|| view! {
                        <td data-label="Pinned"><DiffSide lines=lines.clone() old=true/></td>
                    });
                    view! {
                    <tr data-field=field.clone()>
                        <th scope="row" data-label="Field">{field.clone()}</th>
                        {pinned_side}
                        <td data-label="Now offered"><DiffSide lines old=false/></td>
                    </tr>
                }}).collect_view()}
                </tbody>
            </table>
            </div>
            {(!same.is_empty()).then(|| view! { <p class="hint">"Unchanged: " {same.join(", ")} "."</p> })}
            {if is_admin {
                view! {
                    <div class="review">
                        <ReviewForm review upstream=upstream.clone() tool=tool.clone() digest=offered_digest.clone() decision="accept" noun/>
                        <ReviewForm review upstream tool digest=offered_digest decision="reject" noun/>
                    </div>
                }.into_any()
            } else {
                view! { <p class="hint">{format!("An admin can accept or reject this {noun}.")}</p> }.into_any()
            }}
        </article>
    }
}

/// A field of a definition as text: a description as it is, anything else as
/// pretty JSON; `—` when absent.
fn field_text(definition: &Value, field: &str) -> String {
    match definition.get(field) {
        None | Some(Value::Null) => "—".into(),
        Some(Value::String(s)) if field != "inputSchema" => s.clone(),
        Some(v) => serde_json::to_string_pretty(v).unwrap_or_default(),
    }
}

/// One side of a line diff: the old side shows removed lines, the new side
/// added ones, each with a blank where the other side has a line.
#[component]
fn DiffSide(lines: Vec<DiffLine>, old: bool) -> impl IntoView {
    view! {
        <pre class="diff-side" tabindex="0">
            {lines.into_iter().map(|line| match (line, old) {
                (DiffLine::Same(t), _) => view! { <span class="line"><Name text=t/></span> }.into_any(),
                (DiffLine::Removed(t), true) => view! {
                    <del class="line"><span class="visually-hidden">"removed: "</span><Name text=t/></del>
                }.into_any(),
                (DiffLine::Added(t), false) => view! {
                    <ins class="line"><span class="visually-hidden">"added: "</span><Name text=t/></ins>
                }.into_any(),
                _ => view! { <span class="line blank" aria-hidden="true"></span> }.into_any(),
            }).collect_view()}
        </pre>
    }
}

/// Accept or reject one offered definition (a plain form: works before hydration).
#[component]
fn ReviewForm(
    review: ServerAction<ReviewToolChange>,
    upstream: String,
    tool: String,
    digest: String,
    decision: &'static str,
    /// What is decided on: `change` or (a new tool) `tool`.
    noun: &'static str,
) -> impl IntoView {
    let (class, verb) = if decision == "accept" { ("primary", "Accept") } else { ("danger", "Reject") };
    let label = format!("{verb} {noun}");
    view! {
        <ActionForm action=review attr:class="review-form">
            <input type="hidden" name="upstream" value=upstream/>
            <input type="hidden" name="tool" value=tool/>
            <input type="hidden" name="digest" value=digest/>
            <input type="hidden" name="decision" value=decision/>
            <button type="submit" class=class>{label}</button>
        </ActionForm>
    }
}

/// Who accepted or rejected which change, and when.
#[component]
fn Reviews(reviews: Vec<ChangeEntry>, now_ms: i64) -> impl IntoView {
    view! {
        <section aria-labelledby="reviews-h">
            <h2 id="reviews-h">"Reviewed changes"</h2>
            <ul class="timeline reviews">
                {reviews.into_iter().map(|c| view! {
                    <li data-action=c.action.clone()>
                        <When ms=c.at_ms now_ms/> " · " <Name text=c.actor/> " "
                        {if c.action == "accept" { "accepted" } else { "rejected" }} " the change to "
                        <code><Name text=c.target/></code>
                    </li>
                }).collect_view()}
            </ul>
        </section>
    }
}
