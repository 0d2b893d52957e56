//! The `gatehouse` command.

use clap::Parser;

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
