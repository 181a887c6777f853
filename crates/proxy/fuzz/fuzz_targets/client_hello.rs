//! ClientHello/SNI parser: arbitrary bytes, whole and as growing prefixes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hcp_ingress_proxy::fuzz_checks::client_hello(data);
});
