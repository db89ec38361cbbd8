//! Splits Rust source text into the few tokens the import graph needs.

#[derive(Debug, Clone, PartialEq)]
pub enum Token {
    Ident(String),
    PathSep,
    Str(String),
    Punct(char),
}

/// Splits source text into identifiers, `::`, string literals and single punctuation, with line
/// numbers, leaving out comments, char literals and lifetimes.
pub fn lex(text: &str) -> Vec<(Token, usize)> {
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
