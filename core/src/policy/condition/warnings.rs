//! Warnings for a condition that compares a path or a URL as text:
//! `args.path.startsWith("/srv/prod/")` is escaped by `/srv/./prod/db`,
//! `//srv/prod/db` or `/srv/x/../prod/db`, which the receiver resolves to
//! `/srv/prod/db`. Told by the argument's name or by the text it is
//! compared with. The console shows them beside the rule; the rule is
//! still accepted (the author may mean text).

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};

/// Words in an argument's name that say it holds a path or a URL
/// (`filePath`, `target_dir` and `redirect_uri` each hold one).
const LOCATION_WORDS: &[&str] = &[
    "path",
    "paths",
    "file",
    "files",
    "filename",
    "filenames",
    "filepath",
    "dir",
    "dirs",
    "directory",
    "directories",
    "folder",
    "folders",
    "url",
    "urls",
    "uri",
    "uris",
    "href",
    "link",
    "links",
    "target",
    "dest",
    "destination",
    "src",
    "source",
    "location",
    "endpoint",
    "cwd",
    "root",
];

/// The text tests that a path or URL slips past.
const TEXT_TESTS: &[&str] = &["startsWith", "contains", "endsWith", "matches"];

/// The warnings for `expr` (see the module doc), each once.
pub(super) fn warnings(expr: &IdedExpr) -> Vec<String> {
    let mut found = Vec::new();
    walk(expr, &mut Vec::new(), &mut found);
    found
}

/// Walks `expr`; `scope` maps a loop's variable to the argument it runs
/// over (`f` in `args.files.exists(f, …)` is one of `args.files`).
fn walk(expr: &IdedExpr, scope: &mut Vec<(String, String)>, found: &mut Vec<String>) {
    match &expr.expr {
        Expr::Unspecified | Expr::Literal(_) | Expr::Ident(_) | Expr::Struct(_) => {}
        Expr::Select(select) => walk(&select.operand, scope, found),
        Expr::List(list) => list.elements.iter().for_each(|e| walk(e, scope, found)),
        Expr::Map(map) => {
            for entry in &map.entries {
                match &entry.expr {
                    EntryExpr::StructField(field) => walk(&field.value, scope, found),
                    EntryExpr::MapEntry(pair) => {
                        walk(&pair.key, scope, found);
                        walk(&pair.value, scope, found);
                    }
                }
            }
        }
        Expr::Comprehension(comp) => {
            walk(&comp.iter_range, scope, found);
            let bound = spell(&comp.iter_range).map(|range| (comp.iter_var.clone(), range));
            let pushed = bound.is_some();
            scope.extend(bound);
            for part in [&comp.accu_init, &comp.loop_cond, &comp.loop_step, &comp.result] {
                walk(part, scope, found);
            }
            if pushed {
                scope.pop();
            }
        }
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                walk(target, scope, found);
            }
            call.args.iter().for_each(|a| walk(a, scope, found));
            if !TEXT_TESTS.contains(&call.func_name.as_str()) {
                return;
            }
            // `x.f(a)`, or `matches(x, a)`.
            let (subject, argument) = match (&call.target, call.args.as_slice()) {
                (Some(target), [argument]) => (target.as_ref(), argument),
                (None, [subject, argument]) => (subject, argument),
                _ => return,
            };
            let Some(code) = spell(subject) else { return };
            // A loop's variable holds what its list holds.
            let (shown, read) = match scope.iter().rev().find(|(var, _)| *var == code) {
                Some((_, range)) => (format!("{code} (an element of {range})"), range.clone()),
                None => (code.clone(), code.clone()),
            };
            let field = read.rsplit('.').next().unwrap_or(&read);
            // By the argument's name, or by the value it is compared with.
            if !looks_like_location(field) && !names_a_location(argument) {
                return;
            }
            let warning = warning(&call.func_name, &shown, &code, argument);
            if !found.contains(&warning) {
                found.push(warning);
            }
        }
    }
}

/// The warning for `code.function(argument)`, `code` shown as `shown`.
fn warning(function: &str, shown: &str, code: &str, argument: &IdedExpr) -> String {
    let literal = match &argument.expr {
        Expr::Literal(LiteralValue::String(s)) => Some(s.inner()),
        _ => None,
    };
    let instead = match literal {
        Some(url) if url.contains("://") => format!("`url_under({code}, \"{url}\")`"),
        Some(path) if path.starts_with('/') => format!("`path_under({code}, \"{path}\")`"),
        _ => format!("`path_under({code}, prefix)` for a file path or `url_under({code}, prefix)` for a URL"),
    };
    format!(
        "`{function}` compares {shown} as text, but a path or URL can name the same place in other spellings \
         (`/srv/./prod`, `//srv/prod`, `/srv/x/../prod`, `https://host//admin`) that a text test does not \
         catch. Use {instead}: it compares the value as the receiver resolves it."
    )
}

/// Whether `argument` is a text literal that looks like an absolute path
/// or a URL (`"/srv/prod/"`, `"^/tmp"`, `"https://host/"`).
fn names_a_location(argument: &IdedExpr) -> bool {
    match &argument.expr {
        Expr::Literal(LiteralValue::String(s)) => {
            let s = s.inner();
            s.contains("://") || s.trim_start_matches('^').starts_with('/')
        }
        _ => false,
    }
}

/// How `expr` is written, if it is a name (`args.path`, `f`).
fn spell(expr: &IdedExpr) -> Option<String> {
    match &expr.expr {
        Expr::Ident(name) => Some(name.clone()),
        Expr::Select(select) if !select.test => Some(format!("{}.{}", spell(&select.operand)?, select.field)),
        _ => None,
    }
}

/// Whether a name's words (split at `_`, `-`, `.` and lower-to-upper case
/// changes) include one of [`LOCATION_WORDS`].
fn looks_like_location(name: &str) -> bool {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut previous_lower = false;
    for c in name.chars() {
        if !c.is_alphanumeric() || (c.is_uppercase() && previous_lower) {
            words.push(std::mem::take(&mut word));
        }
        if c.is_alphanumeric() {
            word.extend(c.to_lowercase());
        }
        previous_lower = c.is_lowercase() || c.is_ascii_digit();
    }
    words.push(word);
    words.iter().any(|w| LOCATION_WORDS.contains(&w.as_str()))
}

#[cfg(test)]
mod tests {
    use super::looks_like_location;

    #[test]
    fn names_that_hold_a_path_or_url_are_recognised_by_their_words() {
        for name in ["path", "filePath", "target_dir", "redirect_uri", "URL", "repoUrl", "dest", "src", "files"] {
            assert!(looks_like_location(name), "{name}");
        }
        for name in ["branch", "direction", "description", "message", "sources2x", "pathological"] {
            assert!(!looks_like_location(name), "{name}");
        }
    }
}
