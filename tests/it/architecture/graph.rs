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

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

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

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Str(String),
    Punct(char),
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
    /// file by file: `a -> b -> a`, leaving out the edges `counts` rejects. Empty when the rest
    /// of the imports form a DAG.
    pub fn cycles(&self, counts: impl Fn(&str, &str) -> bool) -> Vec<Vec<String>> {
        self.components(counts)
            .into_iter()
            .map(|(_, cycle)| cycle)
            .collect()
    }

    /// Each strongly connected component of more than one file (its members, sorted) with one
    /// cycle through it.
    #[allow(clippy::type_complexity)]
    pub fn components(
        &self,
        counts: impl Fn(&str, &str) -> bool,
    ) -> Vec<(Vec<String>, Vec<String>)> {
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
                    .filter(|t| counts(n, t))
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

type Loaded = (Vec<String>, PathBuf, Scanned);

/// Reads one file as module `module` (children in `dir`), then every file it declares.
fn load(file: &Path, module: Vec<String>, dir: &Path, out: &mut Vec<Loaded>) {
    let text = std::fs::read_to_string(file)
        .unwrap_or_else(|error| panic!("reading {}: {error}", file.display()));
    let tokens = lex(&text);
    let scanned = scan(&tokens, &module);
    let children = scanned.children.clone();
    out.push((module.clone(), file.to_path_buf(), scanned));
    for (name, path_attribute) in children {
        let (child_file, child_dir) = match path_attribute {
            Some(relative) => {
                let declared_in = file.parent().expect("a source file has a directory");
                (declared_in.join(relative), declared_in.join(&name))
            }
            None => {
                let flat = dir.join(format!("{name}.rs"));
                if flat.exists() {
                    (flat, dir.join(&name))
                } else {
                    (dir.join(&name).join("mod.rs"), dir.join(&name))
                }
            }
        };
        let mut child = module.clone();
        child.push(name);
        load(&child_file, child, &child_dir, out);
    }
}

/// Reads one file's tokens: the modules it declares, the paths it names, the names it binds.
fn scan(tokens: &[(Token, usize)], module: &[String]) -> Scanned {
    let children: Vec<(String, Option<String>)> = declared_modules(tokens);
    let mut bindings = BTreeMap::new();
    let child_names: BTreeSet<&str> = children.iter().map(|(n, _)| n.as_str()).collect();
    let mut paths = Vec::new();
    // The inline modules (`mod tests { … }`) we are inside, with the brace depth each opened at.
    let mut inline: Vec<(String, usize, bool)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < tokens.len() {
        let current: Vec<String> = module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(n, _, _)| n.clone()))
            .collect();
        // Code inside a `#[cfg(test)]` inline module is charged to that module, as it would be
        // were the module a file of its own: where a test lives does not change the graph.
        let owner: Vec<String> = match inline.iter().position(|(_, _, test)| *test) {
            Some(at) => inline[..=at].iter().map(|(n, _, _)| n.clone()).collect(),
            None => Vec::new(),
        };
        let roots = if inline.is_empty() {
            Some(&child_names)
        } else {
            None
        };
        match &tokens[i].0 {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d, _)| *d == depth) {
                    inline.pop();
                }
            }
            Token::Ident(word) if word == "mod" => {
                if let (Some((Token::Ident(name), _)), Some((Token::Punct('{'), _))) =
                    (tokens.get(i + 1), tokens.get(i + 2))
                {
                    inline.push((name.clone(), depth, is_test(tokens, i)));
                    depth += 1;
                    i += 3;
                    continue;
                }
            }
            Token::Ident(word) if word == "use" => {
                let line = tokens[i].1;
                let mut end = i + 1;
                while end < tokens.len() && tokens[end].0 != Token::Punct(';') {
                    end += 1;
                }
                for (path, name) in use_tree(&tokens[i + 1..end]) {
                    if let Some(absolute) = absolute(&path, &current, roots) {
                        if let (Some(name), true) = (name, depth == 0) {
                            bindings.insert(name, absolute.clone());
                        }
                        paths.push((owner.clone(), absolute, line));
                    }
                }
                i = end + 1;
                continue;
            }
            Token::Ident(_) if !follows_separator(tokens, i) => {
                let line = tokens[i].1;
                let mut path = Vec::new();
                let mut j = i;
                while let Some((Token::Ident(segment), _)) = tokens.get(j) {
                    path.push(segment.clone());
                    if tokens.get(j + 1).map(|t| &t.0) == Some(&Token::PathSep) {
                        j += 2;
                    } else {
                        break;
                    }
                }
                if path.len() > 1 {
                    if let Some(absolute) = absolute(&path, &current, roots) {
                        paths.push((owner.clone(), absolute, line));
                    }
                }
                i = j + 1;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    Scanned {
        children,
        paths,
        bindings,
    }
}

/// What one file declares and names.
struct Scanned {
    /// The file modules it declares, with their `#[path]`.
    children: Vec<(String, Option<String>)>,
    /// Every absolute path it names, with its line, and the test module (if any) it is in.
    paths: Vec<(Vec<String>, Vec<String>, usize)>,
    /// The names its top-level `use` items bind, to the absolute path each names: an item of
    /// this crate reached through them is charged to the file that defines it.
    bindings: BTreeMap<String, Vec<String>>,
}

/// Whether the item at `i` (a `mod`) carries `#[cfg(test)]`.
fn is_test(tokens: &[(Token, usize)], i: usize) -> bool {
    let mut k = i;
    while k >= 4 {
        if let (Token::Ident(cfg), Token::Punct('('), Token::Ident(test), Token::Punct(')')) = (
            &tokens[k - 4].0,
            &tokens[k - 3].0,
            &tokens[k - 2].0,
            &tokens[k - 1].0,
        ) {
            if cfg == "cfg" && test == "test" {
                return true;
            }
        }
        if matches!(tokens[k - 1].0, Token::Punct(';' | '}' | '{')) {
            return false;
        }
        k -= 1;
    }
    false
}

/// Whether the token before `i` is `::` or `$` (a path's inner segment, or `$crate` in a macro).
fn follows_separator(tokens: &[(Token, usize)], i: usize) -> bool {
    i > 0 && matches!(tokens[i - 1].0, Token::PathSep | Token::Punct('$'))
}

/// `mod name;` declarations at any depth, with the `#[path = "…"]` just before each.
fn declared_modules(tokens: &[(Token, usize)]) -> Vec<(String, Option<String>)> {
    let mut found = Vec::new();
    for i in 0..tokens.len() {
        if let (Token::Ident(word), Some((Token::Ident(name), _)), Some((Token::Punct(';'), _))) =
            (&tokens[i].0, tokens.get(i + 1), tokens.get(i + 2))
        {
            if word != "mod" {
                continue;
            }
            // Look back over the attributes of this item for `path = "…"`.
            let mut path = None;
            let mut k = i;
            while k >= 3 {
                match (&tokens[k - 3].0, &tokens[k - 2].0, &tokens[k - 1].0) {
                    (Token::Ident(p), Token::Punct('='), Token::Str(value)) if p == "path" => {
                        path = Some(value.clone());
                        break;
                    }
                    _ => {}
                }
                if matches!(tokens[k - 1].0, Token::Punct(';') | Token::Punct('}')) {
                    break;
                }
                k -= 1;
            }
            found.push((name.clone(), path));
        }
    }
    found
}

/// Expands a `use` tree (the tokens between `use` and `;`) into its paths.
fn use_tree(tokens: &[(Token, usize)]) -> Vec<(Vec<String>, Option<String>)> {
    let mut out = Vec::new();
    let mut i = 0;
    tree(tokens, &mut i, Vec::new(), &mut out);
    out
}

fn tree(
    tokens: &[(Token, usize)],
    i: &mut usize,
    mut prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) {
    let mut binding = None;
    while let Some((token, _)) = tokens.get(*i) {
        match token {
            Token::Ident(word) if word == "as" => {
                if let Some((Token::Ident(alias), _)) = tokens.get(*i + 1) {
                    binding = Some(alias.clone());
                }
                *i += 2;
                break;
            }
            Token::Ident(segment) => {
                // `use a::{self, b}`: `self` names `a` itself.
                if segment != "self" || prefix.is_empty() {
                    prefix.push(segment.clone());
                }
                *i += 1;
            }
            Token::PathSep => *i += 1,
            Token::Punct('*') => {
                // A glob binds no one name.
                binding = Some(String::new());
                *i += 1;
                break;
            }
            Token::Punct('{') => {
                *i += 1;
                loop {
                    tree(tokens, i, prefix.clone(), out);
                    match tokens.get(*i).map(|t| &t.0) {
                        Some(Token::Punct(',')) => *i += 1,
                        Some(Token::Punct('}')) => {
                            *i += 1;
                            break;
                        }
                        _ => break,
                    }
                    if tokens.get(*i).map(|t| &t.0) == Some(&Token::Punct('}')) {
                        *i += 1;
                        break;
                    }
                }
                return;
            }
            _ => break,
        }
    }
    if !prefix.is_empty() {
        let name = match binding {
            Some(alias) if alias.is_empty() || alias == "_" => None,
            Some(alias) => Some(alias),
            None => prefix.last().cloned(),
        };
        out.push((prefix, name));
    }
}

/// The absolute module path a path names, or None when it starts elsewhere (another crate, a
/// local name). `roots` are the child modules a path may start with (only at file level).
fn absolute(
    path: &[String],
    current: &[String],
    roots: Option<&BTreeSet<&str>>,
) -> Option<Vec<String>> {
    let mut base: Vec<String>;
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => {
            base = Vec::new();
            rest = &path[1..];
        }
        Some("self") => {
            base = current.to_vec();
            rest = &path[1..];
        }
        Some("super") => {
            base = current.to_vec();
            while rest.first().map(String::as_str) == Some("super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        Some(first) if roots.is_some_and(|r| r.contains(first)) => base = current.to_vec(),
        _ => return None,
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// Tarjan's algorithm: the strongly connected components of a graph given by successor lists.
fn strongly_connected(successors: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        successors: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        components: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in &s.successors[v] {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            s.components.push(component);
        }
    }
    let n = successors.len();
    let mut s = State {
        successors,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        components: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.components
}

/// One cycle through a strongly connected component: the shortest path from its smallest member
/// back to itself, found breadth first inside the component, closed (first == last).
fn cycle_within(successors: &[Vec<usize>], component: &[usize]) -> Vec<usize> {
    let members: BTreeSet<usize> = component.iter().copied().collect();
    let start = *members.iter().next().expect("a component has a member");
    let mut parent: BTreeMap<usize, usize> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for &w in &successors[v] {
            if !members.contains(&w) {
                continue;
            }
            if w == start {
                let mut cycle = vec![v];
                while let Some(&up) = parent.get(cycle.last().expect("never empty")) {
                    cycle.push(up);
                }
                cycle.reverse();
                if cycle[0] != start {
                    cycle.insert(0, start);
                }
                cycle.push(start);
                return cycle;
            }
            if let std::collections::btree_map::Entry::Vacant(e) = parent.entry(w) {
                e.insert(v);
                queue.push_back(w);
            }
        }
    }
    vec![start, start]
}

/// Splits source text into identifiers, `::`, string literals and single punctuation, with line
/// numbers, leaving out comments, char literals and lifetimes.
fn lex(text: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut nesting = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    nesting += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    nesting -= 1;
                    i += 2;
                    if nesting == 0 {
                        break;
                    }
                } else {
                    if chars[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if let Some((value, end, lines)) = string_at(&chars, i) {
            tokens.push((Token::Str(value), line));
            line += lines;
            i = end;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{…}') or a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let mut word: String = chars[start..i].iter().collect();
            if word == "r" && chars.get(i) == Some(&'#') {
                // A raw identifier, r#type.
                let s = i + 1;
                i = s;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                word = chars[s..i].iter().collect();
            }
            tokens.push((Token::Ident(word), line));
        } else if c == ':' && next == Some(':') {
            tokens.push((Token::PathSep, line));
            i += 2;
        } else {
            tokens.push((Token::Punct(c), line));
            i += 1;
        }
    }
    tokens
}

/// A string literal starting at `i` ("…", b"…", r"…", r#"…"#, br#"…"#): its text, where it ends and
/// how many newlines it spans.
fn string_at(chars: &[char], i: usize) -> Option<(String, usize, usize)> {
    let mut j = i;
    if chars.get(j) == Some(&'b') || chars.get(j) == Some(&'c') {
        j += 1;
    }
    let raw = chars.get(j) == Some(&'r');
    if raw {
        j += 1;
    }
    let mut hashes = 0;
    while raw && chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    if chars.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    let start = j;
    let mut lines = 0;
    while j < chars.len() {
        let c = chars[j];
        if c == '\n' {
            lines += 1;
        }
        if !raw && c == '\\' {
            j += 2;
            continue;
        }
        if c == '"' && (0..hashes).all(|h| chars.get(j + 1 + h) == Some(&'#')) {
            let value = chars[start..j].iter().collect();
            return Some((value, j + 1 + hashes, lines));
        }
        j += 1;
    }
    Some((chars[start..].iter().collect(), chars.len(), lines))
}
