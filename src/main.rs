//! The `gatehouse` command.

use clap::Parser;

// glibc's malloc showed in the request path's profile (arena locks, consolidation).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // A freed password hash's memory goes back to the OS at once; mimalloc
    // would keep it committed (≈ 75 MiB after 188 sign-ins, BENCHMARKS.md).
    gatehouse_core::users::after_each_hash(|| {
        // SAFETY: mi_collect only walks the calling thread's heap and the
        // arenas; it has no preconditions.
        unsafe { libmimalloc_sys::mi_collect(true) }
    });
    let cli = gatehouse::cli::Cli::parse();
    match gatehouse::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gatehouse: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
