//! Proxy config: bytes as YAML → parse → validate → invariants → print → same.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hcp_ingress_proxy::fuzz_checks::proxy_config(data);
});
