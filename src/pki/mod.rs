//! TODO-free placeholder
