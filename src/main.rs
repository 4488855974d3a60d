//! The `autoscaled` binary: parses the command line and hands over to the library.
use std::process::ExitCode;

fn main() -> ExitCode {
    match autoscaled::cli::parse() {
        Ok(cli) => autoscaled::cli::run(cli),
        Err(code) => code,
    }
}
