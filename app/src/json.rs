//! One JSON decoder in the browser. Server functions decode their answers
//! with `serde_json::from_slice`; resources would decode what the server put
//! in the page with `from_str`, compiling every answer type's deserializer a
//! second time (≈ 0.3 MB of the wasm's code was serde_json's). Resources made
//! here, and the live streams' events, decode with `from_slice` too.

use leptos::prelude::*;
use leptos::server::codee::{Decoder, Encoder};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A resource's codec: JSON, decoded the way server functions decode.
pub struct Json;

impl<T: Serialize> Encoder<T> for Json {
    type Error = serde_json::Error;
    type Encoded = String;

    fn encode(val: &T) -> Result<String, Self::Error> {
        serde_json::to_string(val)
    }
}

impl<T: DeserializeOwned> Decoder<T> for Json {
    type Error = serde_json::Error;
    type Encoded = str;

    fn decode(val: &str) -> Result<T, Self::Error> {
        from_str(val)
    }
}

/// Parses JSON text (through the same deserializer instances as server
/// functions' answers).
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    serde_json::from_slice(text.as_bytes())
}

/// `Resource::new`, with the [`Json`] codec.
#[track_caller]
pub fn resource<S, T, Fut>(
    source: impl Fn() -> S + Send + Sync + 'static,
    fetcher: impl Fn(S) -> Fut + Send + Sync + 'static,
) -> Resource<T, Json>
where
    S: Send + Sync + Clone + PartialEq + 'static,
    T: Serialize + DeserializeOwned + Send + Sync + 'static,
    Fut: Future<Output = T> + Send + 'static,
{
    Resource::new_with_options(source, fetcher, false)
}
