//! The `autoscaled` binary: parses the command line and hands over to the library.
use std::process::ExitCode;

/// mimalloc instead of glibc's malloc: a Recommend allocates and frees a few hundred small
/// blocks (decoded request, conversion, records), and glibc spent about a fifth of the
/// server's CPU in `malloc`/`free`/`malloc_consolidate` on the fleet benchmark. The load and
/// fleet benchmarks give their no-op server the same allocator, so the comparison stays fair.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    match autoscaled::cli::parse() {
        Ok(cli) => autoscaled::cli::run(cli),
        Err(code) => code,
    }
}
