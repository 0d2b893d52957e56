//! The site (wasm, JS, CSS) is compiled into the binary from `dist/site`, which
//! `scripts/build.sh` fills before building the server. Without it the server
//! still builds, but pages will not hydrate: say so loudly.
fn main() {
    println!("cargo:rerun-if-changed=dist/site");
    let wasm = std::path::Path::new("dist/site/pkg/gatehouse.wasm");
    if !wasm.exists() {
        std::fs::create_dir_all("dist/site/pkg").expect("create dist/site/pkg");
        println!("cargo:warning=dist/site has no built front end; run scripts/build.sh so pages hydrate");
    }
}
