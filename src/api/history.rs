//! The audit log for people: one page of history as JSON (a row per call,
//! as the history page shows it), and the whole filtered log as a file
//! (JSON Lines or CSV, one line per entry: the record itself, for tools
//! that keep logs). Admins read everyone's; others their own agents'. All
//! reads run in the stores' lane.

use std::convert::Infallible;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use gatehouse_core::Core;
use gatehouse_core::approvals::AccessError;
use gatehouse_core::model::{AuditEntry, CallsPage, ExportFormat, HISTORY_PAGE_SIZE, HistoryFilter, HistoryPage};
use gatehouse_core::users::User;

use crate::auth::SignedIn;
use crate::error::{ApiError, ApiJson};

/// Entries read from the database per step of an export.
const EXPORT_BATCH: usize = 1_000;
/// The most entries one export holds (the retention window bounds it too).
pub const EXPORT_MAX: usize = 100_000;

/// The filter in a query string; a malformed one is a JSON 400.
fn parse(query: Option<String>) -> Result<HistoryFilter, ApiError> {
    serde_urlencoded::from_str(query.as_deref().unwrap_or(""))
        .map_err(|e| ApiError::BadRequest(format!("invalid history filter: {e}")))
}

/// One page of `user`'s audit entries (the export's unit), read in the stores' lane.
async fn read_entries(
    core: &Core,
    user: User,
    filter: HistoryFilter,
    limit: usize,
) -> Result<HistoryPage, AccessError> {
    core.run(move |core| core.approvals.history_for(&user, &filter, limit))
        .await
        .map_err(|e| AccessError::Storage(e.to_string()))?
}

/// `GET /api/history?agent=&tool=&upstream=&outcome=&decider=&from=&to=&before=`:
/// one page of calls, newest first (each with its steps, oldest first), with
/// the cursor of the next.
pub async fn page(
    State(core): State<Core>,
    SignedIn(user): SignedIn,
    RawQuery(query): RawQuery,
) -> Result<ApiJson<CallsPage>, ApiError> {
    let filter = parse(query)?;
    let page = core
        .run(move |core| core.calls_page(&user, &filter, HISTORY_PAGE_SIZE))
        .await
        .map_err(|e| AccessError::Storage(e.to_string()))??;
    Ok(ApiJson(page))
}

/// `GET /api/history/export.jsonl?…`: the filtered history, one JSON object per line.
pub async fn export_jsonl(core: State<Core>, user: SignedIn, query: RawQuery) -> Result<Response, ApiError> {
    export(core, user, query, ExportFormat::Jsonl).await
}

/// `GET /api/history/export.csv?…`: the filtered history as CSV with a header row.
pub async fn export_csv(core: State<Core>, user: SignedIn, query: RawQuery) -> Result<Response, ApiError> {
    export(core, user, query, ExportFormat::Csv).await
}

/// Streams the export page by page (newest first) so memory stays flat
/// however long the history; it stops when the client goes away.
async fn export(
    State(core): State<Core>,
    SignedIn(user): SignedIn,
    RawQuery(query): RawQuery,
    format: ExportFormat,
) -> Result<Response, ApiError> {
    let filter = parse(query)?.at_page(None);
    // A bad filter answers 400 here, not as a broken download.
    read_entries(&core, user.clone(), filter.clone(), 1).await?;
    let core = core.clone();
    // Each page is read in the stores' lane when the client is ready for
    // it (no task of its own; it ends when the client goes away).
    let first = match format {
        ExportFormat::Csv => {
            let mut out = Vec::new();
            csv_row(&mut out, &CSV_HEADER.map(str::to_string));
            out
        }
        ExportFormat::Jsonl => Vec::new(),
    };
    let pages = futures::stream::unfold(Some((first, None, 0usize)), move |next| {
        let (core, user, filter) = (core.clone(), user.clone(), filter.clone());
        async move {
            let (mut out, before, written) = next?;
            if written >= EXPORT_MAX {
                return None;
            }
            let batch = EXPORT_BATCH.min(EXPORT_MAX - written);
            let at = filter.at_page(before);
            let read = core.run(move |core| core.approvals.history_for(&user, &at, batch)).await;
            let page = match read.map_err(|e| AccessError::Storage(e.to_string())).and_then(|page| page) {
                Ok(page) => page,
                Err(e) => {
                    // The response has started: the file ends short, and the log says why.
                    tracing::error!(error = %e, "history export failed part way");
                    return None;
                }
            };
            for entry in &page.entries {
                match format {
                    ExportFormat::Jsonl => {
                        serde_json::to_writer(&mut out, entry).unwrap_or_default();
                        out.push(b'\n');
                    }
                    ExportFormat::Csv => csv_row(&mut out, &csv_fields(entry)),
                }
            }
            let written = written + page.entries.len();
            let next = page.next_before.map(|before| (Vec::new(), Some(before), written));
            Some((Ok::<_, Infallible>(Bytes::from(out)), next))
        }
    });
    let (content_type, name) = match format {
        ExportFormat::Jsonl => ("application/jsonl; charset=utf-8", "gatehouse-history.jsonl"),
        ExportFormat::Csv => ("text/csv; charset=utf-8", "gatehouse-history.csv"),
    };
    Ok((
        [
            (header::CONTENT_TYPE, content_type.to_string()),
            (header::CONTENT_DISPOSITION, format!("attachment; filename=\"{name}\"")),
        ],
        // Fused: a body wrapper (the compression layer) may poll once more
        // after the end, which an unfold stream panics on.
        Body::from_stream(futures::StreamExt::fuse(pages)),
    )
        .into_response())
}

const CSV_HEADER: [&str; 13] = [
    "id",
    "at",
    "execution_id",
    "state",
    "tool",
    "upstream",
    "agent",
    "owner",
    "thread",
    "credential_id",
    "actor",
    "detail",
    "arguments_digest",
];

fn csv_fields(e: &AuditEntry) -> [String; 13] {
    let opt = |v: &Option<String>| v.clone().unwrap_or_default();
    [
        e.id.to_string(),
        e.at.clone(),
        e.execution_id.to_string(),
        e.state.as_str().to_string(),
        e.tool.clone(),
        opt(&e.upstream),
        e.agent.clone(),
        opt(&e.owner),
        opt(&e.thread),
        e.credential_id.as_ref().map(|c| c.to_string()).unwrap_or_default(),
        opt(&e.actor),
        opt(&e.detail),
        e.arguments_digest.clone(),
    ]
}

/// Appends one CSV record. Agents choose their names and tools' names come
/// from upstreams, so a cell a spreadsheet might run as a formula is written
/// with a leading `'` (see [`is_formula_like`]).
fn csv_row(out: &mut Vec<u8>, fields: &[String]) {
    let mut writer = csv::WriterBuilder::new().from_writer(Vec::new());
    let guarded = fields.iter().map(|f| if is_formula_like(f) { format!("'{f}") } else { f.clone() });
    if writer.write_record(guarded).is_ok()
        && let Ok(bytes) = writer.into_inner()
    {
        out.extend_from_slice(&bytes);
    }
}

/// Whether a spreadsheet might read `cell` as a formula: it starts with a
/// tab or carriage return, or its first visible character is `=`, `+`, `-`
/// or `@` (or their fullwidth forms) once leading whitespace, control
/// characters and invisible format characters (Unicode category Cf: zero
/// width space, joiners, bidi marks, BOM…) are skipped — spreadsheets
/// trim some of them before deciding.
fn is_formula_like(cell: &str) -> bool {
    use unicode_general_category::{GeneralCategory, get_general_category};
    if cell.starts_with(['\t', '\r']) {
        return true;
    }
    let visible = cell.trim_start_matches(|c: char| {
        c.is_whitespace() || c.is_control() || get_general_category(c) == GeneralCategory::Format
    });
    visible.starts_with(['=', '+', '-', '@', '\u{FF1D}', '\u{FF0B}', '\u{FF0D}', '\u{FF20}'])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formulas_are_found_past_whitespace_and_invisible_characters() {
        for formula in [
            "=cmd",
            "  =cmd",
            "\u{200b}=cmd",
            "\u{feff}+1",
            "\u{200d}\u{2060} -1",
            "\u{202e}@SUM(A1)",
            "\u{00a0}=1",
            "\t@x",
            "\r=1",
            "\n=1",
            "\u{0}=1",
            "\u{FF1D}cmd",
        ] {
            assert!(is_formula_like(formula), "{formula:?} is guarded");
            let mut out = Vec::new();
            csv_row(&mut out, &[formula.to_string()]);
            let written = String::from_utf8(out).unwrap();
            assert!(written.trim_start_matches('"').starts_with('\''), "{formula:?} written as {written:?}");
        }
        for plain in ["plain", "  plain", "\u{200b}plain", "a=b", "files__read", "", "   "] {
            assert!(!is_formula_like(plain), "{plain:?} is left alone");
        }
    }

    #[test]
    fn csv_cells_are_quoted_and_formulas_defused() {
        let mut out = Vec::new();
        csv_row(&mut out, &["=HYPERLINK(\"x\")".into(), "a,b".into(), "-1".into(), "plain".into()]);
        assert_eq!(String::from_utf8(out).unwrap(), "\"'=HYPERLINK(\"\"x\"\")\",\"a,b\",'-1,plain\n");
    }
}
