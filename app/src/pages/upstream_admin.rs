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
    let stored = managed.specs.iter().find(|s| s.name == name).cloned();
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

/// The form that adds an upstream, or edits the one named in the query.
#[component]
pub fn UpstreamForm(managed: ManagedUpstreams, save: ServerAction<SaveUpstream>) -> impl IntoView {
    let query = use_query_map();
    let editing: Option<UpstreamSpec> = query
        .with_untracked(|q| q.get("upstream"))
        .and_then(|name| managed.specs.iter().find(|s| s.name == name).cloned());
    let draft = editing.as_ref().map(UpstreamDraft::of).unwrap_or_default();
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
    let no_commands = commands.is_empty();
    view! {
        <section id="upstream-form" class="panel" aria-labelledby="upstream-form-h">
            <h2 id="upstream-form-h">{heading}</h2>
            <ActionForm action=save attr:class="upstream-form" attr:aria-label="Upstream">
                {editing.is_none().then(|| view! { <input type="hidden" name="draft[adding]" value="1"/> })}
                <label>"Name"
                    <input id="upstream-name" name="draft[name]" autocomplete="off" placeholder="search"
                        value=draft.name.clone() readonly=editing.is_some()/>
                    <span class="hint">"Letters, digits, - or _. Its tools are listed as name__tool unless you set a prefix."</span>
                    {error("name")}
                </label>
                <label>"Transport"
                    <select id="upstream-kind" name="draft[kind]">
                        <option value="http" selected=kind == "http">"Streamable HTTP (a URL)"</option>
                        <option value="stdio" selected=kind == "stdio">"stdio (a command gatehouse.toml allows)"</option>
                    </select>
                    {error("kind")}
                </label>
                <label>"URL"
                    <input id="upstream-url" name="draft[url]" type="url" autocomplete="off"
                        placeholder="https://mcp.example.com/mcp" value=draft.url.clone().unwrap_or_default()/>
                    <span class="hint">"For Streamable HTTP."</span>
                    {error("url")}
                </label>
                <label>"Command"
                    <select id="upstream-command" name="draft[command]">
                        <option value="" selected=chosen.is_empty()>"—"</option>
                        {commands.into_iter().map(|(key, line)| {
                            let selected = key == chosen;
                            view! { <option value=key.clone() selected=selected>{format!("{key}: {line}")}</option> }
                        }).collect_view()}
                    </select>
                    <span class="hint">{if no_commands {
                        "For stdio. gatehouse.toml allows no command yet: a stdio command runs on this host, so its operator lists them under [stdio_commands]."
                    } else {
                        "For stdio: only the commands gatehouse.toml lists run, as listed."
                    }}</span>
                    {error("command")}
                </label>
                <label>"Tool prefix"
                    <input id="upstream-prefix" name="draft[prefix]" autocomplete="off" placeholder="name__"
                        value=draft.prefix.clone().unwrap_or_default()/>
                    {error("prefix")}
                </label>
                <label>"Headers"
                    <textarea id="upstream-headers" name="draft[headers]" rows="2" autocomplete="off"
                        placeholder="X-Team: blue">{draft.headers.clone().unwrap_or_default()}</textarea>
                    <span class="hint">"One per line, Name: value. Shown to admins."</span>
                    {error("headers")}
                </label>
                <label>"Secret headers"
                    <textarea id="upstream-secret-headers" name="draft[secret_headers]" rows="2" autocomplete="off"
                        placeholder="Authorization: Bearer …">{draft.secret_headers.clone().unwrap_or_default()}</textarea>
                    <span class="hint">"One per line, Name: value. Never shown again: a name left with no value keeps the value set before; delete the line to remove it."</span>
                    {error("secret_headers")}
                </label>
                <button type="submit" class="primary">{if editing.is_some() { "Save upstream" } else { "Add upstream" }}</button>
                {editing.is_some().then(|| view! { <a href=routes::UPSTREAMS class="button-link quiet">"Cancel"</a> })}
            </ActionForm>
        </section>
    }
}
