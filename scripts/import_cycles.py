#!/usr/bin/env python3
"""Import cycles between the source files of each crate (ARCHITECTURE.md:
"within a crate no two files import each other, directly or around a
circle"). Prints each cycle as its files and exits 1 if there is one.

A file depends on another when it names an item defined there: through
`use crate::…` / `use super::…` / `use self::…`, or a path written in the
code (`crate::a::b(…)`, `super::c::D`). A name is followed through the
re-exports (`pub use`) of the module that holds it to the file that defines
it. A file and its own ancestors (the `mod.rs` that declares it, up to the
crate root) are one unit's face and its parts: edges between them are not
counted, edges between siblings and across folders are. Tests (`#[cfg(test)]` modules, `tests.rs` files) are
left out: they may reach anything.

Usage: python3 scripts/import_cycles.py [CRATE_SRC_DIR ...]
(default: src core/src app/src model/src fixtures/src)
"""

import re
import sys
from pathlib import Path

DEFAULT = ["src", "core/src", "app/src", "model/src", "fixtures/src"]
ITEM = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:async\s+|const\s+|unsafe\s+)*"
    r"(fn|struct|enum|trait|const|static|type|union|macro_rules!)\s*(\w+)",
    re.M,
)
USE = re.compile(r"^\s*(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.M)
PATH = re.compile(r"\b(crate|super|self)((?:::\w+)+)")


def strip(text):
    """The code without comments, string literals and test modules."""
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'r#*"(?:.|\n)*?"#*', '""', text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    # `#[cfg(test)] mod name { … }` to its closing brace.
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub\s+)?mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i : m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def expand(tree):
    """`a::{b, c::{d, e as f}}` as ["a::b", "a::c::d", "a::c::e as f"]."""
    tree = re.sub(r"\s*(::|\{|\}|,)\s*", r"\1", tree.strip())
    depth, cut = 0, None
    for k, ch in enumerate(tree):
        if ch == "{":
            if depth == 0:
                cut = k
            depth += 1
        elif ch == "}":
            depth -= 1
    if cut is None:
        return [tree]
    head, body = tree[:cut], tree[cut + 1 : -1]
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(body):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(body[start:k])
            start = k + 1
    parts.append(body[start:])
    return [p for part in parts if part for p in expand(head + part)]


def split_alias(path):
    """("a::b::c", "name it is known by here")."""
    path, _, alias = path.partition(" as ")
    segs = path.strip().split("::")
    return segs, (alias.strip() or segs[-1])


class Crate:
    def __init__(self, root):
        self.root = Path(root)
        self.files = {}  # module path (tuple) -> file
        for f in sorted(self.root.rglob("*.rs")):
            if f.name == "tests.rs" or "tests" in f.relative_to(self.root).parts[:-1]:
                continue
            rel = f.relative_to(self.root).with_suffix("").parts
            if rel in (("lib",), ("main",)):
                mod = ()
            elif rel[-1] == "mod":
                mod = rel[:-1]
            else:
                mod = rel
            if mod == () and () in self.files:
                continue  # a binary beside a library: the library is the root
            self.files[mod] = f
        self.code = {m: strip(f.read_text()) for m, f in self.files.items()}
        self.items = {m: {name for _, name in ITEM.findall(c)} for m, c in self.code.items()}
        self.reexports = {m: self.exports(m) for m in self.files}

    def exports(self, mod):
        """Names a module re-exports: name -> the full path it stands for."""
        out = {}
        for vis, tree in USE.findall(self.code[mod]):
            if not vis:
                continue
            for path in expand(tree):
                segs, name = split_alias(path)
                if segs[-1] in ("*", "self"):
                    continue
                full = self.absolute(mod, segs)
                if full:
                    out[name] = full
        return out

    def absolute(self, mod, segs):
        if not segs:
            return None
        if segs[0] == "crate":
            return tuple(segs[1:])
        if segs[0] == "self":
            return mod + tuple(segs[1:])
        if segs[0] == "super":
            base, rest = mod, segs
            while rest and rest[0] == "super":
                base, rest = base[:-1], rest[1:]
            return base + tuple(rest)
        if (mod + (segs[0],)) in self.files:  # a child module named bare
            return mod + tuple(segs)
        return None  # another crate or std

    def resolve(self, path, seen=None):
        """The file defining the item `path` names (or the module it is)."""
        seen = seen or set()
        if path in seen:
            return None
        seen.add(path)
        for k in range(len(path), -1, -1):
            mod = path[:k]
            if mod not in self.files:
                continue
            rest = path[k:]
            if not rest:
                return mod
            name = rest[0]
            if name in self.items[mod]:
                return mod
            if name in self.reexports[mod]:
                return self.resolve(self.reexports[mod][name] + rest[1:], seen)
            return mod
        return None

    def edges(self):
        graph = {m: set() for m in self.files}
        for mod, code in self.code.items():
            paths = []
            aliases = {}
            for _, tree in USE.findall(code):
                for p in expand(tree):
                    segs, name = split_alias(p)
                    if segs[-1] == "self":
                        segs, name = segs[:-1], (name if name != "self" else segs[-2])
                    paths.append(segs)
                    full = self.absolute(mod, segs)
                    if full is not None and full in self.files:
                        aliases[name] = full  # a module imported by name
            for m in PATH.finditer(code):
                paths.append([m.group(1)] + m.group(2).split("::")[1:])
            # Paths through an imported module's name (`gate::task::x`).
            for name, full in aliases.items():
                for m in re.finditer(r"(?<![\w:])" + re.escape(name) + r"((?:::\w+)+)", code):
                    paths.append(["crate", *full, *m.group(1).split("::")[1:]])
            for segs in paths:
                segs = [s for s in segs if s not in ("*", "self")] if segs[0] != "self" else segs
                full = self.absolute(mod, segs)
                if full is None:
                    continue
                target = self.resolve(full)
                if target is None or target == mod:
                    continue
                # A folder's `mod.rs` (or `name.rs` beside `name/`) is the
                # face of its files: it declares and re-exports them, and they
                # extend its types. Edges between a file and its own
                # ancestors are that relation, not a knot between peers.
                if target == mod[: len(target)] or mod == target[: len(mod)]:
                    continue
                graph[mod].add(target)
        return graph


def cycles(graph):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def main():
    found = 0
    for root in sys.argv[1:] or DEFAULT:
        crate = Crate(root)
        graph = crate.edges()
        for comp in cycles(graph):
            found += 1
            names = sorted(str(crate.files[m]) for m in comp)
            print(f"import cycle ({len(names)} files): " + ", ".join(names))
            for m in sorted(comp):
                for t in sorted(graph[m]):
                    if t in comp:
                        print(f"  {crate.files[m]} -> {crate.files[t]}")
    if found:
        sys.exit(1)
    print("no import cycle between files")


if __name__ == "__main__":
    main()
