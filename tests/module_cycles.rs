//! No two modules of `src/` depend on each other, directly or through
//! others: the layers only call down. A module depends on another when its
//! code names an item of it (`use crate::x::...`, `super::x::...`, a child
//! module's items by relative path, or a `crate::x::f()` path in code);
//! declaring a child module (`mod x;`) is not a dependency. The test reads
//! the sources, builds the graph and fails on every strongly connected
//! component of more than one module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

/// `src/a/b.rs` and `src/a/b/mod.rs` → `a::b`; `src/lib.rs` → `` (root).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts.join("::")
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Expands a use tree (`a::{b, c::{d, e}}`) into full paths.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.split(" as ").next().unwrap().trim().to_string()];
    };
    let prefix = tree[..open].trim_end_matches("::");
    let inner = &tree[open + 1..tree.rfind('}').unwrap()];
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items
        .into_iter()
        .filter(|s| !s.trim().is_empty())
        .flat_map(expand)
        .map(|s| {
            if s == "self" {
                prefix.to_string()
            } else {
                format!("{prefix}::{s}")
            }
        })
        .collect()
}

/// The module a path names an item of: the longest prefix that is a
/// module, with `crate`, `super` and child-relative paths resolved.
fn resolve(path: &str, from: &str, modules: &BTreeSet<String>) -> Option<String> {
    let mut segs: Vec<&str> = path.split("::").map(str::trim).collect();
    let mut base: Vec<String> = if from.is_empty() {
        vec![]
    } else {
        from.split("::").map(String::from).collect()
    };
    match segs.first().copied() {
        Some("crate") => {
            base.clear();
            segs.remove(0);
        }
        Some("self") => {
            segs.remove(0);
        }
        Some("super") => {
            while segs.first() == Some(&"super") {
                segs.remove(0);
                base.pop();
            }
        }
        Some(first) => {
            let child = if from.is_empty() {
                first.to_string()
            } else {
                format!("{from}::{first}")
            };
            if !modules.contains(&child) {
                return None; // an external crate or a local item
            }
        }
        None => return None,
    }
    let mut best = None;
    let mut cur = base.clone();
    if modules.contains(&cur.join("::")) {
        best = Some(cur.join("::"));
    }
    for s in segs {
        cur.push(s.to_string());
        let name = cur.join("::");
        if modules.contains(&name) {
            best = Some(name);
        } else {
            break;
        }
    }
    best
}

#[test]
fn src_modules_form_no_cycle() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let modules: BTreeSet<String> = all.iter().map(|f| module_of(&src, f)).collect();
    let use_re = Regex::new(r"(?s)(?:^|\n)\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);").unwrap();
    let path_re = Regex::new(r"\b(?:crate|super)(?:::[A-Za-z_][A-Za-z0-9_]*)+").unwrap();
    let rel_re = Regex::new(r"\b[a-z_][a-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)+").unwrap();
    let comment_re = Regex::new(r"(?m)//.*$").unwrap();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &all {
        let from = module_of(&src, f);
        let text = std::fs::read_to_string(f).unwrap();
        // Unit tests sit at the end of a file, in a module of their own.
        let text = text.split("#[cfg(test)]").next().unwrap();
        let code = comment_re.replace_all(text, "");
        let mut paths: Vec<String> = Vec::new();
        for c in use_re.captures_iter(&code) {
            paths.extend(expand(&c[1]));
        }
        paths.extend(path_re.find_iter(&code).map(|m| m.as_str().to_string()));
        // A child module's items named by a relative path in code.
        paths.extend(
            rel_re
                .find_iter(&code)
                .map(|m| m.as_str().to_string())
                .filter(|p| !p.starts_with("crate::") && !p.starts_with("super::")),
        );
        for p in paths {
            if let Some(to) = resolve(&p, &from, &modules) {
                if to != from {
                    edges.entry(from.clone()).or_default().insert(to);
                }
            }
        }
    }
    // Tarjan's strongly connected components.
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<String, usize>,
        low: BTreeMap<String, usize>,
        stack: Vec<String>,
        on: BTreeSet<String>,
        next: usize,
        cycles: Vec<Vec<String>>,
    }
    fn visit(s: &mut State<'_>, v: &str) {
        s.index.insert(v.to_string(), s.next);
        s.low.insert(v.to_string(), s.next);
        s.next += 1;
        s.stack.push(v.to_string());
        s.on.insert(v.to_string());
        let succ: Vec<String> = s.edges.get(v).into_iter().flatten().cloned().collect();
        for w in succ {
            if !s.index.contains_key(&w) {
                visit(s, &w);
                let l = s.low[&w].min(s.low[v]);
                s.low.insert(v.to_string(), l);
            } else if s.on.contains(&w) {
                let l = s.index[&w].min(s.low[v]);
                s.low.insert(v.to_string(), l);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on.remove(&w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.cycles.push(comp);
            }
        }
    }
    let mut st = State {
        edges: &edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        cycles: Vec::new(),
    };
    for m in &modules {
        if !st.index.contains_key(m) {
            visit(&mut st, m);
        }
    }
    let mut report = String::new();
    for c in &st.cycles {
        report.push_str(&format!("cycle among: {}\n", c.join(", ")));
        for a in c {
            for b in edges.get(a).into_iter().flatten() {
                if c.contains(b) {
                    report.push_str(&format!("  {a} -> {b}\n"));
                }
            }
        }
    }
    assert!(st.cycles.is_empty(), "module dependency cycles:\n{report}");
    // The graph is not empty: the test reads what it should.
    assert!(edges.get("malloc").is_some_and(|e| e.contains("runtime")));
    assert!(edges
        .get("page_alloc::zone::fallback")
        .is_some_and(|e| e.contains("page_alloc::zone::buddy")));
}
