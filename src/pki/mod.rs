//! Certificates minted by the controller: the node proxy's serving
//! certificate is a dedicated ECDSA P-256 leaf signed by the cluster CA
//! (`<cluster>-ca`), never a copy of the API server's key.
//!
//! Pure functions: the clock is an argument, so tests pin it and the
//! controller passes `SystemTime::now()`. Errors describe what is wrong with
//! the material and never include it.

mod ca;
mod der;
mod renewal;

pub use ca::*;
pub use renewal::{RenewReason, Renewal, renewal_due};
