//! Cursor pagination over the merged lists (Gatehouse's tools plus every
//! upstream's): the cursor is an opaque offset into the sorted list.

use rmcp::model::{ErrorData, PaginatedRequestParams};

/// One page of `all` starting at the request's cursor, and the next cursor
/// when more follow. A cursor Gatehouse did not hand out is invalid params.
pub fn page<T>(
    all: Vec<T>,
    request: Option<&PaginatedRequestParams>,
    size: usize,
) -> Result<(Vec<T>, Option<String>), ErrorData> {
    let start = match request.and_then(|r| r.cursor.as_deref()) {
        None => 0,
        Some(cursor) => decode(cursor)
            .filter(|&offset| offset <= all.len())
            .ok_or_else(|| ErrorData::invalid_params(format!("invalid cursor {cursor:?}"), None))?,
    };
    let end = start.saturating_add(size).min(all.len());
    let next = (end < all.len()).then(|| encode(end));
    Ok((all.into_iter().skip(start).take(end - start).collect(), next))
}

fn encode(offset: usize) -> String {
    format!("gh1.{offset}")
}

fn decode(cursor: &str) -> Option<usize> {
    cursor.strip_prefix("gh1.")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(cursor: Option<String>) -> PaginatedRequestParams {
        let mut r = PaginatedRequestParams::default();
        r.cursor = cursor;
        r
    }

    #[test]
    fn walks_every_item_once_then_stops() {
        let all: Vec<u32> = (0..7).collect();
        let mut seen = Vec::new();
        let mut cursor = None;
        loop {
            let (items, next) = page(all.clone(), Some(&req(cursor)), 3).unwrap();
            seen.extend(items);
            match next {
                Some(n) => cursor = Some(n),
                None => break,
            }
        }
        assert_eq!(seen, all);
    }

    #[test]
    fn foreign_or_out_of_range_cursors_are_invalid_params() {
        for bad in ["abc", "gh1.x", "gh1.99", ""] {
            let err = page(vec![1, 2], Some(&req(Some(bad.into()))), 1).unwrap_err();
            assert_eq!(err.code, rmcp::model::ErrorCode::INVALID_PARAMS, "{bad}");
        }
    }

    #[test]
    fn a_short_list_is_one_page_without_cursor() {
        let (items, next) = page(vec![1, 2], None, 5).unwrap();
        assert_eq!((items, next), (vec![1, 2], None));
    }
}
