#!/usr/bin/env python3
"""Counts SQL call sites per file (docs/design/postgres.md, section 1).

A site is a line calling .execute(, .execute_batch(, .prepare(,
.prepare_cached(, .query_row(, .query_one( or .pragma_*( outside the file's
first #[cfg(test)] (tests.rs files count as tests). Run from the repository
root: python3 docs/design/sql-sites.py
"""
import glob
import re

SITE = re.compile(r"\.(execute|execute_batch|prepare|prepare_cached|query_row|query_one|pragma_\w+)\s*\(")
CONN = re.compile(r"\.conn\(\)")
TX = re.compile(r"\.transaction\(|unchecked_transaction")

total = 0
for path in sorted(glob.glob("core/src/**/*.rs", recursive=True) + glob.glob("src/**/*.rs", recursive=True)
                   + glob.glob("app/src/**/*.rs", recursive=True)):
    lines = open(path, encoding="utf-8").read().split("\n")
    end = 0 if path.endswith("tests.rs") else next(
        (i for i, line in enumerate(lines) if line.strip().startswith("#[cfg(test)]")), len(lines))
    body = lines[:end]
    sites = sum(1 for line in body if SITE.search(line))
    if sites:
        conns = sum(1 for line in body if CONN.search(line))
        txs = sum(1 for line in body if TX.search(line))
        print(f"{path:32} sql_sites={sites:<3} conn()={conns:<3} transactions={txs}")
        total += sites
print("total", total)
