//! `/upstreams`

use leptos::prelude::*;
use leptos_meta::Title;

use gatehouse_model::routes;

use crate::components::header::Header;
use crate::components::live::{LiveStatus, use_live_events};
use crate::components::name::Name;

/// `/upstreams`: the fronted MCP servers and their health, live.
#[component]
pub fn UpstreamsPage() -> impl IntoView {
    let upstreams = Resource::new(|| (), |_| crate::server_fns::list_upstreams());
    let live = use_live_events(routes::LIVE_EVENTS.to_string(), move |change| {
        if matches!(change.as_str(), "upstreams_changed" | "resync" | "hello") {
            upstreams.refetch();
        }
    });
    view! {
        <Title text="Upstreams — Gatehouse"/>
        <Header/>
        <main class="page">
            <h1>"Upstream MCP servers"</h1>
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || upstreams.get().map(|result| match result {
                    Ok(list) if list.upstreams.is_empty() => view! {
                        <p class="empty">"No upstream is configured. Add " <code>"[[upstream]]"</code> " tables to gatehouse.toml."</p>
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
                            </tr></thead>
                            <tbody>
                            {list.upstreams.into_iter().map(|u| {
                                let (row_name, class) = (u.name.clone(), if u.health == "up" { "status active" } else { "status revoked" });
                                view! {
                                <tr data-upstream=row_name>
                                    <td data-label="Name"><Name text=u.name/></td>
                                    <td data-label="Transport">{u.transport}</td>
                                    <td data-label="Health"><span class=class>{u.health}</span></td>
                                    <td data-label="Tools">{u.tools}</td>
                                    <td data-label="Restarts">{u.restarts}</td>
                                    {show_errors.then(|| view! {
                                        <td data-label="Last error" class="error-cell"><Name text=u.last_error.unwrap_or_default()/></td>
                                    })}
                                </tr>
                            }}).collect_view()}
                            </tbody>
                        </table>
                        </div>
                        {(!show_errors).then(|| view! {
                            <p class="hint">"An upstream's last error is shown to admins."</p>
                        })}
                    }.into_any()
                    }
                    Err(e) => view! { <p role="alert">"Could not load: " {e.to_string()}</p> }.into_any(),
                })}
            </Suspense>
            <LiveStatus state=live/>
        </main>
    }
}
