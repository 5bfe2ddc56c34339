#!/usr/bin/env python3
"""Circles of imports between the files of each crate (or of the crates
named on the command line: `python3 .ci/import-cycles.py core`).

A file imports another when it names an item of it by a path: `crate::a::b`,
`super::x`, `self::x`, a `use` tree with braces (`use crate::{a::X, b::Y}`),
and a name the crate's root re-exports (`crate::Scheduler` is taken from the
file `pub use scheduler::Scheduler` names). A file's own submodules and its
ancestors are not counted (a module sees its parents by nesting; a parent
naming its child's items is counted), nor are `#[cfg(test)]` modules. Prints
every circle (a strongly connected set of two or more files) with one
import of each file in it, and exits 1 if there is any.

Kept beside the CI script because the shared hook reads only lower-case
paths outside braces, which misses re-exported names and grouped imports.
"""

import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def modules(root):
    """Module path ('' for the crate root) -> source, for src/ of a crate."""
    files = {}
    for d, _, fs in os.walk(root):
        for f in fs:
            if f.endswith(".rs") and os.sep + "bin" not in d:
                p = os.path.join(d, f)
                rel = os.path.relpath(p, root)[:-3].replace(os.sep, "::")
                mod = re.sub(r"(^|::)(mod|lib|main)$", "", rel)
                files[mod] = open(p, encoding="utf-8").read()
    return files


def code_only(src):
    """The source without comments, string and char literals, and
    `#[cfg(test)]` modules."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            i = src.find("\n", i)
            i = n if i < 0 else i
        elif src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif (m := re.match(r'b?r(#*)"', src[i:])) and (i == 0 or not re.match(r"\w", src[i - 1])):
            end = '"' + m.group(1)
            j = src.find(end, i + m.end())
            i = n if j < 0 else j + len(end)
            out.append('""')
        elif c == '"':
            i += 1
            while i < n and src[i] != '"':
                i += 2 if src[i] == "\\" else 1
            i += 1
            out.append('""')
        elif c == "'" and (m := re.match(r"'(\\.[^']*|[^'\\])'", src[i:])):
            i += m.end()
            out.append("' '")
        else:
            out.append(c)
            i += 1
    src = "".join(out)
    pat = r"#\[cfg\(test\)\]\s*(pub(\([a-z]+\))?\s+)?mod\s+" + IDENT + r"\s*\{"
    while m := re.search(pat, src):
        depth, i = 1, m.end()
        while i < len(src) and depth:
            depth += {"{": 1, "}": -1}.get(src[i], 0)
            i += 1
        src = src[: m.start()] + src[i:]
    return src


def expand(tree):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e']."""
    tree = re.sub(r"\s+", "", tree)
    i = tree.find("{")
    if i < 0 or "}" not in tree:
        return [re.sub(r"\bas" + IDENT + "$", "", tree)]
    prefix, body = tree[:i], tree[i + 1 : tree.rindex("}")]
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    out = []
    for p in filter(None, parts):
        out += [prefix + q if q != "self" else prefix.rstrip(":") for q in expand(p)]
    return out


def paths(mod, src):
    """Every absolute module path `mod`'s source names."""
    parent = mod.rsplit("::", 1)[0] if "::" in mod else ""
    src = code_only(src)
    found = []
    for tree in re.findall(r"\buse\s+([^;]+);", src):
        found += expand(tree)
    found += re.findall(r"\b(?:crate|super|self)::" + IDENT + r"(?:::" + IDENT + ")*", src)
    out = []
    for p in found:
        p = p.lstrip(":")
        if p.startswith("crate::"):
            out.append(p[len("crate::") :])
        elif p.startswith("super::"):
            base = parent
            while p.startswith("super::"):
                p = p[len("super::") :]
                if p.startswith("super::"):
                    base = base.rsplit("::", 1)[0] if "::" in base else ""
            out.append((base + "::" if base else "") + p)
        elif p.startswith("self::"):
            out.append((mod + "::" if mod else "") + p[len("self::") :])
        else:
            # A plain `use a::b` inside a module names its child `a`.
            head = p.split("::", 1)[0]
            out.append((mod + "::" if mod else "") + p if head else p)
    return out


def reexports(files):
    """Name -> module path, from `pub use a::b::Name` in the crate root."""
    names = {}
    for tree in re.findall(r"\bpub\s+use\s+([^;]+);", code_only(files.get("", ""))):
        for p in expand(tree):
            p = p.removeprefix("crate::").removeprefix("self::")
            if "::" in p:
                mod, name = p.rsplit("::", 1)
                names[name] = mod
    return names


def resolve(files, names, path):
    parts = path.split("::")
    if len(parts) >= 1 and parts[0] in names and parts[0] not in files:
        parts = names[parts[0]].split("::") + parts[1:]
    for k in range(len(parts), 0, -1):
        t = "::".join(parts[:k])
        if t in files:
            return t
    return None


def circles(root):
    files = modules(root)
    names = reexports(files)
    edges = {m: {} for m in files}
    for m, src in files.items():
        for p in paths(m, src):
            t = resolve(files, names, p)
            if t is None or t == m or not m or not t:
                continue
            if m.startswith(t + "::"):
                continue
            edges[m].setdefault(t, p)
    # Tarjan's strongly connected components.
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(files):
        if v not in index:
            visit(v)
    return [(c, {m: {t: p for t, p in edges[m].items() if t in c} for m in c}) for c in out]


def main():
    crates = sys.argv[1:] or sorted(
        d
        for d, ds, fs in os.walk(".")
        if "Cargo.toml" in fs and "src" in ds and "target" not in d and "/." not in d
    )
    found = False
    for crate in crates:
        for comp, via in circles(os.path.join(crate, "src")):
            found = True
            print(f"{crate}: a circle of {len(comp)} files")
            for m in comp:
                for t, p in sorted(via[m].items()):
                    print(f"  {m or 'lib'} -> {t}  ({p})")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
