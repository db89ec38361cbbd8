//! The build script's function order (build/link_order.rs): given to the link when a trial link
//! with this machine's rustc takes it, never when the linker would refuse it (GNU ld: the build
//! would fail), and the order files it names hold symbols the linker can read.

#[path = "../../build/link_order.rs"]
mod rules;

use std::path::Path;
use std::process::Command;

use rules::{link_args, order_file, Link};

const ORDER: &str = "build/hot-functions.txt";

/// This machine's rustc (Cargo's, when it set `RUSTC`) and its host target.
fn rustc() -> (String, String) {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let verbose = Command::new(&rustc).arg("-vV").output().expect("rustc -vV");
    let verbose = String::from_utf8(verbose.stdout).expect("UTF-8");
    let host = verbose
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .expect("a host line")
        .to_owned();
    (rustc, host)
}

/// The arguments the build script would give for `rustflags` on this machine.
fn args_for(switch: Option<&str>, order: &str, rustflags: &str) -> Vec<String> {
    let (rustc, host) = rustc();
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let link = Link {
        rustc: &rustc,
        target: &host,
        linker: None,
        rustflags,
        scratch: scratch.path(),
    };
    link_args(switch, order, &link)
}

fn order_path(file: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(file)
        .to_string_lossy()
        .into_owned()
}

/// The project's toolchain (Rust 1.90 or later on x86-64 Linux) links with its own lld, which
/// takes the order; flags that leave the linker alone keep it.
#[test]
fn rustc_own_lld_gets_the_order() {
    let (_, host) = rustc();
    if host != "x86_64-unknown-linux-gnu" {
        // Elsewhere the default linker is the system's: the refusals below still hold.
        return;
    }
    let order = order_path(ORDER);
    let expected = [
        format!("-Wl,--symbol-ordering-file={order}"),
        "-Wl,--no-warn-symbol-ordering".to_owned(),
    ];
    assert_eq!(args_for(None, &order, ""), expected);
    assert_eq!(
        args_for(
            None,
            &order,
            "-Cforce-frame-pointers=yes\x1f--cfg\x1fhookonce_probe"
        ),
        expected
    );
}

/// GNU ld refuses `--symbol-ordering-file`: a build linked with it gets nothing, and builds.
#[test]
fn a_linker_that_refuses_the_order_gets_nothing() {
    let order = order_path(ORDER);
    for rustflags in ["-Clink-arg=-fuse-ld=bfd", "-Clinker-features=-lld"] {
        assert_eq!(
            args_for(None, &order, rustflags),
            Vec::<String>::new(),
            "{rustflags}"
        );
    }
    // An order file the linker cannot open fails the trial link too.
    assert_eq!(
        args_for(None, &order_path("build/no-such-order.txt"), ""),
        Vec::<String>::new()
    );
}

#[test]
fn switched_off_or_unusable_gets_nothing() {
    assert_eq!(
        args_for(Some("off"), &order_path(ORDER), ""),
        Vec::<String>::new()
    );
    // The C compiler driver would split the path at the comma.
    assert_eq!(
        args_for(None, "/home/a,b/hookonce/build/hot-functions.txt", ""),
        Vec::<String>::new()
    );
}

#[test]
fn the_production_profile_has_its_own_order() {
    let cases = [
        (
            "/src/target/production/build/hookonce-0123abcd/out",
            "build/hot-functions-production.txt",
        ),
        (
            "/src/target/x86_64-unknown-linux-gnu/production/build/hookonce-0123abcd/out",
            "build/hot-functions-production.txt",
        ),
        ("/src/target/release/build/hookonce-0123abcd/out", ORDER),
        ("/src/target/debug/build/hookonce-0123abcd/out", ORDER),
        // A directory named production further up is not the profile.
        (
            "/production/target/release/build/hookonce-0123abcd/out",
            ORDER,
        ),
        ("out", ORDER),
    ];
    for (out_dir, expected) in cases {
        assert_eq!(order_file(Path::new(out_dir)), expected, "{out_dir}");
    }
}

/// lld reads one symbol a line and skips lines that begin with `#`; a symbol holds no blank.
#[test]
fn the_order_files_are_one_symbol_a_line() {
    for file in [ORDER, "build/hot-functions-production.txt"] {
        order_file_is_one_symbol_a_line(file);
    }
}

fn order_file_is_one_symbol_a_line(file: &str) {
    let text = std::fs::read_to_string(order_path(file)).expect(file);
    let symbols: Vec<&str> = text.lines().filter(|line| !line.starts_with('#')).collect();
    assert!(symbols.len() > 100, "{file}: {} symbols", symbols.len());
    for symbol in &symbols {
        assert!(
            !symbol.is_empty() && !symbol.contains(char::is_whitespace),
            "{file}: {symbol:?}"
        );
    }
    let distinct: std::collections::HashSet<_> = symbols.iter().collect();
    assert_eq!(
        distinct.len(),
        symbols.len(),
        "{file}: a symbol listed twice"
    );
    // The request path's own entry points are in it, under their linker names.
    for part in [
        "8httparse",
        "8hookonce7forward",
        "8hookonce8webhooks6ingest",
    ] {
        assert!(
            symbols.iter().any(|symbol| symbol.contains(part)),
            "{file}: {part}"
        );
    }
}
