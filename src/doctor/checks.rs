//! The decisions of `doctor`, pure: what was observed in, a verdict with the
//! fix out. Every function here takes what the I/O edge (`probe.rs`) read and
//! names the object and field to change when something is wrong.

mod management_side;
mod verdict;
mod workload_side;

pub use management_side::*;
pub use verdict::*;
pub use workload_side::*;

#[cfg(test)]
mod tests;
