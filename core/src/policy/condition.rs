//! A rule's `when`: a condition on the call in CEL (the Common Expression
//! Language), compiled when the rule is loaded or saved and evaluated for
//! each call it could match.
//!
//! **What it may use.** The call's `tool, upstream, agent, owner, thread,
//! args, annotations` and `now`; CEL's standard functions and macros; and
//! `path_under(value, prefix)`, `url_under(value, prefix)` and
//! `url_host(value)`, which compare a value as its receiver resolves it
//! ([`crate::normalise::path_under`]: dot segments and repeated slashes
//! resolved, WHATWG URL parsing), where `startsWith` compares text and is
//! escaped by `/srv/./prod`. A name, a function or a number of arguments
//! that does not exist is refused when the rule is saved, not on every call
//! ([`ConditionError`]); [`Condition::warnings`] points out text tests on
//! arguments that look like paths or URLs.
//!
//! **Bounded.** The source is at most [`MAX_SOURCE_CHARS`]; comprehensions
//! (`all`, `exists`, `map`, `filter`) may not run inside another's loop; the
//! arguments it reads are at most [`MAX_ARGUMENTS_BYTES`]; a `matches`
//! pattern written in the condition is compiled once, with it. And its
//! worst case over arguments that large is estimated when it is compiled
//! (`cost.rs`): one over [`COST_BUDGET`] units (about 100 ms of one core)
//! is refused, naming what costs most — for each element of a list,
//! reading another whole argument (`in`, `contains`, `+`) or compiling a
//! pattern that is a value, which cost seconds. So one evaluation costs at
//! most about 100 ms, and the gate runs the costly ones off the async
//! threads ([`super::PolicyStore::decide`], [`super::evaluations`]).
//!
//! **Total, and short when it fails.** Every way an evaluation can fail is
//! an `Err` that the decision procedure counts against the call, never for
//! it; its text is at most [`MAX_ERROR_CHARS`] characters and names types,
//! never the call's values (`errors.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::{Context, Value as Cel};
use regex::Regex;
use serde_json::Value;

mod cost;
mod errors;
mod functions;
mod warnings;

pub use cost::COST_BUDGET;
pub use errors::MAX_ERROR_CHARS;

use functions::ENV;

/// The longest condition accepted (characters).
pub const MAX_SOURCE_CHARS: usize = 2000;

/// The largest arguments a condition is evaluated on (their JSON, bytes);
/// a larger call fails the condition, which counts as the rule's strictest match.
pub const MAX_ARGUMENTS_BYTES: usize = 64 * 1024;

/// The names a condition may use, besides its own comprehension variables.
pub const VARIABLES: [&str; 8] = ["tool", "upstream", "agent", "owner", "thread", "args", "annotations", "now"];

/// Type names CEL lets an expression mention (`type(args.n) == int`).
const TYPE_NAMES: [&str; 11] =
    ["int", "uint", "double", "string", "bool", "bytes", "list", "map", "null_type", "type", "timestamp"];

/// Why a condition was refused when it was loaded or saved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConditionError {
    /// It does not parse; the message gives the line and column.
    #[error("{0}")]
    Syntax(String),
    /// It names something a call does not have.
    #[error("unknown name {0:?}; a condition may use tool, upstream, agent, owner, thread, args, annotations and now")]
    Unknown(String),
    /// It calls a function that does not exist.
    #[error("there is no function `{name}`; a condition may call {}", functions::known())]
    UnknownFunction {
        /// The function's name as written.
        name: String,
    },
    /// It calls a function with a number of arguments it does not take, or
    /// as a method when it is not one (or the other way round).
    #[error("`{name}` is called as {usage}")]
    Arguments {
        /// The function's name.
        name: String,
        /// How it is called.
        usage: String,
    },
    /// A `matches` pattern that is not a valid regular expression, or
    /// compiles to more than 1 MiB.
    #[error("the pattern {pattern:?} is not one `matches` can use: {why}")]
    Pattern {
        /// The pattern (its first 60 characters).
        pattern: String,
        /// Why.
        why: String,
    },
    /// Its worst case on the largest arguments costs more than [`COST_BUDGET`].
    #[error(
        "this condition could cost up to {estimate} units on the largest arguments ({MAX_ARGUMENTS_BYTES} bytes), over the budget of {COST_BUDGET} (about 100 ms); the costliest part: {heaviest}"
    )]
    TooCostly {
        /// The estimate.
        estimate: u64,
        /// What costs most, in words.
        heaviest: String,
    },
    /// A comprehension runs inside another's loop (unbounded in practice).
    #[error(
        "`all`, `exists`, `exists_one`, `map` and `filter` may not run inside one another: evaluation must stay bounded"
    )]
    Nested,
    /// Empty, or longer than [`MAX_SOURCE_CHARS`].
    #[error("a condition is 1 to {MAX_SOURCE_CHARS} characters")]
    Length,
    /// It evaluates to something other than true or false.
    #[error("a condition must be true or false; this one gives {0}")]
    NotBool(String),
}

// Each condition's own number: its compiled patterns are functions named
// with it, apart from every other condition's in a context they share.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// A compiled condition.
#[derive(Clone)]
pub struct Condition {
    expr: Arc<IdedExpr>,
    patterns: Arc<[Regex]>,
    id: u64,
    cost: u64,
    source: Arc<str>,
}

impl std::fmt::Debug for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Condition")
    }
}

/// What a condition sees of one call.
#[derive(Debug, Clone, Copy)]
pub struct CallView<'a> {
    /// The exposed tool name.
    pub tool: &'a str,
    /// Its upstream (none: Gatehouse's own tool).
    pub upstream: Option<&'a str>,
    /// The agent calling.
    pub agent: &'a str,
    /// The agent's owner, if it has one.
    pub owner: Option<&'a str>,
    /// The agent's thread, if it names one.
    pub thread: Option<&'a str>,
    /// The call's arguments.
    pub arguments: &'a Value,
    /// The tool's annotations as its server sent them (`readOnlyHint`, …).
    pub annotations: &'a Value,
    /// When the call is decided (Unix ms).
    pub now_ms: i64,
}

/// A call's values as conditions see them, made once for all the
/// conditions evaluated on the call: making 64 KiB of arguments CEL values
/// takes milliseconds.
pub struct Bindings {
    // `Err`: the arguments are too large to look at.
    context: Result<Context<'static, 'static>, String>,
}

impl Bindings {
    /// The call's values, or why a condition cannot look at them.
    pub fn new(call: &CallView<'_>) -> Self {
        if arguments_bytes(call.arguments) > MAX_ARGUMENTS_BYTES {
            return Bindings {
                context: Err(format!(
                    "the arguments are over {MAX_ARGUMENTS_BYTES} bytes; a condition is evaluated on at most {MAX_ARGUMENTS_BYTES}"
                )),
            };
        }
        let mut context = Context::with_env(ENV.clone());
        let text = |s: Option<&str>| s.map_or(Cel::Null, Cel::from);
        context.add_variable_from_value("tool", call.tool);
        context.add_variable_from_value("upstream", text(call.upstream));
        context.add_variable_from_value("agent", call.agent);
        context.add_variable_from_value("owner", text(call.owner));
        context.add_variable_from_value("thread", text(call.thread));
        context.add_variable_from_value("args", json(call.arguments));
        context.add_variable_from_value("annotations", json(call.annotations));
        let now = chrono::DateTime::from_timestamp_millis(call.now_ms).unwrap_or_default().fixed_offset();
        context.add_variable_from_value("now", Cel::Timestamp(now));
        Bindings { context: Ok(context) }
    }
}

/// The size of `arguments` as JSON (bytes), counted up to just past
/// [`MAX_ARGUMENTS_BYTES`]: a larger value is not serialised whole.
pub fn arguments_bytes(arguments: &Value) -> usize {
    let mut counter = Counter { bytes: 0 };
    let _ = serde_json::to_writer(&mut counter, arguments);
    counter.bytes
}

/// Counts the bytes of JSON written to it, and stops the writing past
/// [`MAX_ARGUMENTS_BYTES`].
struct Counter {
    bytes: usize,
}

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes += buf.len();
        if self.bytes > MAX_ARGUMENTS_BYTES {
            return Err(std::io::Error::other("too large"));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Condition {
    /// Compiles `source`, or says why not (with the position, for syntax):
    /// names, functions and their arguments checked, literal `matches`
    /// patterns compiled, the worst-case cost estimated.
    pub fn compile(source: &str) -> Result<Self, ConditionError> {
        if source.trim().is_empty() || source.chars().count() > MAX_SOURCE_CHARS {
            return Err(ConditionError::Length);
        }
        let mut expr =
            ENV.parser().parse(source).map_err(|e| ConditionError::Syntax(syntax_message(&e.to_string())))?;
        check(&expr, &mut Vec::new(), false)?;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let patterns = functions::compile_patterns(&mut expr, id)?;
        let worst = cost::estimate(&expr);
        if worst.cost > COST_BUDGET {
            return Err(ConditionError::TooCostly { estimate: worst.cost, heaviest: worst.heaviest });
        }
        let condition =
            Condition { expr: Arc::new(expr), patterns: patterns.into(), id, cost: worst.cost, source: source.into() };
        // A type error that does not depend on the call (`1 + 1`, `tool`)
        // shows on an empty call; one that does (`args.n > 1` on an absent
        // `n`) is an evaluation error, which fails closed.
        let sample = CallView {
            tool: "tool",
            upstream: None,
            agent: "agent",
            owner: None,
            thread: None,
            arguments: &Value::Object(Default::default()),
            annotations: &Value::Object(Default::default()),
            now_ms: 0,
        };
        if let Ok(value) = condition.value(&mut Bindings::new(&sample))
            && !matches!(value, Cel::Bool(_))
        {
            return Err(ConditionError::NotBool(type_name(&value).into()));
        }
        Ok(condition)
    }

    /// Warnings in plain words for a condition that compiles but may not do
    /// what its author means: a text test (`startsWith`, `contains`,
    /// `endsWith`, `matches`) on an argument whose name says it holds a
    /// path or a URL, with the `path_under` or `url_under` to use instead.
    /// None for a condition that does not parse (compiling says why).
    pub fn warnings(source: &str) -> Vec<String> {
        match ENV.parser().parse(source) {
            Ok(expr) => warnings::warnings(&expr),
            Err(_) => Vec::new(),
        }
    }

    /// Its estimated worst case on the largest arguments (see
    /// [`COST_BUDGET`]): what one evaluation may cost.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// Whether the call meets the condition; `Err` says why it could not
    /// be told (the caller counts that as the strictest match), in at most
    /// [`MAX_ERROR_CHARS`] characters.
    pub fn eval(&self, call: &CallView<'_>) -> Result<bool, String> {
        self.eval_with(&mut Bindings::new(call))
    }

    /// [`Condition::eval`] on a call's values made once ([`Bindings`]).
    pub fn eval_with(&self, bindings: &mut Bindings) -> Result<bool, String> {
        match self.value(bindings)? {
            Cel::Bool(b) => Ok(b),
            other => Err(format!("the condition gave {}, not true or false", type_name(&other))),
        }
    }

    fn value(&self, bindings: &mut Bindings) -> Result<Cel, String> {
        let context = bindings.context.as_mut().map_err(|why| why.clone())?;
        functions::add_patterns(context, self.id, &self.patterns)?;
        Cel::resolve(&self.expr, context).map_err(|e| errors::describe(&e, &self.source))
    }
}

/// CEL's parser message as a person reads it: where (`line 1, column 5`)
/// and what is wrong in plain words, without the parser's list of tokens it
/// expected (`missing ')' at '<EOF>'` → "a ')' is missing at the end").
fn syntax_message(message: &str) -> String {
    let first = message.lines().next().unwrap_or(message);
    let short = first.strip_prefix("ERROR: <input>:").unwrap_or(first);
    let mut parts = short.splitn(3, ':');
    let (line, column, rest) = (parts.next(), parts.next(), parts.next());
    let (Some(line), Some(column), Some(rest)) = (line, column, rest) else {
        return errors::bounded(short.to_string());
    };
    let what = rest.trim().strip_prefix("Syntax error:").unwrap_or(rest).trim();
    errors::bounded(format!("line {line}, column {column}: {}", plain_syntax(what)))
}

/// The ANTLR phrases CEL's parser uses, in words. `'<EOF>'` is the end.
fn plain_syntax(what: &str) -> String {
    // The token a phrase names: the text between the first pair of quotes.
    let quoted = |s: &str| -> String {
        let token = s.split('\'').nth(1).unwrap_or(s);
        if token == "<EOF>" { "the end".into() } else { format!("'{token}'") }
    };
    // ANTLR quotes its expected tokens in braces; they say little to a person.
    let before_expecting = |s: &str| s.split(" expecting").next().unwrap_or(s).to_string();
    if let Some(rest) = what.strip_prefix("missing ") {
        let (token, at) = rest.split_once(" at ").unwrap_or((rest, "'<EOF>'"));
        return match quoted(at).as_str() {
            "the end" => format!("{token} is missing at the end"),
            at => format!("{token} is missing before {at}"),
        };
    }
    for prefix in ["mismatched input ", "extraneous input "] {
        if let Some(rest) = what.strip_prefix(prefix) {
            return match quoted(&before_expecting(rest)).as_str() {
                "the end" => "it ends too soon".into(),
                token => format!("{token} is not expected here"),
            };
        }
    }
    if let Some(rest) = what.strip_prefix("no viable alternative at input ") {
        return format!("it cannot be read on from {}", quoted(rest));
    }
    if let Some(rest) = what.strip_prefix("token recognition error at: ") {
        return format!("{} is not something a condition can hold", quoted(rest));
    }
    before_expecting(what)
}

/// Refuses unknown names, unknown functions or arities, and a
/// comprehension inside another's loop.
fn check(expr: &IdedExpr, scope: &mut Vec<String>, in_loop: bool) -> Result<(), ConditionError> {
    match &expr.expr {
        Expr::Unspecified | Expr::Literal(_) => Ok(()),
        Expr::Ident(name) => {
            let known = name.starts_with('@')
                || VARIABLES.contains(&name.as_str())
                || TYPE_NAMES.contains(&name.as_str())
                || scope.iter().any(|s| s == name);
            if known { Ok(()) } else { Err(ConditionError::Unknown(name.clone())) }
        }
        Expr::Select(select) => check(&select.operand, scope, in_loop),
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                check(target, scope, in_loop)?;
            }
            functions::check_call(&call.func_name, call.target.is_some(), call.args.len())?;
            call.args.iter().try_for_each(|arg| check(arg, scope, in_loop))
        }
        Expr::List(list) => list.elements.iter().try_for_each(|e| check(e, scope, in_loop)),
        Expr::Map(map) => map.entries.iter().try_for_each(|entry| match &entry.expr {
            EntryExpr::StructField(field) => check(&field.value, scope, in_loop),
            EntryExpr::MapEntry(pair) => {
                check(&pair.key, scope, in_loop)?;
                check(&pair.value, scope, in_loop)
            }
        }),
        Expr::Struct(_) => Err(ConditionError::Unknown("a message type".into())),
        Expr::Comprehension(comp) => {
            if in_loop {
                return Err(ConditionError::Nested);
            }
            // The range and the initial value are evaluated once.
            check(&comp.iter_range, scope, false)?;
            check(&comp.accu_init, scope, false)?;
            let added = 2 + usize::from(comp.iter_var2.is_some());
            scope.push(comp.iter_var.clone());
            scope.push(comp.accu_var.clone());
            scope.extend(comp.iter_var2.clone());
            let body = check(&comp.loop_cond, scope, true)
                .and_then(|()| check(&comp.loop_step, scope, true))
                .and_then(|()| check(&comp.result, scope, false));
            scope.truncate(scope.len() - added);
            body
        }
    }
}

/// A JSON value as CEL sees it: integers stay integers, so `args.n > 100` works.
fn json(value: &Value) -> Cel {
    match value {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Cel::Int(i),
            (None, Some(u)) => Cel::UInt(u),
            _ => Cel::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Cel::from(s.as_str()),
        Value::Array(items) => Cel::List(Arc::new(items.iter().map(json).collect())),
        Value::Object(map) => {
            let map: std::collections::HashMap<String, Cel> = map.iter().map(|(k, v)| (k.clone(), json(v))).collect();
            Cel::from(map)
        }
    }
}

fn type_name(value: &Cel) -> &'static str {
    match value {
        Cel::List(_) => "a list",
        Cel::Map(_) => "a map",
        Cel::Function(..) => "a function",
        Cel::Int(_) | Cel::UInt(_) => "an integer",
        Cel::Float(_) => "a number",
        Cel::String(_) => "a string",
        Cel::Bytes(_) => "bytes",
        Cel::Bool(_) => "true or false",
        Cel::Duration(_) => "a duration",
        Cel::Timestamp(_) => "a time",
        Cel::Opaque(_) | Cel::Struct(_) => "a value",
        Cel::Null => "null",
    }
}

#[cfg(test)]
mod tests;
