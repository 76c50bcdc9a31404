#!/usr/bin/env python3
"""The import graph of a crate's source files, and its circles (issue 44).

    scripts/modgraph.py crates/server/src            # summary
    scripts/modgraph.py crates/server/src --edges    # + the largest circle's edges
    scripts/modgraph.py crates/server/src --layers   # + every file by layer
    scripts/modgraph.py crates/server/src --check 2  # exit 1 if a circle has more than 2 files

An edge a -> b means file a names file b's module: `crate::x::y` paths, `super::`
paths and `use super::*`, and `use crate::{…}` lists (comments ignored; a
`mod x;` declaration is containment, not an edge). A circle is a strongly
connected component. A file's layer is its depth in the graph of circles:
0 imports no other file of the crate, n imports something at n-1.
"""
import os
import re
import sys
from collections import defaultdict


def load(root):
    files = {}
    for d, _, fs in os.walk(root):
        for f in fs:
            if f.endswith(".rs"):
                p = os.path.relpath(os.path.join(d, f), root)
                with open(os.path.join(d, f)) as fh:
                    files[p] = re.sub(r"//[^\n]*", "", fh.read())
    return files


def modpath(p):
    parts = p[:-3].split("/")
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return parts


def graph(files):
    mods = {tuple(modpath(p)): p for p in files}

    def resolve(parts):
        for n in range(len(parts), 0, -1):
            if tuple(parts[:n]) in mods:
                return mods[tuple(parts[:n])]
        return None

    edges = defaultdict(set)
    path = r"((?:[a-z_][a-z0-9_]*::)*[a-zA-Z_][a-zA-Z0-9_]*)"
    for p, src in files.items():
        me = modpath(p)
        targets = []
        for m in re.finditer(r"\bcrate::" + path, src):
            targets.append(resolve(m.group(1).split("::")))
        if re.search(r"\buse super::\*", src):
            targets.append(resolve(me[:-1]))
        for m in re.finditer(r"\bsuper::" + path, src):
            targets.append(resolve(me[:-1] + m.group(1).split("::")) or resolve(me[:-1]))
        for m in re.finditer(r"use crate::\{([^}]*)\}", src):
            for item in m.group(1).split(","):
                item = item.strip().split(" ")[0]
                if item:
                    targets.append(resolve(item.split("::")))
        edges[p].update(t for t in targets if t and t != p)
    return edges


def circles(files, edges):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
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
            out.append(sorted(comp))

    for v in sorted(files):
        if v not in index:
            visit(v)
    return out


def layers(comps, edges):
    of = {f: i for i, c in enumerate(comps) for f in c}
    depth = {}

    def d(i):
        if i not in depth:
            depth[i] = 0
            below = {of[w] for f in comps[i] for w in edges[f]} - {i}
            depth[i] = 1 + max((d(j) for j in below), default=-1)
        return depth[i]

    return {f: d(of[f]) for f in of}


def main():
    root = sys.argv[1]
    files = load(root)
    edges = graph(files)
    comps = circles(files, edges)
    big = sorted((c for c in comps if len(c) > 1), key=len, reverse=True)
    layer = layers(comps, edges)
    per = defaultdict(int)
    for f in files:
        per[layer[f]] += 1
    print(f"{root}: {len(files)} files, {sum(len(e) for e in edges.values())} imports")
    print("circles (files):", [len(c) for c in big] or "none")
    for c in big[:3]:
        print("  ", " ".join(c))
    print("files per layer:", " ".join(f"{k}:{per[k]}" for k in sorted(per)))
    if "--edges" in sys.argv and big:
        for v in big[0]:
            print(f"  {v} -> {' '.join(sorted(w for w in edges[v] if w in big[0]))}")
    if "--layers" in sys.argv:
        for f in sorted(files, key=lambda f: (layer[f], f)):
            print(f"  {layer[f]:2} {f}")
    if "--check" in sys.argv:
        most = int(sys.argv[sys.argv.index("--check") + 1])
        if big and len(big[0]) > most:
            print(f"a circle of {len(big[0])} files (at most {most} allowed)", file=sys.stderr)
            sys.exit(1)


if __name__ == "__main__":
    main()
