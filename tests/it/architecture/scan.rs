//! Reads one source file for the import graph: the modules it declares (with `#[path]`), the
//! absolute paths it names (in `use` trees and in code), and the names its `use` items bind.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::lex::{lex, Token};

pub type Loaded = (Vec<String>, PathBuf, Scanned);

/// Reads one file as module `module` (children in `dir`), then every file it declares.
pub fn load(file: &Path, module: Vec<String>, dir: &Path, out: &mut Vec<Loaded>) {
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
pub struct Scanned {
    /// The file modules it declares, with their `#[path]`.
    pub children: Vec<(String, Option<String>)>,
    /// Every absolute path it names, with its line, and the test module (if any) it is in.
    pub paths: Vec<(Vec<String>, Vec<String>, usize)>,
    /// The names its top-level `use` items bind, to the absolute path each names: an item of
    /// this crate reached through them is charged to the file that defines it.
    pub bindings: BTreeMap<String, Vec<String>>,
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
