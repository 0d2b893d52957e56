//! The site's compiled front end (wasm, JS, CSS, icon), embedded in the
//! binary so it runs from any folder.
//!
//! Pages link the bundle under a content-hashed name
//! (`/pkg/gatehouse.<hash>.js`), served `immutable`: a phone downloads it
//! once per release. `scripts/build.sh` stores each file beside its brotli
//! and gzip forms; the one the browser accepts is sent as it is, never
//! compressed per request.

use std::sync::OnceLock;

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

#[derive(rust_embed::RustEmbed)]
#[folder = "dist/site/"]
struct Assets;

/// The bundle's files a page links, by extension.
const BUNDLE: [&str; 3] = ["js", "wasm", "css"];

/// How long a hashed file may be kept: a year, never revalidated.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// The bundle's name as pages link it: `gatehouse.<hash>`, where the hash
/// covers the JS, wasm and CSS together (they only work as a set), or plain
/// `gatehouse` when no front end was embedded.
pub fn bundle_name() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        let mut digest = Sha256::new();
        for ext in BUNDLE {
            match Assets::get(&format!("pkg/gatehouse.{ext}")) {
                Some(file) => digest.update(file.metadata.sha256_hash()),
                None => return "gatehouse".to_string(),
            }
        }
        format!("gatehouse.{}", hex(&digest.finalize()[..8]))
    })
}

/// The stylesheet's address, under the bundle's name.
pub fn stylesheet_href() -> String {
    format!("/pkg/{}.css", bundle_name())
}

/// The stylesheet's text (`None` when no front end was embedded): the
/// pages that load light carry it inline, one round trip less on a slow
/// phone network.
pub fn stylesheet_text() -> Option<&'static str> {
    static TEXT: OnceLock<Option<String>> = OnceLock::new();
    TEXT.get_or_init(|| Assets::get("pkg/gatehouse.css").and_then(|f| String::from_utf8(f.data.into_owned()).ok()))
        .as_deref()
}

/// An encoding a file was stored in, best first.
#[derive(Clone, Copy)]
enum Encoding {
    Brotli,
    Gzip,
}

impl Encoding {
    fn suffix(self) -> &'static str {
        match self {
            Encoding::Brotli => ".br",
            Encoding::Gzip => ".gz",
        }
    }

    fn token(self) -> &'static str {
        match self {
            Encoding::Brotli => "br",
            Encoding::Gzip => "gzip",
        }
    }
}

/// Whether `Accept-Encoding` accepts `token` (named, or `*`, with q > 0).
fn accepts(headers: &HeaderMap, token: &str) -> bool {
    let Some(value) = headers.get(header::ACCEPT_ENCODING).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    value.split(',').any(|item| {
        let mut parts = item.split(';').map(str::trim);
        let name = parts.next().unwrap_or_default();
        let refused =
            parts.any(|p| p.strip_prefix("q=").and_then(|q| q.trim().parse::<f32>().ok()).is_some_and(|q| q <= 0.0));
        (name.eq_ignore_ascii_case(token) || name == "*") && !refused
    })
}

/// `path` as stored, in the best encoding the request accepts.
fn serve(path: &str, headers: &HeaderMap, cache: &'static str) -> Response {
    let stored = [Encoding::Brotli, Encoding::Gzip]
        .into_iter()
        .filter(|e| accepts(headers, e.token()))
        .find_map(|e| Assets::get(&format!("{path}{}", e.suffix())).map(|file| (Some(e), file)))
        .or_else(|| Assets::get(path).map(|file| (None, file)));
    let Some((encoding, file)) = stored else {
        return not_found(path);
    };
    let mime = mime_guess::from_path(path).first_or_octet_stream();
    let etag = format!("\"{}{}\"", hex(&file.metadata.sha256_hash()[..12]), encoding.map_or("", |e| e.suffix()));
    if headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()) == Some(etag.as_str()) {
        return StatusCode::NOT_MODIFIED.into_response();
    }
    let mut response = file.data.into_owned().into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(mime.as_ref()).unwrap_or(HeaderValue::from_static("application/octet-stream")),
    );
    if let Some(encoding) = encoding {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static(encoding.token()));
    }
    h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    if let Ok(etag) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, etag);
    }
    response
}

fn not_found(path: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(serde_json::json!({"error": "not_found", "message": format!("no asset {path}")})),
    )
        .into_response()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `GET /pkg/{*path}`: the bundle under its hashed name (immutable), or any
/// file under its plain name (revalidated). A hash that is not this
/// build's is a 404, never this build's file under an old name: another
/// replica's page must not cache a mismatched bundle for a year.
pub async fn pkg(Path(path): Path<String>, headers: HeaderMap) -> Response {
    if let Some(ext) = path
        .strip_prefix("gatehouse.")
        .and_then(|rest| rest.rsplit_once('.'))
        .filter(|(_, ext)| BUNDLE.contains(ext))
        .map(|(_, ext)| ext)
        .filter(|_| path.matches('.').count() == 2)
    {
        return if path == format!("{}.{ext}", bundle_name()) {
            serve(&format!("pkg/gatehouse.{ext}"), &headers, IMMUTABLE)
        } else {
            not_found(&format!("pkg/{path}"))
        };
    }
    serve(&format!("pkg/{path}"), &headers, "no-cache")
}

/// `GET /favicon.ico` (an SVG icon; browsers accept it).
pub async fn favicon(headers: HeaderMap) -> Response {
    let mut response = serve("favicon.svg", &headers, "no-cache");
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("image/svg+xml"));
    response
}

/// Whether the front end was embedded (pages hydrate only if it was).
pub fn has_front_end() -> bool {
    Assets::get("pkg/gatehouse.wasm").is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn reads_accept_encoding_as_browsers_send_it() {
        assert!(accepts(&with("gzip, deflate, br, zstd"), "br"));
        assert!(accepts(&with("gzip;q=1.0, br;q=0.5"), "br"));
        assert!(!accepts(&with("gzip, br;q=0"), "br"));
        assert!(accepts(&with("*"), "gzip"));
        assert!(!accepts(&with("identity"), "gzip"));
        assert!(!accepts(&HeaderMap::new(), "gzip"));
    }
}
