//! When the daemon's link places its hot functions together, and the linker arguments that do it:
//! build.rs passes them, tests/it/link_order.rs holds the conditions.
//!
//! build/hot-functions.txt lists the functions the request paths run, hottest first
//! (bench/hot-functions writes it from callgrind runs of the release build; the `production`
//! profile's build has its own list). Given to lld as `--symbol-ordering-file`,
//! they lie on a few hundred contiguous pages instead of being spread over the whole text
//! section, which costs the CPU fewer instruction-cache and TLB misses per request. The order
//! changes where code lies, never what it does. Only lld and mold take the option (rustc links
//! `x86_64-unknown-linux-gnu` with its own lld from Rust 1.90 on); GNU ld and gold refuse it.
//! So before giving it, the build script links an empty program as the daemon will be linked
//! (the same rustc, target, linker and flags) with the option added, and gives it only if that
//! links: a toolchain without lld, or a build that names another linker, links as before.

use std::path::Path;
use std::process::{Command, Stdio};

/// The order file for a build whose build script writes into `out_dir` (Cargo's `OUT_DIR`,
/// `<target dir>/[<triple>/]<profile>/build/<package>-<hash>/out`): fat link-time
/// optimisation inlines and renames most of the functions the release build keeps, so the
/// `production` profile has an order of its own, `build/hot-functions-production.txt`; every
/// other profile reads `build/hot-functions.txt`.
pub fn order_file(out_dir: &Path) -> &'static str {
    let profile = out_dir
        .ancestors()
        .nth(3)
        .and_then(|dir| dir.file_name())
        .and_then(|name| name.to_str());
    match profile {
        Some("production") => "build/hot-functions-production.txt",
        _ => "build/hot-functions.txt",
    }
}

/// How the daemon will be linked: what the build script reads from Cargo.
pub struct Link<'a> {
    /// Cargo's `RUSTC`.
    pub rustc: &'a str,
    /// Cargo's `TARGET`.
    pub target: &'a str,
    /// Cargo's `RUSTC_LINKER`: the linker the build configured, if any.
    pub linker: Option<&'a str>,
    /// Cargo's `CARGO_ENCODED_RUSTFLAGS`: the flags, separated by 0x1f.
    pub rustflags: &'a str,
    /// Where the trial link may write (the build script's `OUT_DIR`).
    pub scratch: &'a Path,
}

/// The arguments to add to the daemon's link for `order_file`: none when `switch` (the
/// `HOOKONCE_FUNCTION_ORDER` setting) is `off`, when the path holds a comma (the C compiler
/// driver splits `-Wl,` arguments at commas), or when a trial link with them fails.
pub fn link_args(switch: Option<&str>, order_file: &str, link: &Link<'_>) -> Vec<String> {
    if switch == Some("off") || order_file.contains(',') {
        return Vec::new();
    }
    let args = vec![
        format!("-Wl,--symbol-ordering-file={order_file}"),
        // A listed function this build does not define (inlined, renamed, another profile's
        // symbol) is skipped without a word.
        "-Wl,--no-warn-symbol-ordering".to_owned(),
    ];
    if links_with(link, &args) {
        args
    } else {
        Vec::new()
    }
}

/// Whether an empty program links as `link` describes with `args` added.
fn links_with(link: &Link<'_>, args: &[String]) -> bool {
    let source = link.scratch.join("link_order_probe.rs");
    if std::fs::write(&source, "fn main() {}\n").is_err() {
        return false;
    }
    let mut rustc = Command::new(link.rustc);
    rustc
        .args([
            "--crate-name",
            "link_order_probe",
            "--crate-type",
            "bin",
            "--target",
        ])
        .arg(link.target)
        .arg("-o")
        .arg(link.scratch.join("link_order_probe"))
        .arg(&source);
    if let Some(linker) = link.linker {
        rustc.arg("-C").arg(format!("linker={linker}"));
    }
    rustc.args(link.rustflags.split('\x1f').filter(|flag| !flag.is_empty()));
    for arg in args {
        rustc.arg("-C").arg(format!("link-arg={arg}"));
    }
    rustc
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}
