//! The `gatehouse` command.

use clap::Parser;

// glibc's malloc showed in the request path's profile (arena locks, consolidation).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = gatehouse::cli::Cli::parse();
    match gatehouse::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gatehouse: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
