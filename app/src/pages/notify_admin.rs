//! The notifications part of `/upstreams` (admins): every target with its
//! delivery status and actions (Send a test; Edit, Disable or Enable and
//! Remove for one added here), and the form that adds or edits one (Edit
//! fills it: `?target=<name>#notify-form`). Forms post without JavaScript too.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use gatehouse_model::routes;

use crate::components::name::Name;
use crate::components::when::When;
use crate::pages::upstream_admin::{Field, Picked};
use crate::server_fns::{NotifyAction, NotifyDraft, NotifyList, NotifyTargetInfo, SaveNotify};

/// The target form's fields that say their own refusal beside them.
pub const NOTIFY_FIELDS: &[&str] = &["name", "format", "url", "secret", "agents", "tools", "timeout"];

/// The name in the query (`?target=<name>`), tracked: Edit is a link on this page.
pub fn editing_target() -> impl Fn() -> Option<String> + Copy {
    let query = use_query_map();
    move || query.with(|q| q.get("target"))
}

/// Every target, its status and (here) its actions; said when there are none.
#[component]
pub fn NotifyTable(list: NotifyList, act: ServerAction<NotifyAction>) -> impl IntoView {
    let now_ms = list.now_ms;
    if list.targets.is_empty() {
        return view! {
            <p class="empty">"No notification target yet: add one below to hear of calls that wait for a person (Slack, ntfy, or a signed JSON webhook)."</p>
        }
        .into_any();
    }
    view! {
        <div class="table-wrap" tabindex="0" role="region" aria-label="Notification targets (scrolls sideways)">
        <table class="responsive" aria-label="Notification targets">
            <thead><tr>
                <th scope="col">"Name"</th><th scope="col">"Sends to"</th>
                <th scope="col">"Messages"</th><th scope="col">"Last failure"</th>
                <th scope="col">"Manage"</th>
            </tr></thead>
            <tbody>
            {list.targets.into_iter().map(|t| {
                let row = t.name.clone();
                let last_error = t.last_error.clone().unwrap_or_default();
                view! {
                <tr data-notify=row>
                    <td data-label="Name">
                        <Name text=t.name.clone() joints=true/>
                        {(!t.enabled).then(|| view! { " " <span class="status revoked">"disabled"</span> })}
                    </td>
                    <td data-label="Sends to" class="detail-cell">
                        <code>{t.url.clone()}</code>" "<span class="meta">{t.format.clone()}</span>
                        {filters(&t).map(|f| view! { <br/><span class="meta">{f}</span> })}
                    </td>
                    <td data-label="Messages" data-testid="messages">
                        {format!("{} delivered, {} failed, {} dropped", t.delivered, t.failed, t.dropped)}
                        {t.last_success_ms.map(|ms| view! { <br/><span class="meta">"last delivered "<When ms=ms now_ms=now_ms/></span> })}
                    </td>
                    <td data-label="Last failure" class="error-cell">
                        {t.last_failure_ms.map(|ms| view! { <When ms=ms now_ms=now_ms/> " " })}
                        <Name text=last_error/>
                    </td>
                    <td data-label="Manage" data-testid="manage"><NotifyActions target=t act/></td>
                </tr>
            }}).collect_view()}
            </tbody>
        </table>
        </div>
    }
    .into_any()
}

/// "only claude*; only files__*": a target's filters, if it has any.
fn filters(t: &NotifyTargetInfo) -> Option<String> {
    let said: Vec<String> = [("agents", &t.agents), ("tools", &t.tools)]
        .into_iter()
        .filter(|(_, p)| !p.is_empty())
        .map(|(what, p)| format!("{what} {}", p.join(", ")))
        .collect();
    (!said.is_empty()).then(|| format!("only {}", said.join("; ")))
}

/// A target's actions: Send a test for every one; Edit, Disable or Enable
/// and Remove for one added here.
#[component]
fn NotifyActions(target: NotifyTargetInfo, act: ServerAction<NotifyAction>) -> impl IntoView {
    let button = move |name: String, action: &'static str, label: &'static str, class: &'static str| {
        view! {
            <ActionForm action=act attr:class="row-form">
                <input type="hidden" name="name" value=name.clone()/>
                <input type="hidden" name="action" value=action/>
                <button type="submit" class=class aria-label=format!("{label} {name}")>{label}</button>
            </ActionForm>
        }
    };
    let name = target.name.clone();
    let test = button(name.clone(), "test", "Send a test", "quiet");
    if target.from_file {
        return view! {
            <span class="meta">"gatehouse.toml"</span>
            <div class="actions">{test}</div>
        }
        .into_any();
    }
    let (toggle, label) = if target.enabled { ("disable", "Disable") } else { ("enable", "Enable") };
    view! {
        <span class="meta">"added here"</span>
        <div class="actions">
            {test}
            <a href=routes::edit_notify(&name) class="button-link" aria-label=format!("Edit {name}")>"Edit"</a>
            {button(name.clone(), toggle, label, "quiet")}
            {button(name.clone(), "remove", "Remove", "danger quiet")}
        </div>
    }
    .into_any()
}

/// Targets added here that do not run (the config file took their name), with Remove.
#[component]
pub fn IdleTargets(idle: Vec<String>, act: ServerAction<NotifyAction>) -> impl IntoView {
    (!idle.is_empty()).then(|| {
        view! {
            <ul class="plain">
                {idle.into_iter().map(|name| {
                    let label = format!("Remove the {name} added here");
                    let (row, value) = (name.clone(), name.clone());
                    view! {
                    <li data-idle-target=row>
                        <strong>{name}</strong>" (added here): gatehouse.toml now has a target of this name, and the file's runs. "
                        <ActionForm action=act attr:class="row-form">
                            <input type="hidden" name="name" value=value/>
                            <input type="hidden" name="action" value="remove"/>
                            <button type="submit" class="danger quiet" aria-label=label>"Remove"</button>
                        </ActionForm>
                    </li>
                }}).collect_view()}
            </ul>
        }
    })
}

/// The form that adds a target, or edits the stored one named `editing`.
/// Its values are attributes: a re-read rebuilds it in place and keeps what
/// the person typed (the page makes a new form when the target changes).
#[component]
pub fn NotifyForm(
    list: NotifyList,
    save: ServerAction<SaveNotify>,
    editing: Option<String>,
    picked: Picked,
) -> impl IntoView {
    let editing: Option<NotifyTargetInfo> =
        editing.and_then(|name| list.targets.iter().find(|t| t.name == name && !t.from_file).cloned());
    let draft = editing.as_ref().map(NotifyDraft::of).unwrap_or_default();
    let is_editing = editing.is_some();
    let error = move |key: &'static str| {
        let error = crate::outcome::field_error(save, key);
        move || error().map(|e| view! { <span role="alert" class="error field-error">{e}</span> })
    };
    let heading = match &editing {
        Some(t) => format!("Edit {}", t.name),
        None => "Add a notification target".to_string(),
    };
    let format = draft.format.clone().unwrap_or_else(|| "slack".into());
    let (url_hint, url_placeholder) = match &editing {
        Some(t) => ("Leave blank to keep the URL set before (only its host is shown).", t.url.clone()),
        None => (
            "Where to POST. A Slack webhook's URL is its secret: it is never shown again.",
            "https://hooks.slack.com/services/…".into(),
        ),
    };
    let secret_hint = match &editing {
        Some(t) if t.secret_set => "Set. Leave blank to keep it; never shown again.",
        _ => {
            "JSON: the signing key (at least 16 characters). ntfy: an access token, if the topic needs one. Slack: none."
        }
    };
    view! {
        <section id="notify-form" class="panel" aria-labelledby="notify-form-h">
            <h2 id="notify-form-h">{heading}</h2>
            <ActionForm action=save attr:class="upstream-form profile-form" attr:aria-label="Notification target">
                {(!is_editing).then(|| view! { <input type="hidden" name="draft[adding]" value="1"/> })}
                <Field id="notify-name" label="Name" hint="Letters, digits, '-', '_' or '.'. Shown here and in /metrics." error=error("name")>
                    <input id="notify-name" name="draft[name]" autocomplete="off" placeholder="ops-slack"
                        aria-describedby="notify-name-hint" value=draft.name.clone() readonly=is_editing/>
                </Field>
                <Field id="notify-format" label="Kind" hint="" error=error("format")>
                    <select id="notify-format" name="draft[format]" on:change=move |ev| picked.pick("format", event_target_value(&ev))>
                        <option value="slack" selected=picked.is("format", &format, "slack")>"Slack incoming webhook"</option>
                        <option value="ntfy" selected=picked.is("format", &format, "ntfy")>"ntfy topic"</option>
                        <option value="json" selected=picked.is("format", &format, "json")>"JSON webhook (signed)"</option>
                    </select>
                </Field>
                <Field id="notify-url" label="URL" hint=url_hint error=error("url")>
                    <input id="notify-url" name="draft[url]" type="url" autocomplete="off" aria-describedby="notify-url-hint"
                        placeholder=url_placeholder value=draft.url.clone().unwrap_or_default()/>
                </Field>
                <Field id="notify-secret" label="Secret" hint=secret_hint error=error("secret")>
                    <input id="notify-secret" name="draft[secret]" type="password" autocomplete="new-password"
                        aria-describedby="notify-secret-hint" value=""/>
                </Field>
                <Field id="notify-agents" label="Only these agents" hint="Optional: owner/agent names or patterns (claude*), separated by commas." error=error("agents")>
                    <input id="notify-agents" name="draft[agents]" autocomplete="off" placeholder="every agent"
                        aria-describedby="notify-agents-hint" value=draft.agents.clone().unwrap_or_default()/>
                </Field>
                <Field id="notify-tools" label="Only these tools" hint="Optional: tool names or patterns (files__*), separated by commas." error=error("tools")>
                    <input id="notify-tools" name="draft[tools]" autocomplete="off" placeholder="every tool"
                        aria-describedby="notify-tools-hint" value=draft.tools.clone().unwrap_or_default()/>
                </Field>
                <Field id="notify-timeout" label="Timeout" hint="Longest wait for one attempt, e.g. 5s. Blank: 10s." error=error("timeout")>
                    <input id="notify-timeout" name="draft[timeout]" autocomplete="off" placeholder="10s"
                        aria-describedby="notify-timeout-hint" value=draft.timeout.clone().unwrap_or_default()/>
                </Field>
                <button type="submit" class="primary">{if is_editing { "Save target" } else { "Add target" }}</button>
                {is_editing.then(|| view! { <a href=routes::UPSTREAMS class="button-link quiet">"Cancel"</a> })}
            </ActionForm>
        </section>
    }
}
