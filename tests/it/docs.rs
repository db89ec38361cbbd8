//! The documents held against the code: docs/design.md's outcome tables against the outcome
//! enums and their status mapping, its metric table against the metric names of src/metrics.rs,
//! and every relative link of the project's Markdown against the files and headings it names.
//!
//! docs/design.md is the one reference; these tests are what keep it from drifting, as the
//! provider-table test (providers/examples.rs) does for the README.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use hookonce::outcome::{Outcome, ProxyOutcome};
use hookonce::webhooks::ingest::status_of;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn design() -> String {
    read(&root().join("docs/design.md"))
}

/// The text of the `## heading` section, up to the next `## ` heading.
fn section<'a>(doc: &'a str, heading: &str) -> &'a str {
    let marker = format!("\n## {heading}\n");
    let start = doc
        .find(&marker)
        .unwrap_or_else(|| panic!("no section \"## {heading}\""))
        + 1;
    let rest = &doc[start..];
    let end = rest[1..].find("\n## ").map_or(rest.len(), |i| i + 1);
    &rest[..end]
}

/// The cells of one table row, split on `|` but not on an escaped `\|`.
fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    let mut out = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                out.last_mut().unwrap().push('|');
                chars.next();
            }
            '|' => out.push(String::new()),
            c => out.last_mut().unwrap().push(c),
        }
    }
    out.into_iter()
        .map(|cell| cell.trim().to_string())
        .collect()
}

/// The body rows of every table in `text` whose header row's cells are `header`.
fn tables(text: &str, header: &[&str]) -> Vec<Vec<Vec<String>>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let starts_table = lines[i].starts_with('|')
            && (i == 0 || !lines[i - 1].starts_with('|'))
            && cells(lines[i]) == header;
        if starts_table {
            let rows: Vec<Vec<String>> = lines[i + 2..]
                .iter()
                .take_while(|line| line.starts_with('|'))
                .map(|line| cells(line))
                .collect();
            i += 2 + rows.len();
            found.push(rows);
        } else {
            i += 1;
        }
    }
    found
}

/// The one table with this header in this section of docs/design.md.
fn design_table(doc: &str, heading: &str, header: &[&str]) -> Vec<Vec<String>> {
    let mut found = tables(section(doc, heading), header);
    assert_eq!(
        found.len(),
        1,
        "docs/design.md, \"{heading}\": expected one table headed {header:?}"
    );
    found.remove(0)
}

/// A first cell such as "`forwarded`" as its label.
fn label(cell: &str) -> String {
    cell.trim_matches('`').to_string()
}

/// The first three-digit status in a cell such as "200 + the provider's acknowledgement".
fn first_status(cell: &str) -> Option<u16> {
    cell.split(|c: char| !c.is_ascii_digit())
        .find(|word| word.len() == 3)
        .and_then(|word| word.parse().ok())
}

/// Every row label of a table, refusing one listed twice.
fn labels(rows: &[Vec<String>], what: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for row in rows {
        assert!(seen.insert(label(&row[0])), "{what} lists {} twice", row[0]);
    }
    seen
}

/// docs/design.md's webhook outcome table is `Outcome::ALL` with the statuses of `status_of`:
/// the same labels, each with the status the code answers.
#[test]
fn the_webhook_outcome_table_is_the_codes_outcomes_and_statuses() {
    let doc = design();
    let rows = design_table(
        &doc,
        "Outcomes and status codes",
        &["outcome", "HTTP", "when"],
    );
    labels(&rows, "the webhook outcome table");
    let documented: BTreeMap<String, Option<u16>> = rows
        .iter()
        .map(|row| (label(&row[0]), first_status(&row[1])))
        .collect();
    let code: BTreeMap<String, Option<u16>> = Outcome::ALL
        .iter()
        .map(|&o| (o.label().to_string(), Some(status_of(o).as_u16())))
        .collect();
    assert_eq!(
        documented, code,
        "docs/design.md's webhook outcome table (left) disagrees with Outcome::ALL and status_of (right)"
    );
}

/// docs/design.md's proxy outcome table names exactly the labels of `ProxyOutcome::ALL`. The
/// proxy's statuses depend on the upstream's answer, and the code has no outcome-to-status
/// function to call, so the labels are what is held here.
#[test]
fn the_proxy_outcome_table_is_the_codes_proxy_outcomes() {
    let doc = design();
    let rows = design_table(&doc, "Idempotency-Key proxy", &["outcome", "HTTP", "when"]);
    let documented = labels(&rows, "the proxy outcome table");
    let code: BTreeSet<String> = ProxyOutcome::ALL
        .iter()
        .map(|o| o.label().to_string())
        .collect();
    assert_eq!(
        documented, code,
        "docs/design.md's proxy outcome table (left) disagrees with ProxyOutcome::ALL (right)"
    );
}

/// The metric names the code defines: every `pub const NAME: &str = "hookonce_…";` of
/// src/metrics.rs and of the files under src/metrics/, read from the sources so that a name
/// added anywhere there is seen without a list to keep in step.
fn metric_names_in_code() -> BTreeSet<String> {
    let mut files = vec![root().join("src/metrics.rs")];
    let mut dirs = vec![root().join("src/metrics")];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut names = BTreeSet::new();
    for file in files.iter().filter(|f| f.exists()) {
        for line in read(file).lines() {
            let line = line.trim();
            if !line.starts_with("pub const ") || !line.contains(": &str = \"hookonce_") {
                continue;
            }
            let name = line
                .split('"')
                .nth(1)
                .unwrap_or_else(|| panic!("{}: no quoted name in {line}", file.display()));
            names.insert(name.to_string());
        }
    }
    assert!(
        names.len() >= 20,
        "found only {} metric names in src/metrics.rs and src/metrics/: has the constant style changed?",
        names.len()
    );
    names
}

/// docs/design.md's metric table names exactly the metrics the code defines.
#[test]
fn the_metric_table_is_the_codes_metric_names() {
    let doc = design();
    let rows = design_table(
        &doc,
        "Metrics",
        &["name", "type", "labels", "what it counts"],
    );
    let documented = labels(&rows, "the metric table");
    assert_eq!(
        documented,
        metric_names_in_code(),
        "docs/design.md's metric table (left) disagrees with the metric names of src/metrics.rs (right)"
    );
}

/// The project's Markdown: the README, the top-level documents, docs/ and bench/history/.
fn markdown_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = [
        "README.md",
        "ARCHITECTURE.md",
        "SECURITY.md",
        "BENCHMARKS.md",
    ]
    .iter()
    .map(|name| root().join(name))
    .collect();
    for dir in ["docs", "bench/history"] {
        let Ok(entries) = std::fs::read_dir(root().join(dir)) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries
            .map(|entry| entry.expect("a directory entry").path())
            .filter(|path| path.extension().is_some_and(|e| e == "md"))
            .collect();
        found.sort();
        files.extend(found);
    }
    files
}

/// The targets of the inline links `[text](target)` outside fenced code blocks.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    out
}

/// The anchors GitHub gives the headings of a Markdown file: lower case, punctuation dropped,
/// spaces as hyphens, and `-1`, `-2` … after repeated headings.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let heading = line.trim_start_matches('#').trim();
        let slug: String = heading
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let count = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *count == 0 {
            slug.clone()
        } else {
            format!("{slug}-{count}")
        });
        *count += 1;
    }
    out
}

/// Every relative link in the project's Markdown names a file (or directory) that exists and,
/// with a `#fragment` into a Markdown file, a heading of that file; and no document names a
/// relative path that leads out of the repository, linked or not, since the docs must stand alone.
#[test]
fn every_relative_link_in_the_docs_resolves() {
    let mut broken = Vec::new();
    for file in markdown_files() {
        let text = read(&file);
        let shown = file
            .strip_prefix(root())
            .unwrap_or(&file)
            .display()
            .to_string();
        for path in relative_paths(&text) {
            if !within(root(), &file.parent().unwrap().join(path)) {
                broken.push(format!("{shown}: {path} leads out of the repository"));
            }
        }
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = match target.split_once('#') {
                Some((path, fragment)) => (path, Some(fragment)),
                None => (target.as_str(), None),
            };
            let linked = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            if !linked.exists() {
                broken.push(format!("{shown}: ({target}) names no file"));
                continue;
            }
            let markdown = linked.extension().is_some_and(|e| e == "md");
            if let (Some(fragment), true) = (fragment, markdown) {
                if !anchors(&read(&linked)).contains(fragment) {
                    broken.push(format!("{shown}: ({target}) names no heading"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// Every path in `text` that begins with `../` (in a link, code or prose), up to the first
/// character that cannot be part of it.
fn relative_paths(text: &str) -> Vec<&str> {
    let mut paths = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("../") {
        let starts_word =
            !rest[..at].ends_with(|c: char| c.is_alphanumeric() || c == '.' || c == '/');
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, ')' | '`' | '"' | '\'' | '>' | ']'))
            .unwrap_or(tail.len());
        if starts_word {
            paths.push(&tail[..end]);
        }
        rest = &tail[end.max(3)..];
    }
    paths
}

/// Whether `path`, with its `.` and `..` resolved by name alone (it need not exist), lies in `root`.
fn within(root: &std::path::Path, path: &std::path::Path) -> bool {
    let mut resolved = std::path::PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                resolved.pop();
            }
            std::path::Component::CurDir => {}
            other => resolved.push(other),
        }
    }
    resolved.starts_with(root)
}
