//! An evaluation error in words that are short and never copy the call's
//! values: cel's own messages print the values involved with `{:?}` (a
//! 60 KB list in `args.price * args.quantity` made a 440 KB refusal), and
//! the refusal is shown to the agent, written to the audit log and shown in
//! the console. Values are named by their type; a key or a name only if
//! the condition's source spells it.

use cel::ExecutionError;

use super::functions::written_name;
use super::type_name;

/// The longest evaluation error, in characters.
pub const MAX_ERROR_CHARS: usize = 300;

/// `error` in words (see the module doc), at most [`MAX_ERROR_CHARS`].
pub(super) fn describe(error: &ExecutionError, source: &str) -> String {
    // A name the source spells is the author's own, not the call's.
    let quoted =
        |name: &str| (name.chars().count() <= 60 && source.contains(name)).then(|| format!("`{}`", written_name(name)));
    let text = match error {
        ExecutionError::InvalidArgumentCount { expected, actual } => {
            format!("a function takes {expected} arguments, not {actual}")
        }
        ExecutionError::UnsupportedTargetType { target } => {
            format!("a function cannot be called on {}", type_name(target))
        }
        ExecutionError::NotSupportedAsMethod { method, target } => format!(
            "{} cannot be called on {}",
            quoted(method).unwrap_or_else(|| "a function".into()),
            type_name(target)
        ),
        ExecutionError::UnsupportedKeyType(value) => format!("{} cannot be a map key", type_name(value)),
        ExecutionError::UnexpectedType { got, want } => {
            // `got` is sometimes a type's name, sometimes a value printed.
            let got = if got.len() <= 20 && got.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                got.as_str()
            } else {
                "another type"
            };
            format!("expected {}, got {got}", short(want))
        }
        ExecutionError::NoSuchKey(key) => match quoted(key) {
            Some(key) => format!("no such key: {key}"),
            None => "a key the condition reads is missing".into(),
        },
        ExecutionError::NoSuchOverload(overload) => {
            let types: Vec<&str> = overload.argument_types().iter().map(|t| short(t)).collect();
            format!("{} does not apply to ({})", operator(overload.function()), types.join(", "))
        }
        ExecutionError::UndeclaredReference(name) => match quoted(name) {
            Some(name) => format!("unknown name {name}"),
            None => "an unknown name".into(),
        },
        ExecutionError::MissingArgumentOrTarget => "a function is missing an argument".into(),
        ExecutionError::ValuesNotComparable(a, b) => {
            format!("{} cannot be compared with {}", type_name(a), type_name(b))
        }
        ExecutionError::UnsupportedBinaryOperator(op, a, b) => {
            format!("{} does not apply to {} and {}", operator(op), type_name(a), type_name(b))
        }
        ExecutionError::UnsupportedIndex(index, target) => {
            format!("{} cannot be indexed with {}", type_name(target), type_name(index))
        }
        ExecutionError::FunctionError { function, message } => match written_name(function) {
            // Gatehouse's own functions' messages name no value.
            name @ ("path_under" | "url_under" | "url_host" | "matches") => format!("`{name}`: {message}"),
            _ => format!(
                "{} could not read its argument (a malformed number, time, duration, zone or text)",
                quoted(function).unwrap_or_else(|| "a function".into())
            ),
        },
        ExecutionError::DivisionByZero(_) => "division by zero".into(),
        ExecutionError::RemainderByZero(_) => "remainder of a division by zero".into(),
        ExecutionError::Overflow(op, ..) => format!("{} overflows", operator(op)),
        ExecutionError::IndexOutOfBounds(_) => "a list index is out of range".into(),
        ExecutionError::DuplicateKey(_) => "a map repeats a key".into(),
        _ => "the condition could not be evaluated".into(),
    };
    bounded(text)
}

/// An operator as written (`*`, not `_*_` or `mul`), a function in backquotes.
fn operator(name: &str) -> String {
    let written = match name {
        "add" | "_+_" => "+",
        "sub" | "_-_" | "-_" => "-",
        "mul" | "_*_" => "*",
        "div" | "_/_" => "/",
        "rem" | "_%_" => "%",
        "_==_" => "==",
        "_!=_" => "!=",
        "_<_" => "<",
        "_<=_" => "<=",
        "_>_" => ">",
        "_>=_" => ">=",
        "!_" => "!",
        "@in" => "in",
        "_&&_" => "&&",
        "_||_" => "||",
        "_[_]" | "_[?_]" => "[]",
        "_._" | "_?._" => ".",
        other => written_name(other),
    };
    format!("`{}`", short(written))
}

/// A type's name, cut short (they are short; this is a bound).
fn short(name: &str) -> &str {
    match name.char_indices().nth(40) {
        Some((end, _)) => &name[..end],
        None => name,
    }
}

/// `text` cut to [`MAX_ERROR_CHARS`] characters.
pub(super) fn bounded(text: String) -> String {
    match text.char_indices().nth(MAX_ERROR_CHARS - 1) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text,
    }
}
