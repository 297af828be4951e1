//! The `sandbench` command line.

use std::process::ExitCode;

fn main() -> ExitCode {
    sandbench::cli::main()
}
