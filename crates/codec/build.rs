//! Links the system ZFP library (Debian: `apt-get install libzfp-dev`, done by scripts/setup.sh).
//!
//! Debian ships no pkg-config file for zfp, so this looks for `libzfp.so` itself:
//! `ZFP_LIB_DIR` if set, else the usual library directories. When it is not found the build
//! still goes on (so `cargo check`/`clippy` work without it) and warns; linking then fails with
//! "unable to find library -lzfp", which the warning explains.

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-env-changed=ZFP_LIB_DIR");
    let mut dirs: Vec<String> = Vec::new();
    if let Ok(dir) = std::env::var("ZFP_LIB_DIR") {
        dirs.push(dir);
    }
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    dirs.extend([
        format!("/usr/lib/{arch}-{os}-gnu"),
        "/usr/lib64".to_string(),
        "/usr/lib".to_string(),
        "/usr/local/lib".to_string(),
        "/usr/local/lib64".to_string(),
    ]);
    let found = dirs.iter().find(|d| {
        ["libzfp.so", "libzfp.a", "libzfp.dylib"]
            .iter()
            .any(|f| Path::new(d).join(f).exists())
    });
    match found {
        Some(dir) => println!("cargo:rustc-link-search=native={dir}"),
        None => println!(
            "cargo:warning=libzfp not found (looked in ZFP_LIB_DIR and {}); install it with \
             `apt-get install libzfp-dev` (scripts/setup.sh does) or set ZFP_LIB_DIR",
            dirs.join(", ")
        ),
    }
    println!("cargo:rustc-link-lib=zfp");
}
