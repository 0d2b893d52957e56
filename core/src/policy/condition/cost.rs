//! The worst-case cost of one evaluation, estimated when a condition is
//! compiled (as Kubernetes estimates a CEL expression's): every value a
//! condition reads from the call is taken to be as large as the arguments
//! may be ([`MAX_ARGUMENTS_BYTES`]), a list to hold one element per two of
//! those bytes, and each operation to cost what it does in cel 0.15 on
//! values that large. A loop's step is counted once per element; what it
//! does with the element itself is counted against the list's size, since
//! the elements' sizes add up to at most the list's.
//!
//! Units are about a nanosecond of one core of the machine the constants
//! were measured on (`cargo test --release -p gatehouse-core
//! estimates_against_time -- --nocapture` prints estimate and time side
//! by side).
//! Linear work on the largest arguments stays well under [`COST_BUDGET`];
//! work that is quadratic in them (for each element, scan, copy or compare
//! the whole of another argument; compile a pattern that is a value) is
//! over it by tens of times.

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};

use super::MAX_ARGUMENTS_BYTES;
use super::functions::{MATCHES_LITERAL, MATCHES_VALUE};

/// The most a condition may cost on the largest arguments (about 100 ms of
/// one core): enough for a loop over every element of a 64 KiB list that
/// resolves each as a path and as a URL, or does a few dozen operations;
/// twenty times short of anything quadratic in the arguments.
pub const COST_BUDGET: u64 = 100_000_000;

/// The largest a value read from the call may be (bytes).
const LARGEST: u64 = MAX_ARGUMENTS_BYTES as u64;
/// Making the arguments CEL values, per byte of their JSON (a 64 KiB list
/// of one-character strings: about 4 ms).
const CONVERT_BYTE: u64 = 64;
/// One node of the expression, evaluated (a variable, a literal, an operator).
const NODE: u64 = 40;
/// One step of a loop, besides its expression: the element bound to its
/// variable in a scope of its own.
const STEP: u64 = 100;
/// A call to one of several overloads by name (`size`: CEL tries each).
const OVERLOADS: u64 = 500;
/// Per byte scanned, compared or copied.
const BYTE: u64 = 1;
/// Per byte of a list `in` looks through (an equality per element).
const LIST_BYTE: u64 = 6;
/// Per byte a compiled pattern runs over (copied, then matched).
const MATCH_BYTE: u64 = 4;
/// Compiling a pattern that is a value, and per byte of it.
const COMPILE: u64 = 20_000;
const COMPILE_BYTE: u64 = 400;
/// `path_under`, `url_under`, `url_host`: a call, and per byte resolved
/// (up to four percent-decoding rounds, each looking up the compatibility
/// form of every non-ASCII character: the worst case).
const RESOLVE: u64 = 500;
const RESOLVE_BYTE: u64 = 100;
/// Per byte of a literal in plain ASCII (a prefix as written): one pass.
const RESOLVE_PLAIN_BYTE: u64 = 5;
/// Looking up a time zone by name.
const ZONE: u64 = 2_000;
/// The size of a number, a boolean, a time.
const SMALL: u64 = 16;

/// An amount in a loop's step: `fixed`, plus `per` times the size of the
/// element the step is at. Outside a loop `per` is 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Amount {
    fixed: u64,
    per: u64,
}

impl Amount {
    const ELEMENT: Amount = Amount { fixed: 0, per: 1 };

    const fn fixed(fixed: u64) -> Self {
        Amount { fixed, per: 0 }
    }

    fn plus(self, other: Amount) -> Amount {
        Amount { fixed: self.fixed.saturating_add(other.fixed), per: self.per.saturating_add(other.per) }
    }

    fn times(self, factor: u64) -> Amount {
        Amount { fixed: self.fixed.saturating_mul(factor), per: self.per.saturating_mul(factor) }
    }

    fn max(self, other: Amount) -> Amount {
        Amount { fixed: self.fixed.max(other.fixed), per: self.per.max(other.per) }
    }
}

/// The loop a step is in: how many steps at most, and the size of what it
/// runs over (which bounds the sum of its elements' sizes).
#[derive(Debug, Clone, Copy)]
struct Loop {
    steps: u64,
    range: u64,
}

impl Loop {
    fn total(self, amount: Amount) -> u64 {
        self.steps.saturating_mul(amount.fixed).saturating_add(amount.per.saturating_mul(self.range))
    }
}

/// The cost of an expression, the size of its value, and, when known
/// better than from its size, how many elements a loop over it runs.
#[derive(Debug, Clone, Copy, Default)]
struct Estimate {
    cost: Amount,
    size: Amount,
    elements: Option<u64>,
}

/// The worst case of one evaluation: its cost, and the costliest operation
/// in plain words (for the error that refuses it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Worst {
    /// The estimated cost, with making the arguments CEL values.
    pub cost: u64,
    /// What costs most, and how much of it.
    pub heaviest: String,
}

/// Estimates `expr`'s worst case (see the module doc).
pub(super) fn estimate(expr: &IdedExpr) -> Worst {
    let mut estimator = Estimator::default();
    let root = estimator.expr(expr);
    let cost = CONVERT_BYTE.saturating_mul(LARGEST).saturating_add(root.cost.fixed);
    let heaviest = match estimator.heaviest {
        Some((own, what)) if own.saturating_mul(20) >= root.cost.fixed => format!("{what} (about {own} units)"),
        _ if estimator.longest_loop > 0 => format!(
            "each step of a loop over up to {} elements does too much (about {} units in all)",
            estimator.longest_loop, root.cost.fixed
        ),
        _ => format!("the expression as a whole (about {} units)", root.cost.fixed),
    };
    Worst { cost, heaviest }
}

#[derive(Default)]
struct Estimator {
    /// Comprehension variables in scope, with the size of their value.
    scope: Vec<(String, Amount)>,
    /// The loop being estimated, if any.
    in_loop: Option<Loop>,
    /// The accumulator of the loop being estimated, when it is a list
    /// (`map`, `filter`): adding to it appends in place.
    appended: Option<String>,
    /// The costliest single operation: its total, and what it is.
    heaviest: Option<(u64, String)>,
    longest_loop: u64,
}

impl Estimator {
    /// The total of `amount` over the loop it is in, or itself outside one.
    fn total(&self, amount: Amount) -> u64 {
        match self.in_loop {
            Some(lp) => lp.total(amount),
            None => amount.fixed.saturating_add(amount.per.saturating_mul(LARGEST)),
        }
    }

    /// The smaller of two sizes, over the loop they are in.
    fn min(&self, a: Amount, b: Amount) -> Amount {
        if self.total(a) <= self.total(b) { a } else { b }
    }

    fn note(&mut self, own: Amount, what: &str) {
        let total = self.total(own);
        if self.heaviest.as_ref().is_none_or(|(most, _)| total > *most) {
            let what = match self.in_loop {
                Some(lp) => format!("{what}, for each of up to {} elements of a list", lp.steps),
                None => what.to_string(),
            };
            self.heaviest = Some((total, what));
        }
    }

    fn expr(&mut self, expr: &IdedExpr) -> Estimate {
        let node = Amount::fixed(NODE);
        match &expr.expr {
            Expr::Unspecified => Estimate { cost: node, size: Amount::fixed(SMALL), elements: None },
            Expr::Literal(literal) => {
                let size = match literal {
                    LiteralValue::String(s) => s.inner().len() as u64,
                    LiteralValue::Bytes(b) => b.inner().len() as u64,
                    _ => SMALL,
                };
                Estimate { cost: node, size: Amount::fixed(size), elements: None }
            }
            Expr::Ident(name) => {
                let size = match self.scope.iter().rev().find(|(n, _)| n == name) {
                    Some((_, size)) => *size,
                    None if name == "now" || name.starts_with('@') || super::TYPE_NAMES.contains(&name.as_str()) => {
                        Amount::fixed(SMALL)
                    }
                    // `args`, `annotations`, and the names: as large as may be.
                    None => Amount::fixed(LARGEST),
                };
                Estimate { cost: node, size, elements: None }
            }
            Expr::Select(select) => {
                let operand = self.expr(&select.operand);
                let size = if select.test { Amount::fixed(SMALL) } else { operand.size };
                Estimate {
                    cost: operand.cost.plus(Amount::fixed(NODE + select.field.len() as u64)),
                    size,
                    elements: None,
                }
            }
            Expr::List(list) => {
                let count = list.elements.len() as u64;
                let mut all = Estimate { cost: node, size: Amount::fixed(count), elements: Some(count) };
                for element in &list.elements {
                    let element = self.expr(element);
                    // Each element is copied into the new list.
                    all.cost = all.cost.plus(element.cost).plus(element.size.times(BYTE));
                    all.size = all.size.plus(element.size);
                }
                all
            }
            Expr::Map(map) => {
                let count = map.entries.len() as u64;
                let mut all = Estimate { cost: node, size: Amount::fixed(count), elements: Some(count) };
                for entry in &map.entries {
                    let parts: Vec<&IdedExpr> = match &entry.expr {
                        EntryExpr::StructField(field) => vec![&field.value],
                        EntryExpr::MapEntry(pair) => vec![&pair.key, &pair.value],
                    };
                    for part in parts {
                        let part = self.expr(part);
                        all.cost = all.cost.plus(part.cost).plus(part.size.times(BYTE));
                        all.size = all.size.plus(part.size);
                    }
                }
                all
            }
            // Refused when compiled; counted as the largest copy if it came.
            Expr::Struct(_) => Estimate { cost: Amount::fixed(LARGEST), size: Amount::fixed(LARGEST), elements: None },
            Expr::Comprehension(comp) => self.comprehension(comp),
            Expr::Call(call) => self.call(call),
        }
    }

    fn comprehension(&mut self, comp: &cel::common::ast::ComprehensionExpr) -> Estimate {
        if self.in_loop.is_some() {
            // Refused when compiled (loops may not nest): count it as over
            // any budget should it ever come.
            return Estimate { cost: Amount::fixed(u64::MAX / 4), size: Amount::fixed(LARGEST), elements: None };
        }
        let range = self.expr(&comp.iter_range);
        let init = self.expr(&comp.accu_init);
        let range_size = self.total(range.size);
        // An element takes two bytes at least (`0,`).
        let steps = (range_size / 2 + 1).min(range.elements.unwrap_or(u64::MAX));
        let lp = Loop { steps, range: range_size };
        self.longest_loop = self.longest_loop.max(lp.steps);
        // `all`, `exists`, `exists_one` keep a boolean or a count; `map`
        // and `filter` a list, appended to in place.
        let keeps_list = !matches!(comp.accu_init.expr, Expr::Literal(_));
        let scope_len = self.scope.len();
        self.scope.push((comp.iter_var.clone(), Amount::ELEMENT));
        if let Some(second) = &comp.iter_var2 {
            self.scope.push((second.clone(), Amount::ELEMENT));
        }
        self.scope.push((comp.accu_var.clone(), if keeps_list { Amount::default() } else { init.size }));
        self.in_loop = Some(lp);
        self.appended = keeps_list.then(|| comp.accu_var.clone());
        let cond = self.expr(&comp.loop_cond);
        let step = self.expr(&comp.loop_step);
        self.in_loop = None;
        self.appended = None;
        // Binding each element copies it.
        let per_step = Amount { fixed: STEP, per: BYTE }.plus(cond.cost).plus(step.cost);
        let steps = lp.total(per_step);
        let result_size =
            if keeps_list { Amount::fixed(init.size.fixed.saturating_add(lp.total(step.size))) } else { init.size };
        self.scope.truncate(scope_len);
        self.scope.push((comp.accu_var.clone(), result_size));
        let result = self.expr(&comp.result);
        self.scope.truncate(scope_len);
        let cost =
            range.cost.fixed.saturating_add(init.cost.fixed).saturating_add(steps).saturating_add(result.cost.fixed);
        // `map` and `filter` give a list of one element per step at most.
        Estimate { cost: Amount::fixed(cost), size: result.size, elements: keeps_list.then_some(lp.steps) }
    }

    fn call(&mut self, call: &cel::common::ast::CallExpr) -> Estimate {
        let name = call.func_name.as_str();
        let mut operands: Vec<Estimate> = Vec::with_capacity(call.args.len() + 1);
        if let Some(target) = &call.target {
            operands.push(self.expr(target));
        }
        for arg in &call.args {
            operands.push(self.expr(arg));
        }
        let size = |i: usize| operands.get(i).map_or(Amount::default(), |o| o.size);
        let mut children = operands.iter().fold(Amount::default(), |sum, o| sum.plus(o.cost));
        let small = Amount::fixed(SMALL);
        let node = Amount::fixed(NODE);
        let (own, value, what): (Amount, Amount, &str) = match name {
            "_?_:_" => {
                // One branch runs.
                children = operands[0].cost.plus(size_cost(&operands, 1).max(size_cost(&operands, 2)));
                (node, size(1).max(size(2)), "`? :`")
            }
            "_&&_" | "_||_" | "!_" | "-_" | "@not_strictly_false" | "_-_" | "_*_" | "_/_" | "_%_" => {
                (node, small, "arithmetic")
            }
            "_==_" | "_!=_" | "_<_" | "_<=_" | "_>_" | "_>=_" => {
                // Unequal lengths answer at once; otherwise the shorter is read.
                (node.plus(self.min(size(0), size(1)).times(BYTE)), small, "a comparison")
            }
            "_+_" => match call.args.first().map(|a| &a.expr) {
                Some(Expr::Ident(accu)) if self.appended.as_deref() == Some(accu.as_str()) => {
                    (node.plus(size(1).times(BYTE)), size(1), "adding to a list")
                }
                _ => (
                    node.plus(size(0).plus(size(1)).times(BYTE)),
                    size(0).plus(size(1)),
                    "`+` (which copies both sides)",
                ),
            },
            "@in" => (
                node.plus(size(0).times(BYTE)).plus(size(1).times(LIST_BYTE)),
                small,
                "`in` (which reads the whole list)",
            ),
            "_[_]" | "_[?_]" => (node.plus(size(1).times(BYTE)), size(0), "indexing"),
            "_?._" => (node, size(0), "`.?`"),
            "size" => (
                node.plus(Amount::fixed(OVERLOADS)).plus(size(0).times(BYTE)),
                small,
                "`size` (which counts characters)",
            ),
            "contains" => (node.plus(size(0).plus(size(1)).times(BYTE)), small, "`contains` (which reads the text)"),
            "startsWith" | "endsWith" => {
                (node.plus(self.min(size(0), size(1)).times(BYTE)), small, "a prefix or suffix test")
            }
            MATCHES_VALUE => (
                node.plus(Amount::fixed(COMPILE)).plus(size(1).times(COMPILE_BYTE)).plus(size(0).times(MATCH_BYTE)),
                small,
                "`matches` with a pattern that is not a literal (compiled on every call)",
            ),
            _ if name.starts_with(MATCHES_LITERAL) => (node.plus(size(0).times(MATCH_BYTE)), small, "`matches`"),
            "path_under" | "url_under" => {
                let prefix = match call.args.get(1).map(|a| &a.expr) {
                    Some(Expr::Literal(LiteralValue::String(s)))
                        if s.inner().bytes().all(|b| b.is_ascii() && b != b'%') =>
                    {
                        size(1).times(RESOLVE_PLAIN_BYTE)
                    }
                    _ => size(1).times(RESOLVE_BYTE),
                };
                (
                    node.plus(Amount::fixed(RESOLVE)).plus(size(0).times(RESOLVE_BYTE)).plus(prefix),
                    small,
                    "resolving a path or URL",
                )
            }
            "url_host" => {
                (node.plus(Amount::fixed(RESOLVE)).plus(size(0).times(RESOLVE_BYTE)), size(0), "resolving a URL")
            }
            "string" | "bytes" | "dyn" => (node.plus(size(0).times(BYTE)), size(0), "a conversion"),
            "int" | "uint" | "double" | "bool" | "timestamp" | "duration" | "type" => {
                (node.plus(size(0).times(BYTE)), small, "a conversion")
            }
            _ if name.starts_with("get") => {
                let zone =
                    if operands.len() > 1 { Amount::fixed(ZONE).plus(size(1).times(BYTE)) } else { Amount::default() };
                (node.plus(zone), small, "reading a time")
            }
            "value" | "hasValue" | "or" | "orValue" => (node, size(0).max(size(1)), "an optional"),
            // Checked away when compiled; counted as copying its operands.
            _ => {
                let all = operands.iter().fold(Amount::default(), |sum, o| sum.plus(o.size));
                (node.plus(all.times(BYTE)), all, "a call")
            }
        };
        self.note(own, what);
        Estimate { cost: children.plus(own), size: value, elements: None }
    }
}

/// The cost of operand `i`, if there is one.
fn size_cost(operands: &[Estimate], i: usize) -> Amount {
    operands.get(i).map_or(Amount::default(), |o| o.cost)
}
