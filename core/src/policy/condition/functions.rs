//! The functions a condition may call: CEL's standard library as cel 0.15
//! declares it (no extensions), its macros, and Gatehouse's own, which read
//! a value as its receiver resolves it ([`crate::normalise`]):
//! `path_under(value, prefix)`, `url_under(value, prefix)`, `url_host(url)`.
//!
//! CEL resolves a function by name only when it is called, so a misspelt
//! or unknown one would fail every evaluation (and so block every call the
//! rule could match). [`check_call`] refuses it when the rule is compiled.
//!
//! `matches` compiles its pattern on every call (some 15 µs; for each
//! element of a list, hundreds of milliseconds): [`compile_patterns`] compiles
//! a literal pattern once, when the condition is, and a pattern that is a
//! value with a size bound.

use std::sync::{Arc, LazyLock};

use cel::ExecutionError;
use cel::common::ast::{CallExpr, Expr, IdedExpr, LiteralValue};
use cel::common::types::{CelBool, CelString};
use cel::{Context, Env};
use regex::{Regex, RegexBuilder};

use super::ConditionError;
use crate::normalise;

/// The largest compiled form of a `matches` pattern (bytes; the `regex`
/// crate's default is 10 MiB): bounds the time to compile one and to
/// match with it.
pub(super) const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// The function a `matches` whose pattern is a value is rewritten to.
pub(super) const MATCHES_VALUE: &str = "@matches";

/// The prefix of the functions `matches` with a literal pattern is
/// rewritten to (one per compiled pattern; names a user cannot write).
pub(super) const MATCHES_LITERAL: &str = "@re";

// One environment for every condition: building CEL's standard library is
// not free, and it never changes.
pub(super) static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(env()));

fn env() -> Env {
    let mut env = Env::stdlib();
    cel::add_overload!(env, fn path_under: (CelString, CelString) -> Result<CelBool>, name = "path_under")
        .expect("a new function");
    cel::add_overload!(env, fn url_under: (CelString, CelString) -> Result<CelBool>, name = "url_under")
        .expect("a new function");
    cel::add_overload!(env, fn url_host: (CelString) -> Result<CelString>, name = "url_host").expect("a new function");
    cel::add_overload!(env, fn matches_value: (CelString, CelString) -> Result<CelBool>, name = MATCHES_VALUE)
        .expect("a new function");
    env
}

fn path_under(value: &CelString<'_>, prefix: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    normalise::path_under(value.inner(), prefix.inner())
        .map(CelBool::from)
        .map_err(|e| ExecutionError::function_error("path_under", e))
}

fn url_under(value: &CelString<'_>, prefix: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    normalise::url_under(value.inner(), prefix.inner())
        .map(CelBool::from)
        .map_err(|e| ExecutionError::function_error("url_under", e))
}

fn url_host(url: &CelString<'_>) -> Result<CelString<'static>, ExecutionError> {
    normalise::url_host(url.inner())
        .map(CelString::from)
        .map_err(|e| ExecutionError::function_error("url_host", format!("the value cannot be resolved safely: {e}")))
}

/// `matches` with a pattern that is a value: compiled on each call, within
/// [`PATTERN_SIZE_LIMIT`] (the cost estimate counts the compiling).
fn matches_value(text: &CelString<'_>, pattern: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    let regex = pattern_regex(pattern.inner())
        .map_err(|_| ExecutionError::function_error("matches", "the pattern is not a valid regular expression"))?;
    Ok(CelBool::from(regex.is_match(text.inner())))
}

fn pattern_regex(pattern: &str) -> Result<Regex, regex::Error> {
    RegexBuilder::new(pattern).size_limit(PATTERN_SIZE_LIMIT).dfa_size_limit(PATTERN_SIZE_LIMIT).build()
}

/// A function a condition may call.
struct Function {
    name: &'static str,
    /// How many arguments it takes called as `name(…)`.
    global: &'static [usize],
    /// How many it takes called as `x.name(…)` (`x` not counted).
    method: &'static [usize],
    /// How it is called, for the error that says so.
    usage: &'static str,
}

const fn f(name: &'static str, global: &'static [usize], method: &'static [usize], usage: &'static str) -> Function {
    Function { name, global, method, usage }
}

const TIME: &str = "time.getHours() or time.getHours(\"Europe/Paris\") (and the like)";

/// Every function a condition may call, Gatehouse's first. The macros are
/// expanded by the parser; one left as a call was called the wrong way.
const FUNCTIONS: &[Function] = &[
    f("path_under", &[2], &[], "path_under(value, \"/prefix/\")"),
    f("url_under", &[2], &[], "url_under(value, \"https://host/prefix/\")"),
    f("url_host", &[1], &[], "url_host(value)"),
    f("size", &[1], &[0], "size(x) or x.size()"),
    f("contains", &[], &[1], "text.contains(part)"),
    f("startsWith", &[], &[1], "text.startsWith(prefix)"),
    f("endsWith", &[], &[1], "text.endsWith(suffix)"),
    f("matches", &[2], &[1], "text.matches(pattern) or matches(text, pattern)"),
    f("int", &[1], &[], "int(x)"),
    f("uint", &[1], &[], "uint(x)"),
    f("double", &[1], &[], "double(x)"),
    f("string", &[1], &[], "string(x)"),
    f("bool", &[1], &[], "bool(x)"),
    f("bytes", &[1], &[], "bytes(x)"),
    f("dyn", &[1], &[], "dyn(x)"),
    f("type", &[1], &[], "type(x)"),
    f("timestamp", &[1], &[], "timestamp(x)"),
    f("duration", &[1], &[], "duration(x)"),
    f("getFullYear", &[], &[0, 1], TIME),
    f("getMonth", &[], &[0, 1], TIME),
    f("getDayOfYear", &[], &[0, 1], TIME),
    f("getDayOfMonth", &[], &[0, 1], TIME),
    f("getDate", &[], &[0, 1], TIME),
    f("getDayOfWeek", &[], &[0, 1], TIME),
    f("getHours", &[], &[0, 1], TIME),
    f("getMinutes", &[], &[0, 1], TIME),
    f("getSeconds", &[], &[0, 1], TIME),
    f("getMilliseconds", &[], &[0, 1], TIME),
    f("value", &[], &[0], "optional.value()"),
    f("hasValue", &[], &[0], "optional.hasValue()"),
    f("or", &[], &[1], "optional.or(other)"),
    f("orValue", &[], &[1], "optional.orValue(default)"),
];

/// The macros, as they must be called (the parser expands them).
const MACROS: &[(&str, &str)] = &[
    ("has", "has(args.field)"),
    ("all", "list.all(x, condition)"),
    ("exists", "list.exists(x, condition)"),
    ("exists_one", "list.exists_one(x, condition)"),
    ("existsOne", "list.existsOne(x, condition)"),
    ("map", "list.map(x, value) or list.map(x, condition, value)"),
    ("filter", "list.filter(x, condition)"),
    ("optMap", "optional.optMap(x, value)"),
    ("optFlatMap", "optional.optFlatMap(x, optional)"),
];

/// The functions and macros a condition may call, as the error lists them.
pub(super) fn known() -> String {
    let functions: Vec<&str> = FUNCTIONS.iter().map(|f| f.name).collect();
    let macros: Vec<&str> = MACROS.iter().map(|(name, _)| *name).filter(|n| *n != "existsOne").collect();
    format!("{}; and the macros {}", functions.join(", "), macros.join(", "))
}

/// Whether an operator's call: CEL spells them `_+_`, `!_`, `-_`, `@in`.
pub(super) fn is_operator(name: &str) -> bool {
    name.starts_with(['_', '!', '-', '@'])
}

/// Refuses a call to a function that does not exist, or with a number of
/// arguments (or a way of calling, `f(x)` or `x.f()`) it does not take.
pub(super) fn check_call(name: &str, method: bool, arguments: usize) -> Result<(), ConditionError> {
    if is_operator(name) {
        return Ok(());
    }
    if let Some((_, usage)) = MACROS.iter().find(|(macro_name, _)| *macro_name == name) {
        return Err(ConditionError::Arguments { name: name.into(), usage: (*usage).into() });
    }
    let Some(function) = FUNCTIONS.iter().find(|f| f.name == name) else {
        return Err(ConditionError::UnknownFunction { name: name.chars().take(60).collect() });
    };
    let takes = if method { function.method } else { function.global };
    if takes.contains(&arguments) {
        Ok(())
    } else {
        Err(ConditionError::Arguments { name: name.into(), usage: function.usage.into() })
    }
}

/// Rewrites each `matches` call: with a literal pattern, to a function of
/// its own that holds the pattern compiled (refused here if it does not
/// compile); with a pattern that is a value, to [`MATCHES_VALUE`]. Returns
/// the compiled patterns, in the order of their functions' numbers.
pub(super) fn compile_patterns(expr: &mut IdedExpr, first_id: u64) -> Result<Vec<Regex>, ConditionError> {
    let mut patterns = Vec::new();
    rewrite(expr, first_id, &mut patterns)?;
    Ok(patterns)
}

/// The name of a condition's `n`th literal pattern's function; `id` keeps
/// it apart from every other condition's in a context they share.
pub(super) fn pattern_function(id: u64, n: usize) -> String {
    format!("{MATCHES_LITERAL}{id}_{n}")
}

fn rewrite(expr: &mut IdedExpr, id: u64, patterns: &mut Vec<Regex>) -> Result<(), ConditionError> {
    match &mut expr.expr {
        Expr::Unspecified | Expr::Literal(_) | Expr::Ident(_) | Expr::Struct(_) => Ok(()),
        Expr::Select(select) => rewrite(&mut select.operand, id, patterns),
        Expr::List(list) => list.elements.iter_mut().try_for_each(|e| rewrite(e, id, patterns)),
        Expr::Map(map) => map.entries.iter_mut().try_for_each(|entry| match &mut entry.expr {
            cel::common::ast::EntryExpr::StructField(field) => rewrite(&mut field.value, id, patterns),
            cel::common::ast::EntryExpr::MapEntry(pair) => {
                rewrite(&mut pair.key, id, patterns)?;
                rewrite(&mut pair.value, id, patterns)
            }
        }),
        Expr::Comprehension(comp) => {
            for part in
                [&mut comp.iter_range, &mut comp.accu_init, &mut comp.loop_cond, &mut comp.loop_step, &mut comp.result]
            {
                rewrite(part, id, patterns)?;
            }
            Ok(())
        }
        Expr::Call(call) => {
            if let Some(target) = &mut call.target {
                rewrite(target, id, patterns)?;
            }
            call.args.iter_mut().try_for_each(|arg| rewrite(arg, id, patterns))?;
            if call.func_name != "matches" {
                return Ok(());
            }
            let mut operands: Vec<IdedExpr> = call.target.take().map(|t| *t).into_iter().collect();
            operands.append(&mut call.args);
            let [text, pattern] = <[IdedExpr; 2]>::try_from(operands).map_err(|_| ConditionError::Arguments {
                name: "matches".into(),
                usage: "text.matches(pattern) or matches(text, pattern)".into(),
            })?;
            *call = match &pattern.expr {
                Expr::Literal(LiteralValue::String(literal)) => {
                    let regex = pattern_regex(literal.inner()).map_err(|e| ConditionError::Pattern {
                        pattern: literal.inner().chars().take(60).collect(),
                        why: pattern_error(&e),
                    })?;
                    patterns.push(regex);
                    CallExpr { func_name: pattern_function(id, patterns.len() - 1), target: None, args: vec![text] }
                }
                _ => CallExpr { func_name: MATCHES_VALUE.into(), target: None, args: vec![text, pattern] },
            };
            Ok(())
        }
    }
}

/// The `regex` crate's error, first line only (its message repeats the
/// pattern and draws a caret under it).
fn pattern_error(error: &regex::Error) -> String {
    match error {
        regex::Error::CompiledTooBig(_) => "it compiles to more than 1 MiB".into(),
        other => {
            let text = other.to_string();
            text.lines().rev().find(|l| l.starts_with("error:")).unwrap_or("it does not parse").to_string()
        }
    }
}

/// Adds a condition's compiled patterns to `context` as the functions its
/// rewritten `matches` calls name.
pub(super) fn add_patterns(context: &mut Context<'_, '_>, id: u64, patterns: &[Regex]) -> Result<(), String> {
    for (n, regex) in patterns.iter().enumerate() {
        let regex = regex.clone();
        context
            .add_function(&pattern_function(id, n), move |text: Arc<String>| regex.is_match(&text))
            .map_err(|_| "a pattern could not be prepared".to_string())?;
    }
    Ok(())
}

/// The name a user wrote for a function CEL reports: a rewritten `matches`
/// is `matches`.
pub(super) fn written_name(name: &str) -> &str {
    if name.starts_with(MATCHES_LITERAL) || name == MATCHES_VALUE { "matches" } else { name }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_function_is_one_cel_declares() {
        // `Context::add_function` refuses a name the environment declares:
        // a way to ask which names it declares.
        let mut context = Context::with_env(ENV.clone());
        for function in FUNCTIONS {
            assert!(context.add_function(function.name, |x: i64| x).is_err(), "{} is not declared", function.name);
        }
        assert!(context.add_function("path_undr", |x: i64| x).is_ok(), "the probe tells names apart");
        assert!(context.add_function("max", |x: i64| x).is_ok(), "no extensions: `max` is not CEL's here");
    }

    #[test]
    fn calls_are_checked_by_name_and_arity() {
        assert_eq!(check_call("path_under", false, 2), Ok(()));
        assert_eq!(check_call("_+_", false, 2), Ok(()));
        assert_eq!(check_call("startsWith", true, 1), Ok(()));
        assert!(matches!(check_call("path_under", false, 3), Err(ConditionError::Arguments { .. })));
        assert!(matches!(check_call("startsWith", false, 2), Err(ConditionError::Arguments { .. })));
        assert!(matches!(check_call("all", true, 1), Err(ConditionError::Arguments { .. })));
        assert_eq!(
            check_call("pathUnder", false, 2),
            Err(ConditionError::UnknownFunction { name: "pathUnder".into() })
        );
    }
}
