//! House rules, checked by `cargo test` over the sources of every crate of
//! the workspace (`src`, `core/src`, `app/src`, `model/src`, `fixtures/src`),
//! after rust-analyzer's `xtask/src/tidy.rs`. Test code (`#[cfg(test)]`
//! modules, `tests.rs` files, files under a `tests/` folder) is left out:
//! tests may do what they need.
//!
//! 1. Store work leaves the runtime in one place, inside core
//!    (ARCHITECTURE.md): no `spawn_blocking`, `block_in_place` or `block_on`
//!    outside the few places of [`BLOCKING_ALLOWED`], each with its reason.
//!    Blocking calls scattered over the code would each need their own bound
//!    and would starve the runtime's workers under load; through `Db::run`
//!    there is one lane with one width. An entry of the list that no longer
//!    matches fails too, so the list stays true.
//! 2. Within a crate no two files import each other, directly or around a
//!    circle (ARCHITECTURE.md): files that need each other are one unit
//!    spread over several files, and cannot be read, tested or moved apart.
//!    A file imports another when it names an item defined there (a `use`
//!    tree, a `crate::`/`super::`/`self::` path, a path through an imported
//!    module's name), followed through re-exports; a file and its own
//!    ancestors (`mod.rs`) are one unit; test modules are left out. The test
//!    lists each cycle's files and the imports inside it.
//! 3. Every relative link in the project's Markdown (README.md, SECURITY.md,
//!    BENCHMARKS.md, ARCHITECTURE.md, `docs/`) leads to a file the
//!    repository has, and an anchor to a heading that file has: a newcomer
//!    who follows a link never meets a 404.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use regex::Regex;

/// A regular expression compiled once.
macro_rules! re {
    ($pattern:expr) => {{
        static RE: LazyLock<Regex> = LazyLock::new(|| Regex::new($pattern).unwrap());
        &*RE
    }};
}

/// The source folders of the workspace's crates.
const CRATES: [&str; 5] = ["src", "core/src", "app/src", "model/src", "fixtures/src"];

/// The places that may block: (file, call, why).
const BLOCKING_ALLOWED: &[(&str, &str, &str)] = &[
    ("core/src/db/lane.rs", "spawn_blocking", "the one boundary: `Db::run` runs store work in the lane"),
    (
        "core/src/db/postgres.rs",
        "block_in_place",
        "`off_runtime`: the synchronous PostgreSQL client starts a runtime of its own, which tokio refuses on a worker",
    ),
    (
        "core/src/policy/evaluations.rs",
        "spawn_blocking",
        "decisions with costly conditions: CPU-bound, bounded by a lane of their own",
    ),
    ("core/src/users/hashing.rs", "spawn_blocking", "password hashing: CPU-bound, bounded by the hashing gate"),
    ("src/cli.rs", "block_on", "the CLI has no server runtime: it starts one"),
];

#[test]
fn markdown_links_lead_somewhere() {
    let root = workspace();
    let mut files: Vec<PathBuf> = ["README.md", "SECURITY.md", "BENCHMARKS.md", "ARCHITECTURE.md"]
        .iter()
        .map(|f| root.join(f))
        .filter(|f| f.exists())
        .collect();
    files.extend(markdown_under(&root.join("docs")));
    let broken: Vec<String> = files.iter().flat_map(|f| broken_links(root, f)).collect();
    assert!(broken.is_empty(), "links that lead nowhere:\n{}", broken.join("\n"));
}

#[test]
fn broken_links_are_found_and_only_they() {
    let dir = std::env::temp_dir().join(format!("tidy-links-{}", std::process::id()));
    fs::create_dir_all(dir.join("docs")).unwrap();
    fs::write(dir.join("docs/a.md"), "# A title, with words\n\n## Two\n").unwrap();
    let readme = "[ok](docs/a.md) [anchor](docs/a.md#a-title-with-words) [here](#top-part)\n\
                  [web](https://example.com/x.md) [gone](docs/b.md) [bad anchor](docs/a.md#three)\n\
                  ![picture](docs/missing.png) `[code](docs/c.md)`\n\n# Top part\n\n```\n[fenced](docs/d.md)\n```\n";
    fs::write(dir.join("README.md"), readme).unwrap();
    let found = broken_links(&dir, &dir.join("README.md"));
    fs::remove_dir_all(&dir).ok();
    let targets: Vec<&str> = found.iter().map(|b| b.rsplit(' ').next().unwrap()).collect();
    assert_eq!(targets, ["docs/b.md", "docs/a.md#three", "docs/missing.png"], "{found:?}");
}

/// Every `.md` file under `dir`, sorted.
fn markdown_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(markdown_under(&path));
        } else if path.extension().is_some_and(|e| e == "md") {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// The relative links of Markdown file `file` (outside code) whose file or
/// anchor does not exist, as "file:line target".
fn broken_links(root: &Path, file: &Path) -> Vec<String> {
    static LINK: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\]\(([^)\s]+)\)").unwrap());
    let text = read(file);
    let mut broken = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Inline code is not a link.
        let line: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        for link in LINK.captures_iter(&line).map(|c| c[1].to_string()) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = link.split_once('#').map_or((link.as_str(), None), |(p, a)| (p, Some(a)));
            let target = if path.is_empty() { file.to_path_buf() } else { file.parent().unwrap().join(path) };
            let fine = target.exists()
                && anchor.is_none_or(|a| {
                    target.extension().is_none_or(|e| e != "md") || headings(&read(&target)).contains(a)
                });
            if !fine {
                let shown = file.strip_prefix(root).unwrap_or(file).display().to_string();
                broken.push(format!("{shown}:{} {link}", n + 1));
            }
        }
    }
    broken
}

/// The anchors of a Markdown file's headings, as GitHub makes them: lower
/// case, punctuation dropped, spaces as hyphens, a repeat numbered.
fn headings(text: &str) -> BTreeSet<String> {
    let mut anchors = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        let Some(title) = line.strip_prefix('#').filter(|_| !fenced) else { continue };
        let title = title.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut anchor = slug.clone();
        let mut n = 0;
        while anchors.contains(&anchor) {
            n += 1;
            anchor = format!("{slug}-{n}");
        }
        anchors.insert(anchor);
    }
    anchors
}

#[test]
fn store_work_leaves_the_runtime_in_one_place() {
    let mut found = Vec::new();
    let mut used = BTreeSet::new();
    for krate in CRATES {
        for file in rust_files(&workspace().join(krate)) {
            let rel = file.strip_prefix(workspace()).unwrap().to_string_lossy().replace('\\', "/");
            for (line, call) in blocking_calls(&read(&file)) {
                match BLOCKING_ALLOWED.iter().position(|&(f, c, _)| f == rel && c == call) {
                    Some(k) => {
                        used.insert(k);
                    }
                    None => found.push(format!("  {rel}:{line}: {call}")),
                }
            }
        }
    }
    let stale: Vec<_> = (0..BLOCKING_ALLOWED.len())
        .filter(|k| !used.contains(k))
        .map(|k| format!("  {} ({})", BLOCKING_ALLOWED[k].0, BLOCKING_ALLOWED[k].1))
        .collect();
    assert!(
        found.is_empty(),
        "blocking work outside core's boundary: call the stores through `Db::run` \
         (or add the place to BLOCKING_ALLOWED in tests/tidy.rs, with its reason):\n{}",
        found.join("\n")
    );
    assert!(stale.is_empty(), "BLOCKING_ALLOWED entries without a match (remove them):\n{}", stale.join("\n"));
}

/// Rule 1's reading of a file: what it calls, and only in code.
#[test]
fn blocking_calls_are_found_in_code_only() {
    let text = r##"
/// Not `spawn_blocking` in a doc comment,
fn f() { /* nor block_on( /* nested */ in a block */ let s = "block_in_place"; }
fn g<'a>(c: char) -> bool { let r = r#"spawn_blocking"#; c == '"' && rt.block_on(async {}) }
#[cfg(test)]
mod tests {
    fn h() { tokio::task::spawn_blocking(|| '}'); }
}
fn i() { tokio::task::block_in_place(|| ()) }
"##;
    assert_eq!(blocking_calls(text), [(4, "block_on".to_string()), (9, "block_in_place".to_string())]);
}

/// The blocking calls in a file's code (comments, literals and test modules
/// left out): (line, call).
fn blocking_calls(text: &str) -> Vec<(usize, String)> {
    let code = without_test_modules(&blank_comments_and_literals(text));
    re!(r"\b(spawn_blocking|block_in_place|block_on)\b")
        .find_iter(&code)
        .map(|m| (code[..m.start()].matches('\n').count() + 1, m.as_str().to_string()))
        .collect()
}

#[test]
fn no_import_cycle_between_files() {
    let found: Vec<String> = CRATES.iter().flat_map(|krate| import_cycles(&workspace().join(krate))).collect();
    assert!(found.is_empty(), "files that import each other (ARCHITECTURE.md):\n{}", found.join("\n"));
}

/// The cycle detection itself, on small crates written for it.
#[test]
fn import_cycles_are_found_and_only_they() {
    let knotted = tempfile::tempdir().unwrap();
    write_crate(
        knotted.path(),
        &[
            ("lib.rs", "mod a; mod b; mod x; mod y; mod z;\npub use a::Alpha;\n"),
            ("a.rs", "use crate::b::Beta;\npub struct Alpha(Beta);\n"),
            // Through the root's re-export, to the file defining `Alpha`.
            ("b.rs", "pub struct Beta;\npub fn f() -> crate::Alpha { todo!() }\n"),
            ("x.rs", "use crate::{y::{Why, other}};\npub struct Ex;\nfn f(_: Why) { other() }\n"),
            // Through the imported module's name.
            ("y.rs", "pub struct Why;\npub fn other() {}\nuse super::z;\nfn g() { z::inner::Zed; }\n"),
            ("z/mod.rs", "pub mod inner;\n"),
            ("z/inner.rs", "pub struct Zed;\nfn h() -> crate::x::Ex { todo!() }\n"),
        ],
    );
    let found = import_cycles(knotted.path());
    let want = [
        "import cycle (2 files): a.rs, b.rs\n  a.rs -> b.rs\n  b.rs -> a.rs",
        "import cycle (3 files): x.rs, y.rs, z/inner.rs\n  x.rs -> y.rs\n  y.rs -> z/inner.rs\n  z/inner.rs -> x.rs",
    ];
    let root = format!("{}/", knotted.path().display());
    assert_eq!(found.iter().map(|c| c.replace(&root, "")).collect::<Vec<_>>(), want);

    let clean = tempfile::tempdir().unwrap();
    write_crate(
        clean.path(),
        &[
            ("lib.rs", "mod p; mod q;\n"),
            // A file and its ancestors: the face and its parts.
            ("p/mod.rs", "mod inner;\n#[cfg(test)]\nmod tests;\npub use inner::Thing;\npub struct Face;\n"),
            (
                "p/inner.rs",
                "use super::Face;\npub struct Thing(Face);\n\
                 #[cfg(test)]\nmod tests {\n    use crate::q::*;\n}\n\
                 // use crate::q::Q;\nconst S: &str = \"crate::q::Q\";\n",
            ),
            ("p/tests.rs", "use crate::q::Q;\n"),
            ("q.rs", "use crate::p::Thing;\npub struct Q(Thing);\n"),
        ],
    );
    assert_eq!(import_cycles(clean.path()), Vec::<String>::new());
}

fn write_crate(root: &Path, files: &[(&str, &str)]) {
    for (path, text) in files {
        let path = root.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }
}

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(file: &Path) -> String {
    fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// The `.rs` files under `root` but tests (`tests.rs`, a `tests/` folder),
/// sorted by their path.
fn rust_files(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, &mut out);
    out.retain(|f| {
        let rel = f.strip_prefix(root).unwrap();
        f.file_name().unwrap() != "tests.rs" && !rel.parent().unwrap().iter().any(|c| c == "tests")
    });
    out.sort();
    out
}

// Rule 1's reading of the code: a small lexer.

/// The code with its comments and string and character literals blanked
/// (newlines kept, so lines keep their numbers).
fn blank_comments_and_literals(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let ident = |k: usize| c[k].is_alphanumeric() || c[k] == '_';
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < c.len() {
        let start = i;
        if at_str(&c, i, "//") {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if at_str(&c, i, "/*") {
            let mut depth = 0;
            while i < c.len() {
                if at_str(&c, i, "/*") {
                    depth += 1;
                    i += 2;
                } else if at_str(&c, i, "*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c[i] == 'r'
            && (i == 0 || !ident(i - 1) || (matches!(c[i - 1], 'b' | 'c') && (i < 2 || !ident(i - 2))))
        {
            let hashes = c[i + 1..].iter().take_while(|&&ch| ch == '#').count();
            if c.get(i + 1 + hashes) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            let close: String = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
            i += 2 + hashes;
            while i < c.len() && !at_str(&c, i, &close) {
                i += 1;
            }
            i += close.chars().count();
        } else if c[i] == '\'' && c.get(i + 1) == Some(&'\\') {
            i += 3;
            while i < c.len() && c[i] != '\'' {
                i += 1;
            }
            i += 1;
        } else if c[i] == '\'' && c.get(i + 2) == Some(&'\'') {
            i += 3;
        } else {
            out.push(c[i]);
            i += 1;
            continue;
        }
        out.extend(c[start..i.min(c.len())].iter().map(|&ch| if ch == '\n' { '\n' } else { ' ' }));
    }
    out
}

/// Whether `s` is written at `c[i..]`.
fn at_str(c: &[char], i: usize, s: &str) -> bool {
    s.chars().enumerate().all(|(k, ch)| c.get(i + k) == Some(&ch))
}

/// Blanks each `#[cfg(test)] mod name { … }` (code whose comments and
/// literals are blank already, so braces count true).
fn without_test_modules(code: &str) -> String {
    let test_mod = re!(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{");
    let mut out = code.to_string();
    for m in test_mod.find_iter(code) {
        let mut depth = 1;
        let end = code[m.end()..]
            .char_indices()
            .find(|&(_, ch)| {
                depth += match ch {
                    '{' => 1,
                    '}' => -1,
                    _ => 0,
                };
                depth == 0
            })
            .map_or(code.len(), |(k, _)| m.end() + k + 1);
        let blank: String = code[m.start()..end].chars().map(|ch| if ch == '\n' { '\n' } else { ' ' }).collect();
        out.replace_range(m.start()..end, &blank);
    }
    out
}

// Rule 2 (once scripts/import_cycles.py, ported line for line).

/// A module's path in its crate (`[]` is the crate root).
type ModPath = Vec<String>;

/// An item definition: its kind and name.
fn item() -> &'static Regex {
    re!(
        r"(?m)^\s*(?:pub(?:\([^)]*\))?\s+)?(?:async\s+|const\s+|unsafe\s+)*(fn|struct|enum|trait|const|static|type|union|macro_rules!)\s*(\w+)"
    )
}

/// A `use` declaration: its visibility and tree.
fn use_decl() -> &'static Regex {
    re!(r"(?m)^\s*(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);")
}

/// A path from `crate`, `super` or `self`.
fn crate_path() -> &'static Regex {
    re!(r"\b(crate|super|self)((?:::\w+)+)")
}

/// Each import cycle of the crate whose sources are under `root`, as its
/// files and the imports between them.
fn import_cycles(root: &Path) -> Vec<String> {
    let krate = Crate::new(root);
    let graph = krate.edges();
    let show = |m: &ModPath| {
        let f = &krate.files[m];
        f.strip_prefix(workspace()).unwrap_or(f).display().to_string()
    };
    let mut out = Vec::new();
    for comp in cycles(&graph) {
        let mut names: Vec<String> = comp.iter().map(show).collect();
        names.sort();
        let mut text = format!("import cycle ({} files): {}", names.len(), names.join(", "));
        for m in &comp {
            for t in graph[m].iter().filter(|t| comp.contains(t)) {
                text += &format!("\n  {} -> {}", show(m), show(t));
            }
        }
        out.push(text);
    }
    out.sort();
    out
}

/// The code without comments, string literals and test modules (the
/// script's regular expressions, not a lexer: same answers as the script).
fn strip(text: &str) -> String {
    let line = re!(r"//[^\n]*");
    let block = re!(r"(?s)/\*.*?\*/");
    let raw = re!(r##"r#*"(?s:.)*?"#*"##);
    let str = re!(r#""(?:\\.|[^"\\])*""#);
    let test_mod = re!(r"#\[cfg\(test\)\]\s*(?:pub\s+)?mod\s+\w+\s*\{");
    let text = line.replace_all(text, "");
    let text = block.replace_all(&text, "");
    let text = raw.replace_all(&text, "\"\"");
    let text = str.replace_all(&text, "\"\"").into_owned();
    let (mut out, mut i) = (String::new(), 0);
    for m in test_mod.find_iter(&text) {
        if m.start() < i {
            continue;
        }
        out += &text[i..m.start()];
        let (mut depth, mut j) = (1, m.end());
        let bytes = text.as_bytes();
        while j < bytes.len() && depth > 0 {
            depth += match bytes[j] {
                b'{' => 1,
                b'}' => -1,
                _ => 0,
            };
            j += 1;
        }
        i = j;
    }
    out += &text[i..];
    out
}

/// `a::{b, c::{d, e as f}}` as `["a::b", "a::c::d", "a::c::e as f"]`.
fn expand(tree: &str) -> Vec<String> {
    let sep = re!(r"\s*(::|\{|\}|,)\s*");
    let tree = sep.replace_all(tree.trim(), "$1").into_owned();
    let (mut depth, mut cut) = (0, None);
    for (k, ch) in tree.char_indices() {
        if ch == '{' {
            if depth == 0 {
                cut = Some(k);
            }
            depth += 1;
        } else if ch == '}' {
            depth -= 1;
        }
    }
    let Some(cut) = cut else { return vec![tree] };
    let head = &tree[..cut];
    let last = tree.char_indices().next_back().map_or(0, |(k, _)| k);
    let body = tree.get(cut + 1..last).unwrap_or("");
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (k, ch) in body.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&body[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    parts.push(&body[start..]);
    parts.into_iter().filter(|p| !p.is_empty()).flat_map(|p| expand(&format!("{head}{p}"))).collect()
}

/// A path's segments, and the name it is known by here.
fn split_alias(path: &str) -> (Vec<String>, String) {
    let (path, alias) = path.split_once(" as ").unwrap_or((path, ""));
    let segs: Vec<String> = path.trim().split("::").map(String::from).collect();
    let alias = alias.trim();
    let name = if alias.is_empty() { segs.last().unwrap().clone() } else { alias.to_string() };
    (segs, name)
}

fn concat(a: &[String], b: &[String]) -> ModPath {
    a.iter().chain(b).cloned().collect()
}

struct Crate {
    files: BTreeMap<ModPath, PathBuf>,
    code: BTreeMap<ModPath, String>,
    items: BTreeMap<ModPath, BTreeSet<String>>,
    reexports: BTreeMap<ModPath, BTreeMap<String, ModPath>>,
}

impl Crate {
    fn new(root: &Path) -> Self {
        let mut files = BTreeMap::new();
        for f in rust_files(root) {
            let rel: Vec<String> = f
                .strip_prefix(root)
                .unwrap()
                .with_extension("")
                .iter()
                .map(|c| c.to_string_lossy().into_owned())
                .collect();
            let module = match rel.as_slice() {
                [one] if one == "lib" || one == "main" => vec![],
                [parent @ .., last] if last == "mod" => parent.to_vec(),
                _ => rel,
            };
            if module.is_empty() && files.contains_key(&module) {
                continue; // a binary beside a library: the library is the root
            }
            files.insert(module, f);
        }
        let code: BTreeMap<ModPath, String> = files.iter().map(|(m, f)| (m.clone(), strip(&read(f)))).collect();
        let items = code
            .iter()
            .map(|(m, c)| (m.clone(), item().captures_iter(c).map(|k| k[2].to_string()).collect()))
            .collect();
        let mut krate = Crate { files, code, items, reexports: BTreeMap::new() };
        krate.reexports = krate.files.keys().map(|m| (m.clone(), krate.exports(m))).collect();
        krate
    }

    /// Names a module re-exports: name → the full path it stands for.
    fn exports(&self, module: &ModPath) -> BTreeMap<String, ModPath> {
        let mut out = BTreeMap::new();
        for u in use_decl().captures_iter(&self.code[module]) {
            if u.get(1).is_none() {
                continue;
            }
            for path in expand(&u[2]) {
                let (segs, name) = split_alias(&path);
                if matches!(segs.last().unwrap().as_str(), "*" | "self") {
                    continue;
                }
                if let Some(full) = self.absolute(module, &segs).filter(|f| !f.is_empty()) {
                    out.insert(name, full);
                }
            }
        }
        out
    }

    fn absolute(&self, module: &ModPath, segs: &[String]) -> Option<ModPath> {
        let first = segs.first()?;
        match first.as_str() {
            "crate" => Some(segs[1..].to_vec()),
            "self" => Some(concat(module, &segs[1..])),
            "super" => {
                let supers = segs.iter().take_while(|s| *s == "super").count();
                Some(concat(&module[..module.len().saturating_sub(supers)], &segs[supers..]))
            }
            // a child module named bare
            _ if self.files.contains_key(&concat(module, &segs[..1])) => Some(concat(module, segs)),
            _ => None, // another crate or std
        }
    }

    /// The file defining the item `path` names (or the module it is).
    fn resolve(&self, path: &[String], seen: &mut BTreeSet<ModPath>) -> Option<ModPath> {
        if !seen.insert(path.to_vec()) {
            return None;
        }
        for k in (0..=path.len()).rev() {
            let module = &path[..k];
            if !self.files.contains_key(module) {
                continue;
            }
            let Some(name) = path.get(k) else { return Some(module.to_vec()) };
            if self.items[module].contains(name) {
                return Some(module.to_vec());
            }
            if let Some(full) = self.reexports[module].get(name) {
                return self.resolve(&concat(full, &path[k + 1..]), seen);
            }
            return Some(module.to_vec());
        }
        None
    }

    fn edges(&self) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
        let mut graph: BTreeMap<ModPath, BTreeSet<ModPath>> =
            self.files.keys().map(|m| (m.clone(), BTreeSet::new())).collect();
        for (module, code) in &self.code {
            let mut paths: Vec<Vec<String>> = Vec::new();
            let mut aliases: BTreeMap<String, ModPath> = BTreeMap::new();
            for u in use_decl().captures_iter(code) {
                for p in expand(&u[2]) {
                    let (mut segs, mut name) = split_alias(&p);
                    if segs.last().unwrap() == "self" {
                        segs.pop();
                        if name == "self" {
                            name = segs.last().cloned().unwrap_or_default();
                        }
                    }
                    if let Some(full) = self.absolute(module, &segs).filter(|f| self.files.contains_key(f)) {
                        aliases.insert(name, full); // a module imported by name
                    }
                    paths.push(segs);
                }
            }
            for m in crate_path().captures_iter(code) {
                paths.push(std::iter::once(&m[1]).chain(m[2].split("::").skip(1)).map(String::from).collect());
            }
            // Paths through an imported module's name (`gate::task::x`).
            for (name, full) in &aliases {
                let through = Regex::new(&format!(r"{}((?:::\w+)+)", regex::escape(name))).unwrap();
                for m in through.captures_iter(code) {
                    // `(?<![\w:])` in the script (no look-behind here).
                    let start = m.get(0).unwrap().start();
                    if code[..start].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                        continue;
                    }
                    let rest = m[1].split("::").skip(1).map(String::from);
                    paths.push(std::iter::once("crate".to_string()).chain(full.iter().cloned()).chain(rest).collect());
                }
            }
            for segs in paths {
                let segs: Vec<String> = if segs.first().is_some_and(|s| s == "self") {
                    segs
                } else {
                    segs.into_iter().filter(|s| s != "*" && s != "self").collect()
                };
                let Some(full) = self.absolute(module, &segs) else { continue };
                let Some(target) = self.resolve(&full, &mut BTreeSet::new()) else { continue };
                // A folder's `mod.rs` (or `name.rs` beside `name/`) is the
                // face of its files: it declares and re-exports them, and
                // they extend its types. Edges between a file and its own
                // ancestors are that relation, not a knot between peers.
                if target.starts_with(module) || module.starts_with(&target) {
                    continue;
                }
                graph.get_mut(module).unwrap().insert(target);
            }
        }
        graph
    }
}

/// Strongly connected components of more than one file (Tarjan).
fn cycles(graph: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct Tarjan<'g> {
        graph: &'g BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'g ModPath, usize>,
        low: BTreeMap<&'g ModPath, usize>,
        stack: Vec<&'g ModPath>,
        on: BTreeSet<&'g ModPath>,
        out: Vec<Vec<ModPath>>,
    }
    impl<'g> Tarjan<'g> {
        fn visit(&mut self, v: &'g ModPath) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on.insert(v);
            for w in &self.graph[v] {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    self.low.insert(v, self.low[v].min(self.low[w]));
                } else if self.on.contains(w) {
                    self.low.insert(v, self.low[v].min(self.index[w]));
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                loop {
                    let w = self.stack.pop().unwrap();
                    self.on.remove(w);
                    comp.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.out.push(comp);
                }
            }
        }
    }
    let mut t = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.out
}
