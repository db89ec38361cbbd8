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
