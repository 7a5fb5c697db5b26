//! Adds libllmkv's directory (LLMKV_LIB_DIR, passed on by llmkv-sys as DEP_LLMKV_LIB_DIR)
//! to the run-time search path of this crate's tests and examples, so they run without
//! LD_LIBRARY_PATH. A host's own binaries choose their own way to find the library.
fn main() {
    println!("cargo:rerun-if-env-changed=LLMKV_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_LLMKV_LIB_DIR") {
        println!("cargo:rustc-link-arg-tests=-Wl,-rpath,{dir}");
        println!("cargo:rustc-link-arg-examples=-Wl,-rpath,{dir}");
    }
}
