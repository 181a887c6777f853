//! The crate's module graph is acyclic: a module that defines what others
//! use depends on none of its users. Edges are the paths each file names
//! (`use` items and paths in code, tests included) resolved to the deepest
//! module of the crate they reach; inline modules count as their file's
//! module, and `mod` declarations alone are no edge.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

use syn::visit::Visit;

/// A module path, `crate::a::b` as `["a", "b"]` (the root is empty).
type Module = Vec<String>;

/// The module a source file defines, from its path under `src/`.
fn module_of(rel: &Path) -> Module {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// Collects every module path (files and inline modules) of one file.
struct Modules<'a> {
    stack: Module,
    out: &'a mut BTreeSet<Module>,
}

impl<'ast> Visit<'ast> for Modules<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        self.stack.push(m.ident.to_string());
        self.out.insert(self.stack.clone());
        syn::visit::visit_item_mod(self, m);
        self.stack.pop();
    }
}

/// Collects the modules a file's paths reach.
struct Uses<'a> {
    known: &'a BTreeSet<Module>,
    /// The module the visitor is in (inline modules pushed).
    stack: Module,
    reached: BTreeSet<Module>,
}

impl Uses<'_> {
    /// Record the module `segments` (as written in module `self.stack`) lands in.
    fn reach(&mut self, segments: &[String]) {
        let mut abs: Module = self.stack.clone();
        let mut rest = segments;
        match rest.first().map(String::as_str) {
            Some("crate") => {
                abs.clear();
                rest = &rest[1..];
            }
            Some("self") => rest = &rest[1..],
            Some("super") => {
                while rest.first().map(String::as_str) == Some("super") {
                    abs.pop();
                    rest = &rest[1..];
                }
            }
            Some(first) => {
                // A relative path starts at a child module, or is an item,
                // a local or another crate: then it names no module here.
                let mut child = abs.clone();
                child.push(first.to_string());
                if !self.known.contains(&child) {
                    return;
                }
            }
            None => return,
        }
        // The deepest module along the path.
        let mut deepest = abs.clone();
        for s in rest {
            abs.push(s.clone());
            if self.known.contains(&abs) {
                deepest = abs.clone();
            } else {
                break;
            }
        }
        self.reached.insert(deepest);
    }
}

/// Flatten a use tree into its paths.
fn use_paths(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_paths(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let mut v = prefix.clone();
            if n.ident != "self" {
                v.push(n.ident.to_string());
            }
            out.push(v);
        }
        syn::UseTree::Rename(r) => {
            let mut v = prefix.clone();
            v.push(r.ident.to_string());
            out.push(v);
        }
        syn::UseTree::Glob(_) => out.push(prefix.clone()),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                use_paths(t, prefix, out);
            }
        }
    }
}

impl<'ast> Visit<'ast> for Uses<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        self.stack.push(m.ident.to_string());
        syn::visit::visit_item_mod(self, m);
        self.stack.pop();
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut paths = Vec::new();
        use_paths(&u.tree, &mut Vec::new(), &mut paths);
        for p in paths {
            self.reach(&p);
        }
    }

    /// `pub(super)` and `pub(in path)` say who may use an item, not what
    /// the item uses: no edge.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        self.reach(&segments);
        syn::visit::visit_path(self, p);
    }
}

/// Parsed files of `src/` by the module each defines; `main.rs` is the
/// binary, another crate.
fn parse_src() -> BTreeMap<Module, syn::File> {
    let src = crate::root().join("src");
    let mut files = BTreeMap::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && path != src.join("main.rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                let file =
                    syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                files.insert(module_of(path.strip_prefix(&src).unwrap()), file);
            }
        }
    }
    files
}

/// Module → modules it reaches, self and the binary's `main` left out.
fn graph(files: &BTreeMap<Module, syn::File>) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut known: BTreeSet<Module> = files.keys().cloned().collect();
    for (m, f) in files {
        Modules {
            stack: m.clone(),
            out: &mut known,
        }
        .visit_file(f);
    }
    files
        .iter()
        .map(|(m, f)| {
            let mut u = Uses {
                known: &known,
                stack: m.clone(),
                reached: BTreeSet::new(),
            };
            u.visit_file(f);
            // Inline modules are their file's module.
            let to = u
                .reached
                .into_iter()
                .filter(|t| !t.starts_with(m) || files.contains_key(t))
                .filter(|t| t != m)
                .collect();
            (m.clone(), to)
        })
        .collect()
}

/// The strongly connected components of `g` with more than one module:
/// each is a set of modules that reach each other, i.e. cycles.
fn cycles(g: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<BTreeSet<Module>> {
    // Tarjan's algorithm; the graph has a few dozen nodes, recursion is fine.
    struct T<'a> {
        g: &'a BTreeMap<Module, BTreeSet<Module>>,
        next: usize,
        index: BTreeMap<Module, usize>,
        low: BTreeMap<Module, usize>,
        stack: Vec<Module>,
        out: Vec<BTreeSet<Module>>,
    }
    impl T<'_> {
        fn visit(&mut self, v: &Module) {
            self.index.insert(v.clone(), self.next);
            self.low.insert(v.clone(), self.next);
            self.next += 1;
            self.stack.push(v.clone());
            for w in self.g.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if self.stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = BTreeSet::new();
                loop {
                    let w = self.stack.pop().unwrap();
                    let done = &w == v;
                    comp.insert(w);
                    if done {
                        break;
                    }
                }
                if comp.len() > 1 {
                    self.out.push(comp);
                }
            }
        }
    }
    let mut t = T {
        g,
        next: 0,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.out
}

fn show(m: &Module) -> String {
    std::iter::once("crate")
        .chain(m.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join("::")
}

fn parse_module(s: &str) -> Module {
    s.split("::").map(String::from).collect()
}

fn describe(c: &BTreeSet<Module>) -> String {
    c.iter().map(show).collect::<Vec<_>>().join(", ")
}

/// No cycle at all, parent and child included: a parent that shares items
/// with its children (`use super::`) while calling into them keeps those
/// items in a sibling module it re-exports (`controller/context.rs`,
/// `sources/source.rs`, `render/shared.rs`, ...).
#[test]
fn the_module_graph_of_src_has_no_cycle() {
    let found = cycles(&graph(&parse_src()));
    let described: Vec<String> = found.iter().map(describe).collect();
    assert!(
        described.is_empty(),
        "module cycles (move what the modules share into a module that imports none of them):\n{}",
        described.join("\n")
    );
}

/// The check sees a cycle through `use super::`, `use crate::`, a path
/// relative to a child module and one in code, and none once the back
/// edges are gone.
#[test]
fn a_cycle_between_modules_is_found() {
    let file = |s: &str| syn::parse_file(s).unwrap();
    let mut files = BTreeMap::new();
    files.insert(vec![], file("pub mod p;"));
    files.insert(
        parse_module("p"),
        file("pub mod server; pub fn load() {} pub fn main() { server::run() }"),
    );
    files.insert(
        parse_module("p::server"),
        file("use super::state::Shared; pub fn run() { crate::p::conn::handle(); }"),
    );
    files.insert(
        parse_module("p::conn"),
        file("pub fn handle() { super::load() }"),
    );
    files.insert(
        parse_module("p::state"),
        file("pub(super) struct Shared; pub(in crate::p) fn f() {}"),
    );

    let mut back_to_server = files.clone();
    back_to_server.insert(
        parse_module("p::state"),
        file("use crate::p::server; pub struct Shared;"),
    );
    let found = cycles(&graph(&back_to_server));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        describe(&found[0]),
        "crate::p, crate::p::conn, crate::p::server, crate::p::state"
    );

    let found = cycles(&graph(&files));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        describe(&found[0]),
        "crate::p, crate::p::conn, crate::p::server"
    );

    files.insert(parse_module("p::conn"), file("pub fn handle() {}"));
    assert_eq!(cycles(&graph(&files)), Vec::<BTreeSet<Module>>::new());
}
