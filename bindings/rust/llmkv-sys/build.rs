//! Links libllmkv.
//!
//! `LLMKV_LIB_DIR` names the directory holding `libllmkv.so` (a CMake build folder or an
//! install's lib directory). It is added to the link search path and, for this crate's own
//! tests, to the run-time search path (rpath). Dependent crates receive it as
//! `DEP_LLMKV_LIB_DIR` (the `links = "llmkv"` key) and can add the rpath to their own
//! binaries; the `llmkv` crate does so for its tests and examples. Without `LLMKV_LIB_DIR`
//! the system's linker paths are used (an installed libllmkv).
use std::env;
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-env-changed=LLMKV_LIB_DIR");
    println!("cargo:rerun-if-changed=build.rs");
    if let Ok(dir) = env::var("LLMKV_LIB_DIR") {
        if !dir.is_empty() {
            let p = Path::new(&dir);
            if !p.join("libllmkv.so").exists() && !p.join("libllmkv.dylib").exists() {
                println!("cargo:warning=LLMKV_LIB_DIR={dir} holds no libllmkv.so");
            }
            println!("cargo:rustc-link-search=native={dir}");
            println!("cargo:rustc-link-arg-tests=-Wl,-rpath,{dir}");
            println!("cargo:lib_dir={dir}");
        }
    }
    println!("cargo:rustc-link-lib=dylib=llmkv");
}
