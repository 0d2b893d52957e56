//! A rule's `when`: a condition on the call in CEL (the Common Expression
//! Language), compiled when the rule is loaded or saved and evaluated for
//! each call it could match.
//!
//! Evaluation is bounded: the source is short, comprehensions (`all`,
//! `exists`, `map`, `filter`) may not run inside another's loop, and the
//! arguments it sees are at most [`MAX_ARGUMENTS_BYTES`]. So one evaluation
//! is linear in the arguments. It is also total: every way it can fail is an
//! `Err` that the decision procedure counts against the call, never for it.

use std::sync::{Arc, LazyLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::{Context, Env, Program, Value as Cel};
use serde_json::Value;

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

// One environment for every condition: building CEL's standard library is
// not free, and it never changes.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(Env::stdlib()));

/// Why a condition was refused when it was loaded or saved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConditionError {
    /// It does not parse; the message gives the line and column.
    #[error("{0}")]
    Syntax(String),
    /// It names something a call does not have.
    #[error("unknown name {0:?}; a condition may use tool, upstream, agent, owner, thread, args, annotations and now")]
    Unknown(String),
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

/// A compiled condition.
#[derive(Clone)]
pub struct Condition {
    program: Arc<Program>,
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

impl Condition {
    /// Compiles `source`, or says why not (with the position, for syntax).
    pub fn compile(source: &str) -> Result<Self, ConditionError> {
        if source.trim().is_empty() || source.chars().count() > MAX_SOURCE_CHARS {
            return Err(ConditionError::Length);
        }
        let program = ENV.compile(source).map_err(|e| ConditionError::Syntax(syntax_message(&e.to_string())))?;
        check(program.expression(), &mut Vec::new(), false)?;
        let condition = Condition { program: Arc::new(program) };
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
        if let Ok(value) = condition.value(&sample)
            && !matches!(value, Cel::Bool(_))
        {
            return Err(ConditionError::NotBool(type_name(&value).into()));
        }
        Ok(condition)
    }

    /// Whether the call meets the condition; `Err` says why it could not
    /// be told (the caller counts that as the strictest match).
    pub fn eval(&self, call: &CallView<'_>) -> Result<bool, String> {
        match self.value(call)? {
            Cel::Bool(b) => Ok(b),
            other => Err(format!("the condition gave {}, not true or false", type_name(&other))),
        }
    }

    fn value(&self, call: &CallView<'_>) -> Result<Cel, String> {
        let size = serde_json::to_vec(call.arguments).map_err(|e| e.to_string())?.len();
        if size > MAX_ARGUMENTS_BYTES {
            return Err(format!(
                "the arguments are {size} bytes; a condition is evaluated on at most {MAX_ARGUMENTS_BYTES}"
            ));
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
        self.program.execute(&context).map_err(|e| e.to_string())
    }
}

/// CEL's message without its `ERROR: <input>:` prefix: `1:5: Syntax error…`.
fn syntax_message(message: &str) -> String {
    let first = message.lines().next().unwrap_or(message);
    let short = first.strip_prefix("ERROR: <input>:").unwrap_or(first);
    format!("at line:column {short}")
}

/// Refuses unknown names and a comprehension inside another's loop.
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
mod tests {
    use serde_json::json;

    use super::*;

    fn call<'a>(arguments: &'a Value, annotations: &'a Value) -> CallView<'a> {
        CallView {
            tool: "git__push",
            upstream: Some("git"),
            agent: "cursor",
            owner: Some("alice"),
            thread: None,
            arguments,
            annotations,
            now_ms: 1_767_268_800_000, // 2026-01-01T12:00:00Z
        }
    }

    fn eval(source: &str, arguments: Value) -> Result<bool, String> {
        let annotations = json!({"destructiveHint": true});
        Condition::compile(source).unwrap().eval(&call(&arguments, &annotations))
    }

    #[test]
    fn the_examples_a_user_writes_evaluate_as_they_read() {
        assert_eq!(eval(r#"args.branch == "main""#, json!({"branch": "main"})), Ok(true));
        assert_eq!(eval(r#"args.branch == "main""#, json!({"branch": "dev"})), Ok(false));
        assert_eq!(eval("args.amount > 100", json!({"amount": 150})), Ok(true));
        assert_eq!(eval("args.amount > 100", json!({"amount": 99.5})), Ok(false), "a double against an int");
        assert_eq!(eval("args.amount > 100", json!({"amount": 100.5})), Ok(true));
        assert_eq!(eval(r#"args.path.startsWith("/srv/prod/")"#, json!({"path": "/srv/prod/db"})), Ok(true));
        assert_eq!(eval(r#""force" in args && args.force"#, json!({"force": true})), Ok(true));
        assert_eq!(eval(r#""force" in args && args.force"#, json!({})), Ok(false), "absent: short-circuit");
        assert_eq!(eval(r#"agent == "cursor" && owner == "alice" && upstream == "git""#, json!({})), Ok(true));
        assert_eq!(eval("annotations.destructiveHint", json!({})), Ok(true));
        assert_eq!(eval("now.getHours() == 12", json!({})), Ok(true), "the time of day, UTC");
        assert_eq!(eval("args.files.exists(f, f.endsWith('.env'))", json!({"files": ["a", "b.env"]})), Ok(true));
        assert_eq!(eval("thread == null", json!({})), Ok(true));
        // What the README shows.
        assert_eq!(eval("has(args.amount) && args.amount < 100", json!({})), Ok(false), "absent: false, not an error");
        assert_eq!(eval("has(args.amount) && args.amount < 100", json!({"amount": 5})), Ok(true));
        assert_eq!(eval(r#"now.getHours("Europe/Paris") == 13"#, json!({})), Ok(true), "a zone");
    }

    #[test]
    fn evaluation_errors_are_errors_never_a_value() {
        assert!(eval("args.amount > 100", json!({})).is_err(), "an absent key");
        assert!(eval("args.amount > 100", json!({"amount": "lots"})).is_err(), "a string against an int");
        assert!(eval("args.n / 0 == 1", json!({"n": 1})).is_err());
        assert!(eval("args.x", json!({"x": 3})).is_err(), "not a boolean");
        let big = json!({"blob": "x".repeat(MAX_ARGUMENTS_BYTES)});
        assert!(eval("true", big).unwrap_err().contains("bytes"), "too large to look at");
    }

    #[test]
    fn mistakes_are_refused_when_the_rule_is_saved() {
        let err = Condition::compile("args.branch == ").unwrap_err();
        assert!(matches!(&err, ConditionError::Syntax(m) if m.starts_with("at line:column 1:")), "{err}");
        assert_eq!(Condition::compile("argz.branch == 'x'").unwrap_err(), ConditionError::Unknown("argz".into()));
        assert_eq!(Condition::compile("1 + 1").unwrap_err(), ConditionError::NotBool("an integer".into()));
        assert_eq!(Condition::compile("tool").unwrap_err(), ConditionError::NotBool("a string".into()));
        assert_eq!(Condition::compile("").unwrap_err(), ConditionError::Length);
        assert_eq!(Condition::compile(&"a".repeat(MAX_SOURCE_CHARS + 1)).unwrap_err(), ConditionError::Length);
        let nested = "args.a.all(x, args.b.exists(y, x == y))";
        assert_eq!(Condition::compile(nested).unwrap_err(), ConditionError::Nested);
        // One after another is linear, and allowed.
        assert!(Condition::compile("args.a.filter(x, x > 1).all(y, y < 5)").is_ok());
        assert!(Condition::compile("type(args.n) == int").is_ok());
    }
}
