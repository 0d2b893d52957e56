//! `/policies`: every rule — the config file's (read-only) and the
//! database's (admins add, edit and remove them) — who changed them, and
//! while a rule is being edited, the tools it matches and what the gate will
//! then do with each. The form's fields live in the query string, so the
//! preview works before hydration (the Preview button) and as you type after.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use gatehouse_model::{Action, LiveEvent, Rule, Source, routes};

use crate::components::header::Header;
use crate::components::live::{LiveStatus, refetch_on, use_changes};
use crate::components::name::Name;
use crate::components::when::When;
use crate::outcome::{Outcome, OutcomeLine, field_line, fields_named, on_success, report, report_fields};
use crate::server_fns::{
    PoliciesView, PromoteRule, REPLAY_DAYS, RemoveRule, Replay, RuleDraft, SaveRule, condition_warnings, list_policies,
    preview_rule, replay_rule,
};

/// The rule form's fields that say their own refusal beside them.
const RULE_FIELDS: &[&str] =
    &["pattern", "name", "agents", "owners", "upstreams", "when", "rate", "rate_per", "keep_arguments"];

/// `/policies`
#[component]
pub fn PoliciesPage() -> impl IntoView {
    let policies = crate::json::resource(|| (), |_| list_policies());
    let save = ServerAction::<SaveRule>::new();
    let remove = ServerAction::<RemoveRule>::new();
    let promote = ServerAction::<PromoteRule>::new();
    // A saved or removed rule shows at once (and on other pages' streams, as
    // the tools it hides come and go); a refused one leaves the form as typed.
    let outcome: Outcome = RwSignal::new(None);
    on_success(save, move || policies.refetch());
    on_success(remove, move || policies.refetch());
    on_success(promote, move || policies.refetch());
    report_fields(outcome, save, "Rule saved.", RULE_FIELDS);
    report(outcome, remove, "Rule removed.");
    report(outcome, promote, "The shadow rule now decides.");
    let live = use_changes([refetch_on(&[LiveEvent::UpstreamsChanged], policies)]);
    view! {
        <Title text="Policies — Gatehouse"/>
        <Header/>
        <main class="page">
            <h1>"Policies"</h1>
            <p class="hint">
                "A rule names a tool exactly, by prefix (" <code>"fs_*"</code> ") or all of them (" <code>"*"</code>
                "), and may hold only for some agents, owners or upstreams, or when a condition on the call is true ("
                <code>"args.branch == \"main\""</code> "). Among the rules that match a call the strictest wins; with none, the tool's own annotations decide."
            </p>
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || policies.get().map(|result| match result {
                    Ok(view) => view! { <Policies view save remove promote outcome/> }.into_any(),
                    Err(e) => view! { <p role="alert" class="error">"Could not load: " {crate::outcome::message(&e)}</p> }.into_any(),
                })}
            </Suspense>
            <LiveStatus state=live/>
        </main>
    }
}

#[component]
fn Policies(
    view: PoliciesView,
    save: ServerAction<SaveRule>,
    remove: ServerAction<RemoveRule>,
    promote: ServerAction<PromoteRule>,
    outcome: Outcome,
) -> impl IntoView {
    let PoliciesView { now_ms, is_admin, rules, changes, unmatched, shadow_counts, decided } = view;
    view! {
        {is_admin.then(|| view! { <Editor save/> })}
        <OutcomeLine outcome/>
        <section aria-labelledby="rules-h">
            <h2 id="rules-h">"Rules"</h2>
            {if rules.is_empty() {
                view! { <p class="empty">"No rule yet: every tool's annotations decide. Add a rule above to allow, gate or block tools by name."</p> }.into_any()
            } else {
                view! {
                    <div class="table-wrap" tabindex="0" role="region" aria-label="Rules (scrolls sideways)">
                    <table class="responsive rules" aria-label="Rules">
                        <thead><tr>
                            <th scope="col">"Pattern"</th><th scope="col">"Action"</th><th scope="col">"Human only"</th>
                            <th scope="col">"Source"</th><th scope="col"><span class="visually-hidden">"Actions"</span></th>
                        </tr></thead>
                        <tbody>
                        {rules.into_iter().map(|r| {
                            let unmatched = unmatched.iter().any(|u| u == r.pattern.as_str());
                            let shadow_count = shadow_counts.iter().find(|(name, _)| *name == r.name).map(|(_, n)| *n);
                            let decided = decided.iter().find(|(name, _)| *name == r.name).map_or(0, |(_, n)| *n);
                            view! { <RuleRow rule=r is_admin unmatched shadow_count decided remove promote/> }
                        }).collect_view()}
                        </tbody>
                    </table>
                    </div>
                }.into_any()
            }}
            {(!is_admin).then(|| view! { <p class="hint">"Only admins change rules."</p> })}
        </section>
        <super::profiles::ProfilesSection/>
        <section aria-labelledby="changes-h">
            <h2 id="changes-h">"Recent changes"</h2>
            {if changes.is_empty() {
                view! { <p class="empty">"No rule has been changed here yet."</p> }.into_any()
            } else {
                view! {
                    <ul class="changes" aria-label="Recent rule changes">
                        {changes.into_iter().map(|c| view! {
                            <li>
                                <When ms=c.at_ms now_ms/> " " <Name text=crate::words::actor(&c.actor, &[])/>
                                " " {c.action} " " <code><Name text=c.target/></code>
                                {c.detail.map(|d| view! { " → " {d} })}
                            </li>
                        }).collect_view()}
                    </ul>
                }.into_any()
            }}
        </section>
    }
}

#[component]
fn RuleRow(
    rule: Rule,
    is_admin: bool,
    unmatched: bool,
    shadow_count: Option<i64>,
    /// Calls it decided in the last [`REPLAY_DAYS`] days.
    decided: i64,
    remove: ServerAction<RemoveRule>,
    promote: ServerAction<PromoteRule>,
) -> impl IntoView {
    let shadow = rule.shadow;
    let from_config = rule.source == Source::Config;
    let edit = edit_link(&rule);
    let name = rule.name.clone();
    let promote_name = rule.name.clone();
    let named = rule.name != rule.pattern.as_str();
    let mut only: Vec<String> = [("agents", &rule.agents), ("owners", &rule.owners), ("upstreams", &rule.upstreams)]
        .into_iter()
        .filter(|(_, list)| !list.is_empty())
        .map(|(label, list)| format!("{label}: {}", list.join(", ")))
        .collect();
    if let Some(when) = &rule.when {
        only.push(format!("when {when}"));
    }
    if let Some(rate) = &rule.rate {
        only.push(format!("at most {rate} per {}", rule.rate_per.as_str()));
    }
    if let Some(keep) = rule.keep_arguments {
        only.push(format!("keeps arguments: {}", keep.as_str()));
    }
    view! {
        <tr data-pattern=rule.pattern.to_string() data-name=rule.name.clone() data-source=rule.source.as_str()>
            <td data-label="Pattern">
                {named.then(|| view! { <strong class="rule-name"><Name text=rule.name.clone()/></strong> " " })}
                <code><Name text=rule.pattern.to_string() joints=true/></code>
                {(!only.is_empty()).then(|| view! {
                    <ul class="rule-scope" aria-label="Only calls">
                        {only.into_iter().map(|o| view! { <li><code><Name text=o/></code></li> }).collect_view()}
                    </ul>
                })}
                {unmatched.then(|| view! {
                    <span class="hint unmatched" data-unmatched="true">
                        " matches no tool right now (upstream tools are named with their upstream's prefix)"
                    </span>
                })}
            </td>
            <td data-label="Action"><span class=format!("action {}", rule.action)>{rule.action.label()}</span>
                {shadow.then(|| view! {
                    <div class="shadow-rule" data-shadow-count=shadow_count.unwrap_or(0).to_string()>
                        <strong>"Shadow: decides nothing."</strong>
                        {format!(" Would have changed {} call{} since it was saved.", shadow_count.unwrap_or(0), if shadow_count == Some(1) { "" } else { "s" })}
                        " " <a href=format!("{}?decider={}", routes::HISTORY, encode(&gatehouse_model::Actor::Shadow(rule.name.clone()).to_string()))>"See them"</a>
                    </div>
                })}
                {(!shadow).then(|| view! {
                    <div class="decided hint" data-decided=decided.to_string()>
                        {match decided {
                            0 => format!("Decided no call in {REPLAY_DAYS} days."),
                            1 => format!("Decided 1 call in {REPLAY_DAYS} days."),
                            n => format!("Decided {n} calls in {REPLAY_DAYS} days."),
                        }}
                        {(decided > 0).then(|| view! {
                            " " <a href=format!("{}?decider={}", routes::HISTORY, encode(&gatehouse_model::Actor::Rule(rule.name.clone()).to_string()))>"See them"</a>
                        })}
                    </div>
                })}
            </td>
            <td data-label="Human only">{if rule.human_only { "yes" } else { "no" }}</td>
            <td data-label="Source">{if from_config { "config file (read-only)" } else { "database" }}</td>
            <td data-label="Actions" class="actions">
                {(is_admin && !from_config && shadow).then(|| view! {
                    <ActionForm action=promote attr:class="promote-form">
                        <input type="hidden" name="name" value=promote_name/>
                        <button type="submit" class="primary">"Enforce"</button>
                    </ActionForm>
                })}
                {(is_admin && !from_config).then(|| view! {
                    <a href=edit class="button-link">"Edit"</a>
                    <ActionForm action=remove attr:class="revoke-form">
                        <input type="hidden" name="name" value=name/>
                        <button type="submit" class="danger quiet">"Remove"</button>
                    </ActionForm>
                })}
            </td>
        </tr>
    }
}

/// Percent-encodes a pattern for the query string.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The editor's fields, as they travel in the query string and the forms.
const FIELDS: [&str; 12] = [
    "name",
    "pattern",
    "action",
    "human_only",
    "agents",
    "owners",
    "upstreams",
    "when",
    "rate",
    "rate_per",
    "shadow",
    "keep_arguments",
];

/// The link that opens `rule` in the editor.
fn edit_link(rule: &Rule) -> String {
    let mut link = format!(
        "{}?name={}&pattern={}&action={}",
        routes::POLICIES,
        encode(&rule.name),
        encode(rule.pattern.as_str()),
        rule.action.as_str()
    );
    if rule.human_only {
        link.push_str("&human_only=on");
    }
    if rule.shadow {
        link.push_str("&shadow=on");
    }
    for (key, list) in [("agents", &rule.agents), ("owners", &rule.owners), ("upstreams", &rule.upstreams)] {
        if !list.is_empty() {
            link.push_str(&format!("&{key}={}", encode(&list.join(", "))));
        }
    }
    if let Some(when) = &rule.when {
        link.push_str(&format!("&when={}", encode(when)));
    }
    if let Some(rate) = rule.rate {
        link.push_str(&format!("&rate={}&rate_per={}", encode(&rate.to_string()), rule.rate_per.as_str()));
    }
    if let Some(keep) = rule.keep_arguments {
        link.push_str(&format!("&keep_arguments={}", keep.as_str()));
    }
    link
}

/// The rule being edited, the preview of what it would do, and Save.
#[component]
fn Editor(save: ServerAction<SaveRule>) -> impl IntoView {
    let query = use_query_map();
    let initial = |key: &str| query.with_untracked(|q| q.get(key)).unwrap_or_default();
    // One signal per field, in FIELDS order.
    let fields: [RwSignal<String>; 12] = std::array::from_fn(|i| RwSignal::new(initial(FIELDS[i])));
    let [name, pattern, action, human_only, agents, owners, upstreams, when, rate, rate_per, shadow, keep_arguments] =
        fields;
    if Action::parse(&action.get_untracked()).is_none() {
        action.set("require_approval".into());
    }
    // A link to another rule's Edit (client-side navigation) refills the form.
    Effect::new(move |_| {
        let q = query.get();
        if q.get("pattern").is_some() {
            for (signal, key) in fields.iter().zip(FIELDS) {
                signal.set(q.get(key).unwrap_or_default());
            }
            if Action::parse(&action.get_untracked()).is_none() {
                action.set("require_approval".into());
            }
        }
    });
    // The draft as the fields hold it; none until a pattern is typed.
    let draft = move || {
        let [
            name,
            pattern,
            action,
            human_only,
            agents,
            owners,
            upstreams,
            when,
            rate,
            rate_per,
            shadow,
            keep_arguments,
        ] = fields.map(|f| f.get());
        if pattern.trim().is_empty() {
            return None;
        }
        let some = |s: String| Some(s).filter(|s| !s.trim().is_empty());
        Some(RuleDraft {
            name: some(name),
            pattern,
            action,
            human_only: some(human_only),
            agents: some(agents),
            owners: some(owners),
            upstreams: some(upstreams),
            when: some(when),
            rate: some(rate),
            rate_per: some(rate_per),
            shadow: some(shadow),
            keep_arguments: some(keep_arguments),
        })
    };
    let preview = crate::json::resource(draft, |draft| async move {
        match draft {
            Some(draft) => preview_rule(draft).await.map(Some),
            None => Ok(None),
        }
    });
    // The same draft tried on the record.
    let replay = crate::json::resource(draft, |draft| async move {
        match draft {
            Some(draft) => replay_rule(draft).await,
            None => Ok(None),
        }
    });
    // A text test on a path or URL, said beside the condition as it is
    // written (and on the server's page after Preview, before hydration).
    let warnings = crate::json::resource(
        move || when.get(),
        |when| async move {
            if when.trim().is_empty() {
                return Ok(Vec::new());
            }
            condition_warnings(when).await
        },
    );
    // Every field the draft gets wrong is marked beside it, once: as the
    // preview finds it while the person types, else as Save was refused (a
    // refusal of an older draft goes as soon as the draft changes).
    Effect::new(move |first: Option<()>| {
        fields.iter().for_each(|f| f.track());
        if first.is_some() {
            save.value().set(None);
        }
    });
    let save_error = move |field: &'static str| {
        let saved = crate::outcome::field_error(save, field);
        move || {
            let previewed =
                preview.get().and_then(|r| r.err()).and_then(|e| field_line(&crate::outcome::message(&e), field));
            previewed.or_else(saved)
        }
    };
    let text = move |label: &'static str,
                     key: &'static str,
                     signal: RwSignal<String>,
                     placeholder: &'static str,
                     hint: &'static str| {
        let id = format!("rule-{key}");
        let error = save_error(key);
        view! {
            <label>{label}
                <input id=id name=key autocomplete="off" placeholder=placeholder
                    value=signal.get_untracked() prop:value=signal on:input=move |e| signal.set(event_target_value(&e))/>
                {(!hint.is_empty()).then(|| view! { <span class="hint">{hint}</span> })}
                <Transition fallback=|| ()>
                    {move || error().map(|e| view! { <span role="alert" class="error field-error" data-field=key>{e}</span> })}
                </Transition>
            </label>
        }
    };
    let when_error = save_error("when");
    view! {
        <section aria-labelledby="edit-h" class="panel">
            <h2 id="edit-h">"Add or edit a rule"</h2>
            <form method="get" action=routes::POLICIES class="rule-form" aria-label="Rule">
                {text("Pattern", "pattern", pattern, "fs_* or a tool name", "")}
                <label>"Action"
                    <select name="action" on:change=move |e| action.set(event_target_value(&e))>
                        {Action::ALL.iter().map(|a| {
                            let value = a.as_str();
                            view! { <option value=value selected=move || action.get() == value>{a.label()}</option> }
                        }).collect_view()}
                    </select>
                </label>
                <label class="check">
                    <input type="checkbox" name="human_only" value="on" checked=!human_only.get_untracked().is_empty()
                        prop:checked=move || !human_only.get().is_empty()
                        on:change=move |e| human_only.set(if event_target_checked(&e) { "on".into() } else { String::new() })/>
                    "Human only: never a model's or a client form's decision"
                </label>
                <label class="check">
                    <input type="checkbox" name="shadow" value="on" checked=!shadow.get_untracked().is_empty()
                        prop:checked=move || !shadow.get().is_empty()
                        on:change=move |e| shadow.set(if event_target_checked(&e) { "on".into() } else { String::new() })/>
                    "Shadow: decide nothing yet; record each call it would have changed"
                </label>
                <details class="conditions" open=!(agents.get_untracked().is_empty() && owners.get_untracked().is_empty()
                    && upstreams.get_untracked().is_empty() && when.get_untracked().is_empty() && name.get_untracked().is_empty()
                    && rate.get_untracked().is_empty() && keep_arguments.get_untracked().is_empty())>
                    <summary>"Only some calls: agents, owners, upstreams, a condition, a rate limit; kept arguments"</summary>
                    {text("Name", "name", name, "default: the pattern", "A rule of the same name is replaced.")}
                    {text("Agents", "agents", agents, "alice/cursor, */claude-*", "Comma-separated owner/agent; empty: every agent. In an allow rule, a name without an owner covers only agents an admin minted, or those of the owners below.")}
                    {text("Owners", "owners", owners, "alice", "Comma-separated user names; empty: every owner.")}
                    {text("Upstreams", "upstreams", upstreams, "git", "Comma-separated; empty: every tool.")}
                    <label for="rule-when">"When (CEL)"
                        <textarea id="rule-when" name="when" rows="2" autocomplete="off" spellcheck="false"
                            placeholder="args.branch == \"main\""
                            prop:value=when on:input=move |e| when.set(event_target_value(&e))>{when.get_untracked()}</textarea>
                        <span class="hint">"Over " <code>"tool"</code> ", " <code>"upstream"</code> ", " <code>"agent"</code> ", "
                            <code>"owner"</code> ", " <code>"thread"</code> ", " <code>"args"</code> ", " <code>"annotations"</code>
                            " and " <code>"now"</code> ". A condition that cannot be evaluated blocks the call."</span>
                        <Transition fallback=|| ()>
                            {move || when_error().map(|e| view! {
                                <span role="alert" class="error field-error" data-testid="when-error">{e.clone()}</span>
                                <Position source=when.get_untracked() said=e/>
                            })}
                        </Transition>
                        <Transition fallback=|| ()>
                            {move || warnings.get().and_then(Result::ok).map(|warnings| warnings.into_iter().map(|w| view! {
                                <span class="field-warning" data-testid="when-warning">{with_code(&w)}</span>
                            }).collect_view())}
                        </Transition>
                    </label>
                    {text("Rate limit", "rate", rate, "10/min", "At most this many matching calls (units s, min, hour, day), across replicas.")}
                    {text("Counted per", "rate_per", rate_per, "agent", "agent (default), owner or tool.")}
                    {text("Keep arguments", "keep_arguments", keep_arguments, "as configured",
                        "gated, all or none: whose arguments the record keeps for the calls this rule decides; empty: keep_arguments as configured.")}
                </details>
                <button type="submit" class="quiet">"Preview"</button>
            </form>
            <Transition fallback=|| ()>
                {move || preview.get().map(|result| match result {
                    Ok(None) => view! { <p class="hint">"Type a pattern to see the tools it matches."</p> }.into_any(),
                    Ok(Some(previews)) => view! { <Preview previews/> }.into_any(),
                    // A field's mistake is said beside the field.
                    Err(e) if fields_named(&crate::outcome::message(&e), RULE_FIELDS) > 0 => ().into_any(),
                    Err(e) => view! { <p role="alert" class="error" data-testid="preview-error">{crate::outcome::message(&e)}</p> }.into_any(),
                })}
            </Transition>
            <Transition fallback=|| ()>
                {move || replay.get().and_then(Result::ok).flatten().map(|replay| view! { <ReplayView replay/> })}
            </Transition>
            <ActionForm action=save attr:class="save-form">
                // Attributes, not properties: the server renders them, so the
                // form works before hydration too.
                {fields.iter().zip(FIELDS).map(|(signal, key)| {
                    let signal = *signal;
                    view! { <input type="hidden" name=format!("draft[{key}]") value=move || signal.get()/> }
                }).collect_view()}
                <button type="submit" class="primary" disabled=move || pattern.get().trim().is_empty()>"Save rule"</button>
            </ActionForm>
        </section>
    }
}

/// Where in a condition its mistake is: the line it is on, with a mark
/// under the column the message names ("Line 2, column 7: …"). Nothing when
/// the message names no position.
#[component]
fn Position(source: String, said: String) -> impl IntoView {
    let at = said.strip_prefix("Line ").and_then(|rest| {
        let (line, rest) = rest.split_once(", column ")?;
        let column = rest.split(':').next()?;
        Some((line.parse::<usize>().ok()?, column.parse::<usize>().ok()?))
    });
    at.and_then(|(line, column)| {
        let text = source.lines().nth(line.checked_sub(1)?)?.to_string();
        // The mark sits under the column's character (1-based), or just past the end.
        let pad = " ".repeat(column.saturating_sub(1).min(text.chars().count()));
        Some(view! {
            <pre class="position" data-testid="when-position" aria-hidden="true">{text}"\n"{pad}"^"</pre>
        })
    })
}

/// What the rule being written would have done to the calls of the last days.
#[component]
fn ReplayView(replay: Replay) -> impl IntoView {
    let Replay { now_ms, days, read, same, changes, changed, untried } = replay;
    let calls = |n: usize| crate::words::count(n as u64, "call");
    let what = |did: Action, would: Action, n: usize| {
        let done = match did {
            Action::Allow => "ran",
            Action::RequireApproval => "waited for a person",
            Action::Block => "were refused",
        };
        let then = match would {
            Action::Allow => "let through",
            Action::RequireApproval => "paused",
            Action::Block => "blocked",
        };
        format!("would have {then} {} that {done}", calls(n))
    };
    let summary: Vec<String> = changes.iter().map(|(did, would, n)| what(*did, *would, *n)).collect();
    view! {
        <div class="replay" data-testid="replay" data-same=same.to_string() data-untried=untried.to_string()>
            <h3>{format!("On the last {days} days")}</h3>
            <p>
                {if summary.is_empty() {
                    format!("It would have changed none of the {} you may see.", calls(read))
                } else {
                    format!("Of the {} you may see, it {}.", calls(read), summary.join(", "))
                }}
                {(same > 0).then(|| format!(" {} it reaches would go as they do now.", calls(same)))}
                {(untried > 0).then(|| view! {
                    " " <span data-testid="replay-untried">{format!(
                        "{} it reaches could not be tried (its condition needs their arguments, which the record did not keep whole, or the tool is gone).",
                        calls(untried))}</span>
                })}
            </p>
            {(!changed.is_empty()).then(|| view! {
                <ul class="changes" aria-label="Calls it would change">
                    {changed.into_iter().map(|c| {
                        let filter = gatehouse_model::HistoryFilter { tool: c.tool.clone(), agent: c.agent.clone(), ..Default::default() };
                        let link = format!("{}?{}", routes::HISTORY, filter.to_query());
                        view! {
                            <li data-execution=c.execution_id.clone()>
                                <When ms=c.at_ms now_ms/> " " <code><Name text=c.tool.clone()/></code> " by "
                                <Name text=match &c.owner { Some(o) => format!("{o}/{}", c.agent), None => c.agent.clone() }/>
                                ": " {c.did.label()} " → " <strong>{c.would.label()}</strong> " "
                                <a href=link>"History"</a>
                            </li>
                        }
                    }).collect_view()}
                </ul>
            })}
        </div>
    }
}

/// `text` with its `backquoted` parts as code.
fn with_code(text: &str) -> impl IntoView + use<> {
    text.split('`')
        .enumerate()
        .map(|(i, part)| {
            let part = part.to_string();
            if i % 2 == 1 { view! { <code>{part}</code> }.into_any() } else { part.into_any() }
        })
        .collect_view()
}

#[component]
fn Preview(previews: Vec<crate::server_fns::RulePreview>) -> impl IntoView {
    if previews.is_empty() {
        return view! { <p class="hint" data-testid="preview-empty">"No exposed tool matches this pattern (yet)."</p> }
            .into_any();
    }
    view! {
        <div class="table-wrap" tabindex="0" role="region" aria-label="Preview">
        <table class="responsive preview" aria-label="Preview">
            <thead><tr>
                <th scope="col">"Tool"</th><th scope="col">"Upstream"</th><th scope="col">"Now"</th><th scope="col">"With this rule"</th>
            </tr></thead>
            <tbody>
            {previews.into_iter().map(|p| {
                let changes = if p.shadow { p.now.action != p.stays } else { p.now.action != p.then || p.now.human_only != p.then_human_only };
                view! {
                <tr data-tool=p.now.tool.name.clone() class:changes=changes>
                    <td data-label="Tool"><code><Name text=p.now.tool.name.clone() joints=true/></code></td>
                    <td data-label="Upstream">{p.now.tool.upstream.clone().unwrap_or_else(|| "gatehouse".into())}</td>
                    <td data-label="Now"><span class=format!("action {}", p.now.action)>{p.now.action.label()}</span>
                        <div class="meta">{p.now.basis.describe()}</div></td>
                    <td data-label="With this rule" data-action=p.then.as_str() data-shadow=p.shadow.to_string()>
                        {if p.shadow {
                            // It decides nothing: the gate stays as it is.
                            view! {
                                <span class=format!("action {}", p.stays)>{p.stays.label()}</span>
                                <div class="meta">"shadow: decides nothing; would have: " {p.then.label()}
                                    " (each call where that differs is recorded)"</div>
                            }.into_any()
                        } else {
                            view! {
                                <span class=format!("action {}", p.then)>{p.then.label()}</span>
                                {p.then_human_only.then_some(" · human only")}
                                <div class="meta">{p.then_basis.describe()}</div>
                            }.into_any()
                        }}
                        {p.only.clone().map(|only| view! {
                            <div class="meta" data-testid="preview-only">
                                {only.when} ", otherwise "
                                <span class=format!("action {}", only.otherwise) data-otherwise=only.otherwise.as_str()>{only.otherwise.label()}</span>
                                " (" {only.otherwise_basis.describe()} ")"
                            </div>
                        })}</td>
                </tr>
            }}).collect_view()}
            </tbody>
        </table>
        </div>
    }
    .into_any()
}
