//! Around the site's server functions (`/api/fn/…`): arguments that do not
//! fit a server function (a repeated field, a missing one, a value of the
//! wrong kind) are the sender's error. Leptos answers them 500, as it does a
//! failure of the function itself; this layer makes them 400 with a plain
//! sentence, so a malformed form is never counted as the server's fault.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The most of an error body read to classify it (server functions' errors
/// are a line of text).
const MAX_ERROR_BYTES: usize = 64 * 1024;

/// How server_fn encodes the errors of arguments it could not decode.
const BAD_ARGUMENTS: [&[u8]; 2] = [b"Args|", b"Deserialization|"];

/// Answers 400 (not 500) to a server function called with arguments it
/// cannot decode, with a sentence in server_fn's own error encoding.
pub async fn bad_arguments_are_400(request: Request, next: Next) -> Response {
    let path = request.uri().path().to_string();
    let response = next.run(request).await;
    if !path.starts_with("/api/fn/") || response.status() != StatusCode::INTERNAL_SERVER_ERROR {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_ERROR_BYTES).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    if !BAD_ARGUMENTS.iter().any(|prefix| bytes.starts_with(prefix)) {
        return Response::from_parts(parts, Body::from(bytes));
    }
    let detail = String::from_utf8_lossy(&bytes);
    let detail = detail.split_once('|').map(|(_, d)| d).unwrap_or_default();
    tracing::warn!(path, detail, "server function called with arguments it cannot read");
    parts.status = StatusCode::BAD_REQUEST;
    parts.headers.remove(header::CONTENT_LENGTH);
    let sentence =
        format!("Args|The form's fields could not be read ({}); reload the page and try again.", clip(detail));
    Response::from_parts(parts, Body::from(sentence))
}

/// At most 200 characters of a decoder's message.
fn clip(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}
