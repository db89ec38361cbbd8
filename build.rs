//! Build script: links the daemon's hot functions next to each other (build/link_order.rs says
//! when and why; build/hot-functions.txt is the order, build/hot-functions-production.txt the
//! production profile's).

use std::env;
use std::path::Path;
use std::process::Command;

#[path = "build/link_order.rs"]
mod link_order;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build/link_order.rs");
    println!("cargo:rerun-if-env-changed=HOOKONCE_FUNCTION_ORDER");
    let manifest_dir = env::var("CARGO_MANIFEST_DIR").expect("Cargo sets CARGO_MANIFEST_DIR");
    let out_dir = env::var("OUT_DIR").expect("Cargo sets OUT_DIR");
    let order = link_order::order_file(Path::new(&out_dir));
    let order_file = Path::new(&manifest_dir).join(order);
    if !order_file.exists() {
        // Nothing to order by (a checkout without the file): the linker's own order, until a
        // file appears in build/.
        println!("cargo:rerun-if-changed=build");
        return;
    }
    println!("cargo:rerun-if-changed={order}");
    let target = env::var("TARGET").unwrap_or_default();
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let rustc_version = Command::new(rustc)
        .arg("-vV")
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).into_owned());
    let rustflags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let switch = env::var("HOOKONCE_FUNCTION_ORDER").ok();
    let build = link_order::Build {
        target: &target,
        rustc_version: rustc_version.as_deref(),
        linker_configured: env::var_os("RUSTC_LINKER").is_some(),
        rustflags: &rustflags,
        switch: switch.as_deref(),
        order_file: &order_file.to_string_lossy(),
    };
    for arg in link_order::link_args(&build) {
        println!("cargo:rustc-link-arg-bin=hookonce={arg}");
    }
}
