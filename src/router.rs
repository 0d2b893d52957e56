//! The whole router: `/mcp`, the HTTP API, the site, `/metrics`, behind the
//! Host/Origin checks and the security headers. Tests call [`app`] directly
//! (with [`crate::state::AppState::new`], no socket needed).

use axum::Router;
use axum::middleware::{from_fn, from_fn_with_state};
use axum::response::IntoResponse;
use axum::routing::get;
use gatehouse_app::{App, shell};
use leptos::prelude::provide_context;
use leptos_axum::{LeptosRoutes, generate_route_list};
use tower_cookies::CookieManagerLayer;

use crate::state::AppState;
use crate::{api, auth, health, mcp, metrics, oauth, security, site};

/// The whole router: `/mcp`, the API, the site. Tests call this directly.
pub fn app(state: AppState) -> Router {
    let mcp = mcp::router(state.mcp.clone(), &state.allow);
    let (core, minted, links) = (state.mcp.core.clone(), state.minted.clone(), state.links.clone());
    let tools: std::sync::Arc<dyn gatehouse_app::server_fns::ToolCatalog> = std::sync::Arc::new(state.mcp.clone());
    let notify: std::sync::Arc<dyn gatehouse_app::server_fns::NotifyTargets> =
        std::sync::Arc::new(state.notify_sources.clone());
    let sources: std::sync::Arc<dyn gatehouse_app::server_fns::UpstreamSources> =
        std::sync::Arc::new(state.upstream_sources.clone());
    let consent: std::sync::Arc<dyn gatehouse_app::server_fns::OAuthConsent> =
        std::sync::Arc::new(oauth::authorize::ConsentSource { core: core.clone(), server: state.mcp.oauth.clone() });
    let style = crate::site::stylesheet_text().map(gatehouse_app::InlineStyle);
    let context = move || {
        if let Some(style) = style {
            provide_context(style);
        }
        provide_context(core.clone());
        provide_context(minted.clone());
        provide_context(links.clone());
        provide_context(tools.clone());
        provide_context(notify.clone());
        provide_context(consent.clone());
        provide_context(sources.clone());
    };
    // The consent page is served by the authorization endpoint, which checks
    // the request (and may redirect) before drawing it. Rendered async like
    // the routed pages (SsrMode::Async): a streamed render would send the form
    // as a template only JavaScript swaps in, so it would not work without it.
    let routes: Vec<_> = generate_route_list(App).into_iter().filter(|r| r.path() != oauth::paths::AUTHORIZE).collect();
    let consent_page = oauth::authorize::render_with(leptos_axum::render_app_async_with_context(context.clone(), {
        let options = state.leptos_options.clone();
        move || shell(options.clone())
    }));
    let pages = Router::<AppState>::new()
        .leptos_routes_with_context(&state, routes, context, {
            let options = state.leptos_options.clone();
            move || shell(options.clone())
        })
        .layer(from_fn(auth::require_user_for_pages));
    // Unknown paths: a JSON 404 under /api, the site's own 404 page elsewhere.
    let not_found_page = {
        let core = state.mcp.core.clone();
        let options = state.leptos_options.clone();
        leptos_axum::render_app_to_stream_with_context(
            move || provide_context(core.clone()),
            move || shell(options.clone()),
        )
    };
    let fallback = move |request: axum::extract::Request| {
        let not_found_page = not_found_page.clone();
        async move {
            if request.uri().path().starts_with("/api/") {
                let message = format!("no route for {} {}", request.method(), request.uri().path());
                crate::error::ApiError::NotFound(message).into_response()
            } else {
                not_found_page(request).await.into_response()
            }
        }
    };
    let site = Router::new()
        .merge(api::router())
        .merge(oauth::router(state.mcp.oauth.enabled, consent_page))
        .merge(pages)
        .fallback(fallback)
        .route("/pkg/{*path}", get(site::pkg))
        .route("/favicon.ico", get(site::favicon))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(metrics::admin_metrics))
        .layer(from_fn(crate::server_fns::bad_arguments_are_400))
        .layer(from_fn_with_state(state.clone(), auth::load_user))
        // Pages and JSON compressed as the browser accepts (brotli, gzip).
        // Not the live stream (tower-http leaves `text/event-stream` alone),
        // nor the bundle, which is stored compressed (it already carries a
        // `Content-Encoding`, which the layer respects).
        .layer(tower_http::compression::CompressionLayer::new().br(true).gzip(true))
        .layer(CookieManagerLayer::new())
        .layer(axum::extract::DefaultBodyLimit::max(state.mcp.config.load().max_body_bytes))
        .with_state(state.clone());
    // The guard goes outermost: refusals (a foreign Host, a cross-site POST)
    // carry the security headers too.
    Router::new()
        .merge(mcp)
        .merge(site)
        .layer(security::GuardLayer::new(state.allow.clone(), security::HeaderPolicy { https: state.https }))
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use http::{Request, StatusCode};
    use tower::ServiceExt;

    use super::app;
    use crate::state::AppState;
    use crate::state::for_tests as state;

    async fn status(state: &AppState, request: Request<Body>) -> StatusCode {
        app(state.clone()).oneshot(request).await.unwrap().status()
    }

    #[tokio::test]
    async fn routing_and_auth_rules_hold_without_a_socket() {
        let (state, _dir) = state();
        let get = |path: &str, host: &str| Request::get(path).header("host", host).body(Body::empty()).unwrap();
        assert_eq!(status(&state, get("/healthz", "127.0.0.1")).await, StatusCode::OK);
        assert_eq!(status(&state, get("/healthz", "evil.example")).await, StatusCode::FORBIDDEN, "DNS rebinding");
        let mcp = Request::post("/mcp").header("host", "127.0.0.1").body(Body::from("{}")).unwrap();
        assert_eq!(status(&state, mcp).await, StatusCode::UNAUTHORIZED, "no bearer token");
        assert_eq!(
            status(&state, get("/metrics", "localhost")).await,
            StatusCode::UNAUTHORIZED,
            "metrics need an admin"
        );
        assert_eq!(status(&state, get("/api/executions/exec_x", "localhost")).await, StatusCode::UNAUTHORIZED);
    }
}
