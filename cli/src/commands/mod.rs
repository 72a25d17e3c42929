//! One module a command, each of one shape: its arguments (`Args`, which clap reads) and `exec`, which runs it and
//! returns the exit code.

pub mod audit;
pub mod create_table;
pub mod get;
pub mod read;
pub mod resume;
pub mod status;
pub mod submit;
pub mod sweep;
