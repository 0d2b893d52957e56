//! The tool profiles section of `/policies`: which tools some agents see at
//! all. Every profile (the config file's read-only), and for admins the form
//! that adds or replaces one (Edit fills it: `?profile=<name>#profiles`)
//! and Remove.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use gatehouse_model::{Profile, Source, routes};

use crate::components::name::Name;
use crate::outcome::{Outcome, OutcomeLine, on_success, report, report_fields};
use crate::server_fns::{ProfileDraft, ProfilesView, RemoveProfile, SaveProfile, list_profiles};

/// The profile form's fields that say their own refusal beside them.
const PROFILE_FIELDS: &[&str] =
    &["name", "agents", "owners", "tools", "upstreams", "prompts", "resources", "rate", "rate_per"];

/// The section: list and form, with its own outcome line.
#[component]
pub fn ProfilesSection() -> impl IntoView {
    let profiles = crate::json::resource(|| (), |_| list_profiles());
    let save = ServerAction::<SaveProfile>::new();
    let remove = ServerAction::<RemoveProfile>::new();
    let outcome: Outcome = RwSignal::new(None);
    let query = use_query_map();
    let editing = move || query.with(|q| q.get("profile"));
    on_success(save, move || profiles.refetch());
    on_success(remove, move || profiles.refetch());
    report_fields(outcome, save, "Profile saved: the agents it names see only what it lists.", PROFILE_FIELDS);
    report(outcome, remove, "Profile removed.");
    view! {
        <section id="profiles" aria-labelledby="profiles-h">
            <h2 id="profiles-h">"Tool profiles"</h2>
            <p class="hint">
                "A profile says which tools, prompts and resources some agents see at all: every other one is absent "
                "from their lists and refused if called, naming the profile. An agent no profile names sees everything "
                "the rules let it. An agent several profiles name sees only what all of them list."
            </p>
            <OutcomeLine outcome/>
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || profiles.get().map(|result| match result {
                    // The query is read here, tracked: Edit is a link on this page.
                    Ok(view) => view! { <Profiles view save remove editing=editing()/> }.into_any(),
                    Err(e) => view! { <p role="alert" class="error">"Could not load: " {crate::outcome::message(&e)}</p> }.into_any(),
                })}
            </Suspense>
        </section>
    }
}

#[component]
fn Profiles(
    view: ProfilesView,
    save: ServerAction<SaveProfile>,
    remove: ServerAction<RemoveProfile>,
    editing: Option<String>,
) -> impl IntoView {
    let ProfilesView { is_admin, profiles } = view;
    let draft = editing
        .and_then(|name| profiles.iter().find(|p| p.name == name && p.source == Source::Database))
        .map(ProfileDraft::of)
        .unwrap_or_default();
    view! {
        {if profiles.is_empty() {
            view! { <p class="empty">"No profile yet: every agent sees every tool the rules let it."</p> }.into_any()
        } else {
            view! {
                <ul class="profiles" aria-label="Tool profiles">
                    {profiles.into_iter().map(|p| view! { <ProfileCard profile=p is_admin remove/> }).collect_view()}
                </ul>
            }.into_any()
        }}
        {if is_admin {
            view! { <ProfileForm save draft/> }.into_any()
        } else {
            view! { <p class="hint">"Only admins change profiles."</p> }.into_any()
        }}
    }
}

/// One profile: whom it names, what they see, its rate, where it is kept.
#[component]
fn ProfileCard(profile: Profile, is_admin: bool, remove: ServerAction<RemoveProfile>) -> impl IntoView {
    let from_config = profile.source == Source::Config;
    let edit = routes::edit_profile(&profile.name);
    let name = profile.name.clone();
    let lines: Vec<(&'static str, String)> = [
        ("Agents", &profile.agents),
        ("Owners", &profile.owners),
        ("Tools", &profile.tools),
        ("Upstreams", &profile.upstreams),
        ("Prompts", &profile.prompts),
        ("Resources", &profile.resources),
    ]
    .into_iter()
    .filter(|(_, list)| !list.is_empty())
    .map(|(label, list)| (label, list.join(", ")))
    .collect();
    let sees_nothing = profile.tools.is_empty() && profile.upstreams.is_empty();
    view! {
        <li class="profile card" data-profile=profile.name.clone() data-source=profile.source.as_str()>
            <h3><Name text=profile.name.clone()/></h3>
            <dl class="profile-lists">
                {lines.into_iter().map(|(label, text)| view! {
                    <dt>{label}</dt><dd><code><Name text=text/></code></dd>
                }).collect_view()}
                {sees_nothing.then(|| view! { <dt>"Tools"</dt><dd>"none (only " <code>"resume"</code> ")"</dd> })}
                {profile.rate.map(|rate| view! {
                    <dt>"Rate"</dt><dd>{format!("at most {rate} tool calls per {}", profile.rate_per.as_str())}</dd>
                })}
            </dl>
            <p class="meta">{if from_config { "config file (read-only)" } else { "database" }}</p>
            {(is_admin && !from_config).then(|| view! {
                <div class="actions">
                    <a href=edit class="button-link">"Edit"</a>
                    <ActionForm action=remove attr:class="revoke-form">
                        <input type="hidden" name="name" value=name/>
                        <button type="submit" class="danger quiet">"Remove"</button>
                    </ActionForm>
                </div>
            })}
        </li>
    }
}

/// The form that adds or replaces a profile; a refused field says why beside it.
#[component]
fn ProfileForm(save: ServerAction<SaveProfile>, draft: ProfileDraft) -> impl IntoView {
    let field = move |label: &'static str,
                      key: &'static str,
                      value: Option<String>,
                      placeholder: &'static str,
                      hint: &'static str| {
        let error = crate::outcome::field_error(save, key);
        view! {
            <label>{label}
                <input id=format!("profile-{key}") name=format!("draft[{key}]") autocomplete="off"
                    placeholder=placeholder value=value.unwrap_or_default()/>
                {(!hint.is_empty()).then(|| view! { <span class="hint">{hint}</span> })}
                {move || error().map(|e| view! { <span role="alert" class="error field-error">{e}</span> })}
            </label>
        }
    };
    view! {
        <div class="panel">
            <h3>"Add or edit a profile"</h3>
            <ActionForm action=save attr:class="profile-form" attr:aria-label="Profile">
                {field("Name", "name", Some(draft.name), "docs only", "A profile of the same name is replaced.")}
                {field("Agents", "agents", draft.agents, "alice/ci, */reviewer", "Comma-separated owner/agent (a bare name: every agent of that name).")}
                {field("Owners", "owners", draft.owners, "bob", "Every agent of these users. Name agents, owners or both.")}
                {field("Tools", "tools", draft.tools, "docs__*, gatehouse_status", "Comma-separated tool names or prefix*; resume is always there.")}
                {field("Upstreams", "upstreams", draft.upstreams, "docs", "Every tool of these upstreams.")}
                {field("Prompts", "prompts", draft.prompts, "docs__*", "Comma-separated prompt names or prefix*; empty: none.")}
                {field("Resources", "resources", draft.resources, "file:///docs/*", "Comma-separated URIs or prefix*; empty: none.")}
                {field("Rate limit", "rate", draft.rate, "100/hour", "At most this many tool calls by the agents it names, across replicas.")}
                {field("Counted per", "rate_per", draft.rate_per, "agent", "agent (default), owner or tool.")}
                <button type="submit" class="primary">"Save profile"</button>
            </ActionForm>
        </div>
    }
}
