//! ARCHITECTURE.md's invariants about imports, checked against the crate's own sources: the
//! file-level import graph of src/ (see `graph.rs` for how it is read) has no cycle, `config` and
//! `util` are leaves, and the relay does not reach into the webhook front.

mod cycles;
mod graph;
mod lex;
mod scan;

use graph::{display, Graph};
use std::path::Path;

fn crate_graph() -> Graph {
    Graph::of_crate(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs"))
}

fn failure(graph: &Graph, components: &[(Vec<String>, Vec<String>)]) -> String {
    let mut text = format!(
        "{} group(s) of files of src/ import each other (ARCHITECTURE.md, Invariants):\n",
        components.len()
    );
    for (members, cycle) in components {
        let names: Vec<&str> = cycle.iter().map(|m| display(m)).collect();
        text.push_str(&format!(
            "  {{{}}}, for one: {}\n{}",
            members.join(", "),
            names.join(" -> "),
            graph.describe(cycle)
        ));
    }
    text
}

#[test]
fn imports_between_files_form_a_dag() {
    let graph = crate_graph();
    let components = graph.components();
    assert!(components.is_empty(), "{}", failure(&graph, &components));
}

/// The graph is read right: edges that the code certainly has are found, so an empty list of
/// cycles is not an empty graph.
#[test]
fn import_graph_finds_known_edges() {
    let graph = crate_graph();
    assert!(graph.nodes.len() > 50, "only {} files", graph.nodes.len());
    for (from, to) in [
        ("app", "store"),
        ("webhooks::ingest", "forward::delivery"),
        ("webhooks", "webhooks::ingest"),
        ("config::endpoints::settings_tests", "config"),
        ("relay::route_runner", "relay::route"),
        ("store::streams", "store::connection"),
        ("relay::job", "relay::deliver"),
    ] {
        assert!(graph.imports(from, to), "{from} -> {to} not found");
    }
}

/// The check catches a cycle and names it, through a re-export as well as directly, and counts
/// a façade's imports like any other file's: a child that imports its façade's own item while
/// the façade calls the child is a cycle.
#[test]
fn import_graph_names_a_planted_cycle() {
    let dir = std::env::temp_dir().join(format!("hookonce-architecture-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::fs::create_dir_all(dir.join("c")).unwrap();
    let write = |path: &str, text: &str| std::fs::write(dir.join(path), text).unwrap();
    write("lib.rs", "mod a;\nmod b;\nmod c;\n");
    write(
        "a/mod.rs",
        "mod one;\nmod two;\npub use one::One;\npub fn x() { two::f() }\n",
    );
    // `two` reaches `one` through the façade's re-export, and `one` uses `two` directly.
    write(
        "a/one.rs",
        "pub struct One;\nfn g() { super::two::f(); } // crate::b::nothing\n",
    );
    write(
        "a/two.rs",
        "use super::One;\npub fn f() { let _ = \"crate::b\"; }\n",
    );
    write("b.rs", "use crate::a::x;\n");
    // `c`'s façade calls its child, and the child imports the façade's own error.
    write(
        "c/mod.rs",
        "mod child;\npub struct CError;\npub fn run() { child::go() }\n",
    );
    write("c/child.rs", "use super::CError;\npub fn go() {}\n");
    let graph = Graph::of_crate(&dir.join("lib.rs"));
    let mut cycles = graph.cycles();
    cycles.sort();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        cycles,
        vec![
            vec!["a::one", "a::two", "a::one"],
            vec!["c", "c::child", "c"]
        ],
        "{graph:#?}"
    );
    assert!(graph.imports("b", "a"), "{graph:#?}");
    assert!(graph.imports("a", "a::one"), "a re-export is an import");
    assert!(!graph.imports("a::one", "b"), "a comment is not an import");
    assert!(!graph.imports("a::two", "b"), "a string is not an import");
    assert!(
        !graph.imports("", "a"),
        "a `mod` declaration is not an import"
    );
}

#[test]
fn config_and_util_are_leaves() {
    let graph = crate_graph();
    let outside: Vec<String> = graph
        .edges()
        .filter(|(from, to, _)| {
            let within = |root: &str| *from == root || from.starts_with(&format!("{root}::"));
            let leaf = if within("config") {
                "config"
            } else if within("util") {
                "util"
            } else {
                return false;
            };
            // `property` is the crate's test-only proptest setup, which config's property tests use.
            !(*to == leaf || to.starts_with(&format!("{leaf}::")) || *to == "property")
        })
        .map(|(from, to, line)| format!("{from} -> {} (line {line})", display(to)))
        .collect();
    assert!(outside.is_empty(), "a leaf imports the crate: {outside:#?}");
}
#[test]
fn relay_does_not_import_the_webhook_front() {
    let graph = crate_graph();
    let up: Vec<String> = graph
        .edges()
        .filter(|(from, to, _)| {
            (*from == "relay" || from.starts_with("relay::"))
                && (*to == "webhooks" || to.starts_with("webhooks::"))
        })
        .map(|(from, to, line)| format!("{from} -> {to} (line {line})"))
        .collect();
    assert!(
        up.is_empty(),
        "the relay imports the webhook front: {up:#?}"
    );
}
