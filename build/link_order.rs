//! When the daemon's link places its hot functions together, and the linker arguments that do it:
//! build.rs passes them, tests/it/link_order.rs holds the conditions.
//!
//! build/hot-functions.txt lists the functions the request paths run, hottest first
//! (bench/hot-functions writes it from callgrind runs of the release build; the `production`
//! profile's build has its own list). Given to lld as `--symbol-ordering-file`,
//! they lie on a few hundred contiguous pages instead of being spread over the whole text
//! section, which costs the CPU fewer instruction-cache and TLB misses per request. The order
//! changes where code lies, never what it does. Only lld (and mold) take the option; since Rust
//! 1.90 rustc links `x86_64-unknown-linux-gnu` with its own lld unless told otherwise, so the
//! arguments are given there alone, and not when the build names a linker of its own.

/// What the build script knows of the build.
pub struct Build<'a> {
    /// Cargo's `TARGET`.
    pub target: &'a str,
    /// What `rustc -vV` printed (its `release:` line is read), or `None` when it did not run.
    pub rustc_version: Option<&'a str>,
    /// Whether Cargo resolved a linker of the build's own (`RUSTC_LINKER`).
    pub linker_configured: bool,
    /// Cargo's `CARGO_ENCODED_RUSTFLAGS`: the flags, separated by 0x1f.
    pub rustflags: &'a str,
    /// `HOOKONCE_FUNCTION_ORDER`: `off` leaves the order to the linker.
    pub switch: Option<&'a str>,
    /// The order file for this build's profile ([`order_file`]).
    pub order_file: &'a str,
}

/// The order file for a build whose build script writes into `out_dir` (Cargo's `OUT_DIR`,
/// `<target dir>/[<triple>/]<profile>/build/<package>-<hash>/out`): fat link-time
/// optimisation inlines and renames most of the functions the release build keeps, so the
/// `production` profile has an order of its own, `build/hot-functions-production.txt`; every
/// other profile reads `build/hot-functions.txt`.
pub fn order_file(out_dir: &std::path::Path) -> &'static str {
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

/// The first release of Rust that links `x86_64-unknown-linux-gnu` with lld by default.
const LLD_BY_DEFAULT: (u32, u32) = (1, 90);

/// The arguments to add to the daemon's link: none unless the link is lld's as rustc makes it.
pub fn link_args(build: &Build<'_>) -> Vec<String> {
    let default_lld = build.target == "x86_64-unknown-linux-gnu"
        && build
            .rustc_version
            .and_then(release)
            .is_some_and(|version| version >= LLD_BY_DEFAULT);
    // A flag that chooses the linker or its kind (`-C linker=`, `-C linker-flavor=`,
    // `-C linker-features=`, `-C link-self-contained=`, `-C link-arg=-fuse-ld=…`) may leave a
    // linker that refuses the option.
    let linker_flags = build.rustflags.split('\x1f').any(|flag| {
        flag.contains("linker") || flag.contains("link-self-contained") || flag.contains("fuse-ld")
    });
    // The C compiler driver splits `-Wl,` arguments at commas.
    let usable_path = !build.order_file.contains(',');
    if build.switch == Some("off")
        || !default_lld
        || build.linker_configured
        || linker_flags
        || !usable_path
    {
        return Vec::new();
    }
    vec![
        format!("-Wl,--symbol-ordering-file={}", build.order_file),
        // A listed function this build does not define (inlined, renamed, another profile's
        // symbol) is skipped without a word.
        "-Wl,--no-warn-symbol-ordering".to_owned(),
    ]
}

/// The major and minor release from `rustc -vV`'s `release: 1.95.0` line.
fn release(verbose_version: &str) -> Option<(u32, u32)> {
    let line = verbose_version
        .lines()
        .find_map(|line| line.strip_prefix("release: "))?;
    let mut parts = line.trim().split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}
