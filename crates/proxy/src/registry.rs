//! The registration of metrics, shared by the proxy's own metrics and the
//! pool's: in a module of its own, which imports neither.

/// Register metrics with `$registry`, one row a metric: the field of
/// `$metrics`, the name and the help, in the order `/metrics` lists them. A
/// macro rather than a loop because the fields differ in type.
macro_rules! register {
    ($registry:expr, $metrics:expr; $($field:ident, $name:literal, $help:literal;)+) => {
        $($registry.register($name, $help, $metrics.$field.clone());)+
    };
}
pub(super) use register;
