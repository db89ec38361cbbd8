//! Build script: links the daemon's hot functions next to each other (build/link_order.rs says
//! when and why; build/hot-functions.txt is the order, build/hot-functions-production.txt the
//! production profile's).

use std::env;
use std::path::Path;

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
    let var = |name: &str| env::var(name).unwrap_or_default();
    let (rustc, target, rustflags) = (var("RUSTC"), var("TARGET"), var("CARGO_ENCODED_RUSTFLAGS"));
    let linker = env::var("RUSTC_LINKER").ok();
    let link = link_order::Link {
        rustc: if rustc.is_empty() { "rustc" } else { &rustc },
        target: &target,
        linker: linker.as_deref(),
        rustflags: &rustflags,
        scratch: Path::new(&out_dir),
    };
    let switch = env::var("HOOKONCE_FUNCTION_ORDER").ok();
    for arg in link_order::link_args(switch.as_deref(), &order_file.to_string_lossy(), &link) {
        println!("cargo:rustc-link-arg-bin=hookonce={arg}");
    }
}
