//! The build script's function order (build/link_order.rs): given to the link exactly when rustc
//! links with its own lld, never when the build chose another linker, and the order file it
//! names holds symbols the linker can read.

#[path = "../../build/link_order.rs"]
mod rules;

use std::path::Path;

use rules::{link_args, order_file, Build};

const RUSTC_195: &str = "rustc 1.95.0 (59807616e 2026-04-14)\nbinary: rustc\nhost: \
                         x86_64-unknown-linux-gnu\nrelease: 1.95.0\nLLVM version: 22.1.2\n";

fn default_build() -> Build<'static> {
    Build {
        target: "x86_64-unknown-linux-gnu",
        rustc_version: Some(RUSTC_195),
        linker_configured: false,
        rustflags: "",
        switch: None,
        order_file: "/src/hookonce/build/hot-functions.txt",
    }
}

#[test]
fn rustc_own_lld_gets_the_order() {
    assert_eq!(
        link_args(&default_build()),
        [
            "-Wl,--symbol-ordering-file=/src/hookonce/build/hot-functions.txt",
            "-Wl,--no-warn-symbol-ordering"
        ]
    );
    for release in ["1.90.0", "1.96.0-nightly", "2.0.0"] {
        let version = format!("rustc {release}\nrelease: {release}\n");
        let build = Build {
            rustc_version: Some(&version),
            ..default_build()
        };
        assert_eq!(link_args(&build).len(), 2, "{release}");
    }
    // Flags that leave the linker alone.
    let build = Build {
        rustflags: "-Ctarget-cpu=native\x1f-Cforce-frame-pointers=yes",
        ..default_build()
    };
    assert_eq!(link_args(&build).len(), 2);
}

#[test]
fn any_other_linker_gets_nothing() {
    let older = "rustc 1.89.0\nrelease: 1.89.0\n";
    let cases = [
        Build {
            rustc_version: Some(older),
            ..default_build()
        },
        Build {
            rustc_version: None,
            ..default_build()
        },
        Build {
            rustc_version: Some("rustc 1.95.0\n"),
            ..default_build()
        },
        Build {
            target: "aarch64-unknown-linux-gnu",
            ..default_build()
        },
        Build {
            target: "x86_64-unknown-linux-musl",
            ..default_build()
        },
        Build {
            linker_configured: true,
            ..default_build()
        },
        Build {
            rustflags: "-Clinker=clang",
            ..default_build()
        },
        Build {
            rustflags: "-Copt-level=3\x1f-Clink-arg=-fuse-ld=bfd",
            ..default_build()
        },
        Build {
            rustflags: "-Clinker-features=-lld",
            ..default_build()
        },
        Build {
            rustflags: "-Clink-self-contained=-linker",
            ..default_build()
        },
        Build {
            switch: Some("off"),
            ..default_build()
        },
        Build {
            order_file: "/home/a,b/hookonce/build/hot-functions.txt",
            ..default_build()
        },
    ];
    for (i, build) in cases.iter().enumerate() {
        assert_eq!(link_args(build), Vec::<String>::new(), "case {i}");
    }
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
        (
            "/src/target/release/build/hookonce-0123abcd/out",
            "build/hot-functions.txt",
        ),
        (
            "/src/target/debug/build/hookonce-0123abcd/out",
            "build/hot-functions.txt",
        ),
        // A directory named production further up is not the profile.
        (
            "/production/target/release/build/hookonce-0123abcd/out",
            "build/hot-functions.txt",
        ),
        ("out", "build/hot-functions.txt"),
    ];
    for (out_dir, expected) in cases {
        assert_eq!(order_file(Path::new(out_dir)), expected, "{out_dir}");
    }
}

/// lld reads one symbol a line and skips lines that begin with `#`; a symbol holds no blank.
#[test]
fn the_order_files_are_one_symbol_a_line() {
    for file in [
        "build/hot-functions.txt",
        "build/hot-functions-production.txt",
    ] {
        order_file_is_one_symbol_a_line(file);
    }
}

fn order_file_is_one_symbol_a_line(file: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let text = std::fs::read_to_string(&path).expect(file);
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
