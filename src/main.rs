//! The `autoscaled` binary: parses the command line and hands over to the library.
fn main() {
    eprintln!("autoscaled: not yet wired");
    std::process::exit(64);
}
