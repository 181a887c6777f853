//! TLS record layer: what one side seals the other opens, corrupted records
//! never open, and arbitrary peer bytes are refused without panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hcp_ingress::proxy::fuzz_checks::records(data);
});
