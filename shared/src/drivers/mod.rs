//! The drivers: what runs the protocol's steps for a caller. In process ([`coordinator`], and [`driver`]'s step
//! dispatcher and wound-wait, which every driver shares), the phase Lambdas' contract with the state machine
//! (`lambda`), the staging API and its callers' entitlements, starting an execution ([`start`]), the sweeper, the
//! audit, reads while transactions run ([`read`]), snapshot reads of any number of items ([`snapshot`]) and a
//! transaction's status ([`status`]).
//!
//! May use: the crate root, model, dynamo, protocol.

pub mod audit;
pub mod coordinator;
pub mod driver;
pub mod read;
pub mod snapshot;
pub mod start;
pub mod status;

// The Lambda functions' and the CLI's own drivers: nothing else in the library uses them.
#[cfg(feature = "internals")]
pub mod entitlements;
#[cfg(feature = "internals")]
pub mod lambda;
#[cfg(feature = "internals")]
pub mod staging;
#[cfg(feature = "internals")]
pub mod sweeper;
