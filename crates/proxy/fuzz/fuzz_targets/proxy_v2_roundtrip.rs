//! PROXY v2 writer: structured input → header → strict decode → same values.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hcp_ingress_proxy::fuzz_checks::proxy_v2_bytes(data);
});
