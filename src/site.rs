//! The site's compiled front end (wasm, JS, CSS, icon), embedded in the
//! binary so it runs from any folder.

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

#[derive(rust_embed::RustEmbed)]
#[folder = "dist/site/"]
struct Assets;

fn serve(path: &str) -> Response {
    let Some(file) = Assets::get(path) else {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(serde_json::json!({"error": "not_found", "message": format!("no asset {path}")})),
        )
            .into_response();
    };
    let mime = mime_guess::from_path(path).first_or_octet_stream();
    let mut response = file.data.into_owned().into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(mime.as_ref()).unwrap_or(HeaderValue::from_static("application/octet-stream")),
    );
    // Names are not content-hashed, so let browsers revalidate.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{}\"", hex_sha(&file.metadata.sha256_hash()))) {
        h.insert(header::ETAG, etag);
    }
    response
}

fn hex_sha(bytes: &[u8]) -> String {
    bytes.iter().take(12).map(|b| format!("{b:02x}")).collect()
}

/// `GET /pkg/{*path}`
pub async fn pkg(Path(path): Path<String>) -> Response {
    serve(&format!("pkg/{path}"))
}

/// `GET /favicon.ico` (an SVG icon; browsers accept it).
pub async fn favicon() -> Response {
    let mut response = serve("favicon.svg");
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("image/svg+xml"));
    response
}

/// Whether the front end was embedded (pages hydrate only if it was).
pub fn has_front_end() -> bool {
    Assets::get("pkg/gatehouse.wasm").is_some()
}
