//! The admins' part of `/upstreams`: each upstream's actions (the config
//! file's may only be restarted here) and the form that adds or edits one
//! added on the console (Edit fills it: `?upstream=<name>#upstream-form`).
//! Forms post without JavaScript too.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use gatehouse_model::{UpstreamSpec, routes};

use crate::server_fns::{ManagedUpstreams, SaveUpstream, UpstreamAction, UpstreamDraft};

/// The upstream form's fields that say their own refusal beside them.
pub const UPSTREAM_FIELDS: &[&str] = &["name", "kind", "url", "command", "prefix", "headers", "secret_headers"];

/// An upstream's actions for an admin: Edit, Disable or Enable, Restart,
/// Remove for one added here; Restart for the file's.
#[component]
pub fn UpstreamActions(name: String, managed: ManagedUpstreams, act: ServerAction<UpstreamAction>) -> impl IntoView {
    // The file's name is the file's: only Restart reaches it here.
    let stored = managed.specs.iter().find(|s| s.name == name && !managed.from_file.contains(&s.name)).cloned();
    let button = move |name: String, action: &'static str, label: &'static str, class: &'static str| {
        view! {
            <ActionForm action=act attr:class="row-form">
                <input type="hidden" name="name" value=name.clone()/>
                <input type="hidden" name="action" value=action/>
                <button type="submit" class=class aria-label=format!("{label} {name}")>{label}</button>
            </ActionForm>
        }
    };
    match stored {
        Some(spec) => {
            let (toggle, label) = if spec.enabled { ("disable", "Disable") } else { ("enable", "Enable") };
            view! {
                <span class="meta">"added here"</span>
                <div class="actions">
                    <a href=routes::edit_upstream(&name) class="button-link" aria-label=format!("Edit {name}")>"Edit"</a>
                    {button(name.clone(), toggle, label, "quiet")}
                    {button(name.clone(), "restart", "Restart", "quiet")}
                    {button(name.clone(), "remove", "Remove", "danger quiet")}
                </div>
            }
            .into_any()
        }
        None => view! {
            <span class="meta">"gatehouse.toml"</span>
            <div class="actions">{button(name.clone(), "restart", "Restart", "quiet")}</div>
        }
        .into_any(),
    }
}

/// The name in the query (`?upstream=<name>`), tracked: Edit is a link, and
/// following it on the same page must fill the form again.
pub fn editing_upstream() -> impl Fn() -> Option<String> + Copy {
    let query = use_query_map();
    move || query.with(|q| q.get("upstream"))
}

/// Upstreams added here that do not run (their command left the file's
/// `stdio_commands`, or the file took their name), with Remove.
#[component]
pub fn NotRunning(managed: ManagedUpstreams, running: Vec<String>, act: ServerAction<UpstreamAction>) -> impl IntoView {
    let idle: Vec<UpstreamSpec> = managed.specs.into_iter().filter(|s| !running.contains(&s.name)).collect();
    (!idle.is_empty()).then(|| {
        view! {
            <section aria-labelledby="not-running-h">
                <h2 id="not-running-h">"Added here, not running"</h2>
                <ul class="plain">
                    {idle.into_iter().map(|spec| {
                        let why = if managed.from_file.contains(&spec.name) {
                            "gatehouse.toml now has an upstream of this name, and the file's runs."
                        } else {
                            "Its command is no longer one gatehouse.toml allows (stdio_commands)."
                        };
                        let name = spec.name.clone();
                        let label = format!("Remove {name}");
                        let value = name.clone();
                        let row = name.clone();
                        view! {
                            <li data-idle=row>
                                <strong>{name}</strong>": "{why}" "
                                <ActionForm action=act attr:class="row-form">
                                    <input type="hidden" name="name" value=value/>
                                    <input type="hidden" name="action" value="remove"/>
                                    <button type="submit" class="danger quiet" aria-label=label>"Remove"</button>
                                </ActionForm>
                            </li>
                        }
                    }).collect_view()}
                </ul>
            </section>
        }
    })
}

/// The form that adds an upstream, or edits the stored one named `editing`.
/// Its values are attributes: a re-read of the upstreams rebuilds it in
/// place and keeps what the person typed (the page makes a new form when
/// the upstream being edited changes).
#[component]
pub fn UpstreamForm(
    managed: ManagedUpstreams,
    save: ServerAction<SaveUpstream>,
    editing: Option<String>,
    picked: Picked,
) -> impl IntoView {
    let editing: Option<UpstreamSpec> = editing.and_then(|name| managed.specs.iter().find(|s| s.name == name).cloned());
    let draft = editing.as_ref().map(UpstreamDraft::of).unwrap_or_default();
    let is_editing = editing.is_some();
    let error = move |key: &'static str| {
        let error = crate::outcome::field_error(save, key);
        move || error().map(|e| view! { <span role="alert" class="error field-error">{e}</span> })
    };
    let heading = match &editing {
        Some(spec) => format!("Edit {}", spec.name),
        None => "Add an upstream".to_string(),
    };
    let kind = draft.kind.clone().unwrap_or_else(|| "http".into());
    let chosen = draft.command.clone().unwrap_or_default();
    let commands = managed.commands.clone();
    let command_hint = if commands.is_empty() {
        "For stdio. gatehouse.toml allows no command yet: a stdio command runs on this host, so its operator lists them under [stdio_commands]."
    } else {
        "For stdio: only the commands gatehouse.toml lists run, as listed."
    };
    view! {
        <section id="upstream-form" class="panel" aria-labelledby="upstream-form-h">
            <h2 id="upstream-form-h">{heading}</h2>
            <ActionForm action=save attr:class="upstream-form profile-form" attr:aria-label="Upstream">
                {(!is_editing).then(|| view! { <input type="hidden" name="draft[adding]" value="1"/> })}
                <Field id="upstream-name" label="Name" hint="Letters, digits, - or _. Its tools are listed as name__tool unless you set a prefix." error=error("name")>
                    <input id="upstream-name" name="draft[name]" autocomplete="off" placeholder="search"
                        aria-describedby="upstream-name-hint" value=draft.name.clone() readonly=is_editing/>
                </Field>
                <Field id="upstream-kind" label="Transport" hint="" error=error("kind")>
                    <select id="upstream-kind" name="draft[kind]" on:change=move |ev| picked.pick("kind", event_target_value(&ev))>
                        <option value="http" selected=picked.is("kind", &kind, "http")>"Streamable HTTP (a URL)"</option>
                        <option value="stdio" selected=picked.is("kind", &kind, "stdio")>"stdio (a command gatehouse.toml allows)"</option>
                    </select>
                </Field>
                <Field id="upstream-url" label="URL" hint="For Streamable HTTP." error=error("url")>
                    <input id="upstream-url" name="draft[url]" type="url" autocomplete="off" aria-describedby="upstream-url-hint"
                        placeholder="https://mcp.example.com/mcp" value=draft.url.clone().unwrap_or_default()/>
                </Field>
                <Field id="upstream-command" label="Command" hint=command_hint error=error("command")>
                    <select id="upstream-command" name="draft[command]" aria-describedby="upstream-command-hint"
                        on:change=move |ev| picked.pick("command", event_target_value(&ev))>
                        <option value="" selected=picked.is("command", &chosen, "")>"—"</option>
                        {commands.into_iter().map(|(key, line)| {
                            let selected = picked.is("command", &chosen, &key);
                            view! { <option value=key.clone() selected=selected>{format!("{key}: {line}")}</option> }
                        }).collect_view()}
                    </select>
                </Field>
                <Field id="upstream-prefix" label="Tool prefix" hint="Empty: the name and two underscores." error=error("prefix")>
                    <input id="upstream-prefix" name="draft[prefix]" autocomplete="off" placeholder="name__"
                        aria-describedby="upstream-prefix-hint" value=draft.prefix.clone().unwrap_or_default()/>
                </Field>
                <Field id="upstream-headers" label="Headers" hint="One per line, Name: value. Shown to admins." error=error("headers")>
                    <textarea id="upstream-headers" name="draft[headers]" rows="2" autocomplete="off"
                        aria-describedby="upstream-headers-hint" placeholder="X-Team: blue">{draft.headers.clone().unwrap_or_default()}</textarea>
                </Field>
                <Field id="upstream-secret-headers" label="Secret headers" hint="One per line, Name: value. Never shown again: a name left with no value keeps the value set before; delete the line to remove it." error=error("secret_headers")>
                    <textarea id="upstream-secret-headers" name="draft[secret_headers]" rows="2" autocomplete="off"
                        aria-describedby="upstream-secret-headers-hint" placeholder="Authorization: Bearer …">{draft.secret_headers.clone().unwrap_or_default()}</textarea>
                </Field>
                <div class="actions">
                    <button type="submit" class="primary">{if is_editing { "Save upstream" } else { "Add upstream" }}</button>
                    // Sent as the form's submitter: the same checks, then a
                    // connection that lists its tools; nothing is saved.
                    <button type="submit" name="draft[test]" value="1" class="quiet">"Test"</button>
                    {is_editing.then(|| view! { <a href=routes::UPSTREAMS class="button-link quiet">"Cancel"</a> })}
                </div>
            </ActionForm>
        </section>
    }
}

/// What a form's selects hold, by field: kept outside the form, so a
/// re-read that rebuilds the form keeps the person's choice (a select's
/// `selected` is set again on a rebuild; typed text is not).
#[derive(Clone, Copy, Default)]
pub struct Picked(RwSignal<Vec<(&'static str, String)>>);

impl Picked {
    /// Remembers `value` picked for `field`.
    pub fn pick(self, field: &'static str, value: String) {
        self.0.update(|p| {
            p.retain(|(f, _)| *f != field);
            p.push((field, value));
        });
    }

    /// Whether option `value` of `field` is the one to show: the one picked,
    /// else `initial`.
    pub fn is(self, field: &'static str, initial: &str, value: &str) -> impl Fn() -> bool + Send + Sync + 'static {
        let (initial, value) = (initial.to_string(), value.to_string());
        move || {
            self.0.with(|p| p.iter().find(|(f, _)| *f == field).map(|(_, v)| *v == value).unwrap_or(initial == value))
        }
    }
}

/// One form field: its label, the control, a hint the control names as its
/// description, and the refusal beside it.
#[component]
pub(crate) fn Field<E, V>(
    id: &'static str,
    label: &'static str,
    hint: &'static str,
    error: E,
    children: Children,
) -> impl IntoView
where
    E: Fn() -> Option<V> + Send + Sync + 'static,
    V: IntoView + 'static,
{
    view! {
        <div class="field">
            <label for=id>{label}</label>
            {children()}
            {(!hint.is_empty()).then(|| view! { <span class="hint" id=format!("{id}-hint")>{hint}</span> })}
            {error}
        </div>
    }
}
