//! The file-level import graph of the library's sources, built from the text of src/.
//!
//! A file is a node named by its module path (`src/relay/job.rs` and `src/relay/job/mod.rs` are both
//! `relay::job`; `src/lib.rs` is the crate root, ""). An edge runs from a file to every file whose
//! items it names: through a `use` tree or a path in code that starts at `crate::`, `super::`,
//! `self::` or a child module the file declares. A `mod` declaration is not an edge. The files are
//! found by following `mod` declarations from src/lib.rs (honouring `#[path]`), so a file the crate
//! does not compile is not in the graph.
//!
//! The reading is lexical, not a compiler's: comments and literals are skipped, a path is a run of
//! identifiers joined by `::`, and a path is charged to the longest module prefix that is a file.
//! That is exact enough for this crate's code (no `pub(in …)`, no macros that build paths), and
//! the tests in `mod.rs` check it against edges known to exist.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::cycles::{cycle_within, strongly_connected};
use super::scan::load;

/// One file of the crate: where it is and the files it imports, each with the first line that does.
#[derive(Debug, Default)]
pub struct Node {
    pub file: PathBuf,
    pub imports: BTreeMap<String, usize>,
}

/// Every file of the library crate, by module path.
#[derive(Debug, Default)]
pub struct Graph {
    pub nodes: BTreeMap<String, Node>,
    bindings: BTreeMap<String, BTreeMap<String, Vec<String>>>,
}

impl Graph {
    /// Reads the crate whose root is `lib` (src/lib.rs) and every module file it declares.
    pub fn of_crate(lib: &Path) -> Graph {
        let mut graph = Graph::default();
        let mut raw = Vec::new();
        load(
            lib,
            Vec::new(),
            lib.parent().expect("lib.rs has a directory"),
            &mut raw,
        );
        let name_of = |module: &[String], owner: &[String]| {
            module
                .iter()
                .chain(owner)
                .cloned()
                .collect::<Vec<_>>()
                .join("::")
        };
        for (module, file, scanned) in &raw {
            graph
                .bindings
                .insert(module.join("::"), scanned.bindings.clone());
            for owner in std::iter::once(&Vec::new()).chain(scanned.paths.iter().map(|p| &p.0)) {
                graph.nodes.entry(name_of(module, owner)).or_default().file = file.clone();
            }
        }
        for (module, _, scanned) in raw {
            for (owner, path, line) in scanned.paths {
                let name = name_of(&module, &owner);
                if let Some(target) = graph.file_of(&path) {
                    if target != name {
                        let node = graph.nodes.get_mut(&name).expect("entered above");
                        node.imports.entry(target).or_insert(line);
                    }
                }
            }
        }
        graph
    }

    /// The file that defines the item an absolute path names: its longest prefix that is a file,
    /// or, when the rest of the path starts with a name that file binds with `use` (a re-export),
    /// the file that binding leads to.
    fn file_of(&self, path: &[String]) -> Option<String> {
        self.file_of_within(path, 8)
    }

    fn file_of_within(&self, path: &[String], hops: usize) -> Option<String> {
        let len = (0..=path.len())
            .rev()
            .find(|len| self.nodes.contains_key(&path[..*len].join("::")))?;
        let file = path[..len].join("::");
        if let (Some(next), true) = (path.get(len), hops > 0) {
            if let Some(bound) = self.bindings.get(&file).and_then(|b| b.get(next)) {
                let mut through: Vec<String> = bound.clone();
                through.extend(path[len + 1..].iter().cloned());
                if through != path {
                    return self.file_of_within(&through, hops - 1);
                }
            }
        }
        Some(file)
    }

    /// Whether `from` imports `to` directly.
    pub fn imports(&self, from: &str, to: &str) -> bool {
        self.nodes
            .get(from)
            .is_some_and(|node| node.imports.contains_key(to))
    }

    /// Every edge, as (from, to, line of `from` that makes it).
    pub fn edges(&self) -> impl Iterator<Item = (&str, &str, usize)> {
        self.nodes.iter().flat_map(|(from, node)| {
            node.imports
                .iter()
                .map(move |(to, line)| (from.as_str(), to.as_str(), *line))
        })
    }

    /// Each strongly connected component of more than one file, as one cycle through it, named
    /// file by file: `a -> b -> a`. Empty when the imports form a DAG.
    pub fn cycles(&self) -> Vec<Vec<String>> {
        self.components()
            .into_iter()
            .map(|(_, cycle)| cycle)
            .collect()
    }

    /// Each strongly connected component of more than one file (its members, sorted) with one
    /// cycle through it.
    #[allow(clippy::type_complexity)]
    pub fn components(&self) -> Vec<(Vec<String>, Vec<String>)> {
        let names: Vec<&String> = self.nodes.keys().collect();
        let index: BTreeMap<&str, usize> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i))
            .collect();
        let successors: Vec<Vec<usize>> = names
            .iter()
            .map(|n| {
                self.nodes[*n]
                    .imports
                    .keys()
                    .map(|t| index[t.as_str()])
                    .collect()
            })
            .collect();
        strongly_connected(&successors)
            .into_iter()
            .filter(|component| component.len() > 1)
            .map(|component| {
                let mut members: Vec<String> =
                    component.iter().map(|i| names[*i].clone()).collect();
                members.sort();
                let cycle = cycle_within(&successors, &component)
                    .into_iter()
                    .map(|i| names[i].clone())
                    .collect();
                (members, cycle)
            })
            .collect()
    }

    /// A cycle written out with the line that makes each of its edges, for a failure message.
    pub fn describe(&self, cycle: &[String]) -> String {
        let mut text = String::new();
        for pair in cycle.windows(2) {
            let node = &self.nodes[&pair[0]];
            let line = node.imports[&pair[1]];
            text.push_str(&format!(
                "    {} -> {}   ({}:{line})\n",
                display(&pair[0]),
                display(&pair[1]),
                node.file.display()
            ));
        }
        text
    }
}

/// The crate root's name in messages.
pub fn display(module: &str) -> &str {
    if module.is_empty() {
        "crate"
    } else {
        module
    }
}
