//! The `hookonce` binary run as a command: its output, and the headers `sign` prints.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const BIN: &str = env!("CARGO_BIN_EXE_hookonce");

/// Runs `hookonce ARGS` with `env` added (and `HOOKONCE_CONFIG` removed) and waits for it.
pub fn hookonce(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(BIN);
    command.args(args).env_remove("HOOKONCE_CONFIG");
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().unwrap()
}

/// Standard output then standard error, as one text.
pub fn output_text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The `Name: value` lines `hookonce sign` prints, as headers.
pub fn printed_headers(stdout: &[u8]) -> Vec<(String, String)> {
    std::str::from_utf8(stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let (name, value) = line.split_once(": ").expect("Name: value");
            (name.to_owned(), value.to_owned())
        })
        .collect()
}

/// Writes `text` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `check-config` on every `(configuration, key, problem)` and asserts that each is refused
/// (a non-zero exit) with a message naming `key` followed by `problem`, and that none prints
/// `never_shown` (a credential); every wrong case is reported at once.
pub fn assert_refused(
    cases: impl IntoIterator<Item = (String, String, String)>,
    never_shown: &str,
) {
    let dir = tempfile::tempdir().unwrap();
    let mut wrong = Vec::new();
    for (text, key, problem) in cases {
        let path = write(dir.path(), "refused.toml", &text);
        let output = hookonce(&["check-config", "--config", path.to_str().unwrap()], &[]);
        let shown = output_text(&output);
        assert!(
            never_shown.is_empty() || !shown.contains(never_shown),
            "a credential was printed: {shown}"
        );
        if output.status.success() || !shown.contains(&key) || !shown.contains(&problem) {
            wrong.push(format!("{key} {problem}:\n{text}\n{shown}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "not refused as expected:\n{}",
        wrong.join("\n---\n")
    );
}
