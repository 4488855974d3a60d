//! The `autoscalectl` binary: parses the command line and hands over to the library.
use std::process::ExitCode;

fn main() -> ExitCode {
    match autoscaled_ctl::cli::parse() {
        Ok(cli) => autoscaled_ctl::cli::run(cli),
        Err(code) => code,
    }
}
