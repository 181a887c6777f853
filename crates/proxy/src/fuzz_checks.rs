//! The invariants the fuzz targets in `fuzz/` assert, in one place: the
//! targets call these functions and so does the corpus replay test below,
//! so CI (stable, no cargo-fuzz) checks every committed seed the same way.
//! Every function panics when an invariant does not hold; that is the point.
//!
//! Compiled for tests and with the `fuzzing` feature only.

use std::net::{IpAddr, SocketAddr};

use super::{clienthello, config, proxy_protocol};

/// The `max` values a ClientHello is parsed with: the bounds of
/// `limits.maxClientHelloBytes`, the default, and one that splits records.
const HELLO_MAX: [usize; 4] = [512, 1024, 16 * 1024, 64 * 1024];

/// Fuzz target `client_hello`. Layout: byte 0 picks `max`, byte 1 seeds the
/// chunk sizes, the rest is what a client sent.
///
/// Invariants: no panic; the proxy re-parses the growing buffer after every
/// read, so every prefix answers `Incomplete` or exactly what the first
/// decided prefix answered, and the whole input answers the same; a larger
/// `max` never turns a parsed hello into something else; a returned SNI is
/// a non-empty lowercase DNS-ish name without a trailing dot; ALPN entries
/// are non-empty and at most 255 bytes.
pub fn client_hello(data: &[u8]) {
    let (max, seed, wire) = match data {
        [a, b, rest @ ..] => (HELLO_MAX[usize::from(*a) % HELLO_MAX.len()], *b, rest),
        _ => (16 * 1024, 0, &[][..]),
    };
    let whole = clienthello::parse(wire, max);

    // Grow a prefix in pseudo-random steps (1..=64 bytes), like reads do.
    let mut state = u32::from(seed) | 0x100;
    let mut first_decided = None;
    let mut end = 0;
    while end < wire.len() {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        end = (end + 1 + (state % 64) as usize).min(wire.len());
        let got = clienthello::parse(&wire[..end], max);
        match (&first_decided, got) {
            (None, Ok(clienthello::Parsed::Incomplete)) => {}
            (None, decided) => first_decided = Some(decided),
            (Some(first), later) => assert_eq!(
                first,
                &later,
                "prefix {end} of {} answers differently from a shorter prefix",
                wire.len()
            ),
        }
    }
    if let Some(first) = first_decided {
        assert_eq!(first, whole, "a prefix and the whole input disagree");
    }

    if let Ok(clienthello::Parsed::Done(h)) = &whole {
        assert_eq!(
            clienthello::parse(wire, 1 << 20),
            whole,
            "a larger max changed the answer"
        );
        if let Some(sni) = &h.sni {
            assert!(
                !sni.is_empty() && sni.len() <= 255,
                "bad SNI length: {sni:?}"
            );
            assert!(
                sni.bytes().all(|b| b.is_ascii_lowercase()
                    || b.is_ascii_digit()
                    || matches!(b, b'-' | b'.' | b'_')),
                "SNI is not a lowercase DNS name: {sni:?}"
            );
            assert!(!sni.ends_with('.'), "SNI keeps a trailing dot: {sni:?}");
        }
        for p in &h.alpn {
            assert!(!p.is_empty() && p.len() <= 255, "bad ALPN entry {p:?}");
        }
    }
}

/// Input of the `proxy_v2_roundtrip` target.
#[derive(Debug, arbitrary::Arbitrary)]
pub struct V2Input {
    /// Client address.
    pub src: (IpAddr, u16),
    /// Local (destination) address.
    pub dst: (IpAddr, u16),
    /// Authority TLV value (any string; the writer bounds it).
    pub authority: String,
    /// Bytes after the header (the client's first bytes).
    pub trailing: Vec<u8>,
}

/// Fuzz target `proxy_v2_roundtrip` on raw bytes (what the corpus holds).
pub fn proxy_v2_bytes(data: &[u8]) {
    let u = arbitrary::Unstructured::new(data);
    if let Ok(input) = <V2Input as arbitrary::Arbitrary>::arbitrary_take_rest(u) {
        proxy_v2_roundtrip(&input);
    }
    // The tolerant parser must not panic on the bytes as a header either.
    let _ = proxy_protocol::parse(data);
}

/// A PROXY v2 header decoded strictly per the spec (section 2.2), written
/// independently of [`proxy_protocol`] so the writer is checked against the
/// spec rather than against itself.
#[derive(Debug, PartialEq, Eq)]
pub struct DecodedV2 {
    /// Address family and transport byte (0x11 TCP over IPv4, 0x21 TCP over IPv6).
    pub fam: u8,
    /// Source address.
    pub src: SocketAddr,
    /// Destination address.
    pub dst: SocketAddr,
    /// TLVs in order: (type, value).
    pub tlvs: Vec<(u8, Vec<u8>)>,
    /// Header length: 16 + the length field.
    pub len: usize,
}

/// Decode a `PROXY` command header for TCP at the start of `b`, strictly:
/// signature, version 2 with command PROXY (0x21), TCP4/TCP6 only, a length
/// that covers the addresses, and TLVs that fill the rest exactly.
pub fn decode_v2(b: &[u8]) -> Result<DecodedV2, &'static str> {
    let sig = b.get(..12).ok_or("short signature")?;
    if sig != b"\r\n\r\n\0\r\nQUIT\n" {
        return Err("bad signature");
    }
    let fixed = b.get(12..16).ok_or("short fixed header")?;
    if fixed[0] != 0x21 {
        return Err("not version 2 / PROXY");
    }
    let fam = fixed[1];
    let len = usize::from(u16::from_be_bytes([fixed[2], fixed[3]]));
    let body = b.get(16..16 + len).ok_or("length past the end")?;
    let alen = match fam {
        0x11 => 12,
        0x21 => 36,
        _ => return Err("not TCP4 or TCP6"),
    };
    if body.len() < alen {
        return Err("length shorter than the addresses");
    }
    let ip = |a: &[u8]| -> IpAddr {
        match a.len() {
            4 => IpAddr::from(<[u8; 4]>::try_from(a).unwrap_or_default()),
            _ => IpAddr::from(<[u8; 16]>::try_from(a).unwrap_or_default()),
        }
    };
    let n = (alen - 4) / 2;
    let port = |o: usize| u16::from_be_bytes([body[o], body[o + 1]]);
    let src = SocketAddr::new(ip(&body[..n]), port(2 * n));
    let dst = SocketAddr::new(ip(&body[n..2 * n]), port(2 * n + 2));
    let mut rest = &body[alen..];
    let mut tlvs = Vec::new();
    while !rest.is_empty() {
        let [t, h, l, ..] = *rest else {
            return Err("short tlv header");
        };
        let vlen = usize::from(u16::from_be_bytes([h, l]));
        let v = rest.get(3..3 + vlen).ok_or("tlv past the length")?;
        tlvs.push((t, v.to_vec()));
        rest = &rest[3 + vlen..];
    }
    Ok(DecodedV2 {
        fam,
        src,
        dst,
        tlvs,
        len: 16 + len,
    })
}

/// Round trip: write a header, decode it strictly and with
/// [`proxy_protocol::parse`]; addresses, ports, authority and lengths must
/// come back as given (IPv4 as v4-mapped IPv6 when the families differ).
pub fn proxy_v2_roundtrip(input: &V2Input) {
    let src = SocketAddr::new(input.src.0, input.src.1);
    let dst = SocketAddr::new(input.dst.0, input.dst.1);
    let out = proxy_protocol::header(src, dst, &input.authority);

    let d = decode_v2(&out).unwrap_or_else(|e| panic!("strict decode failed: {e}: {out:?}"));
    assert_eq!(
        d.len,
        out.len(),
        "length field does not cover the header exactly"
    );
    let both_v4 = src.is_ipv4() && dst.is_ipv4();
    let (want_src, want_dst) = if both_v4 {
        (src, dst)
    } else {
        let mapped = |a: SocketAddr| match a.ip() {
            IpAddr::V4(v4) => SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), a.port()),
            IpAddr::V6(_) => a,
        };
        (mapped(src), mapped(dst))
    };
    assert_eq!(d.fam, if both_v4 { 0x11 } else { 0x21 });
    assert_eq!((d.src, d.dst), (want_src, want_dst));

    // The authority is cut to 255 bytes, at a character boundary.
    let mut cut = input.authority.len().min(255);
    while !input.authority.is_char_boundary(cut) {
        cut -= 1;
    }
    let want_authority = &input.authority[..cut];
    assert_eq!(
        d.tlvs,
        vec![(
            proxy_protocol::PP2_TYPE_AUTHORITY,
            want_authority.as_bytes().to_vec()
        )]
    );

    // The crate's own parser agrees, and stops where the header stops.
    let mut stream = out.clone();
    stream.extend_from_slice(&input.trailing);
    let p = proxy_protocol::parse(&stream).unwrap_or_else(|e| panic!("parse failed: {e}"));
    assert!(p.proxied);
    assert_eq!(p.addresses, Some((want_src, want_dst)));
    assert_eq!(p.authority.as_deref(), Some(want_authority));
    assert_eq!(p.len, out.len());
    assert_eq!(&stream[p.len..], &input.trailing[..]);
}

/// Fuzz target `proxy_config`: YAML text → parse → validate.
///
/// Invariants: no panic; errors name a key; an accepted config has every
/// value in its documented range, normalised names, TLS in reencrypt mode,
/// and its printed form (`--check-config`) validates back to itself.
pub fn proxy_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let raw = match config::parse(text) {
        Ok(raw) => raw,
        Err(e) => {
            assert!(matches!(e, config::ConfigError::Parse(_)), "{e:?}");
            return;
        }
    };
    let c = match config::validate(raw) {
        Ok(c) => c,
        Err(config::ConfigError::Invalid { key, message }) => {
            assert!(!key.is_empty() && !message.is_empty());
            return;
        }
        Err(e) => panic!("validate returned a non-key error: {e:?}"),
    };
    assert_ne!(c.listen.addr.port(), 0);
    assert_ne!(c.upstream.port, 0);
    assert!((1..=65535).contains(&c.listen.backlog));
    assert!(!c.listen.interface.is_empty() && c.listen.interface.len() <= 15);
    assert!((1..=1_000_000).contains(&c.max_connections));
    assert!((512..=64 * 1024).contains(&c.max_client_hello_bytes));
    assert!((1..=64).contains(&c.worker_threads));
    let t = &c.timeouts;
    for d in [
        c.listen.ensure_interval,
        c.upstream.health_interval,
        c.upstream.health_timeout,
        c.upstream.dns_min_ttl,
        c.upstream.dns_max_ttl,
        t.handshake,
        t.connect,
        t.idle,
        t.drain,
        t.tcp_keepalive,
        c.reload_interval,
    ] {
        assert!(!d.is_zero());
    }
    assert!(c.upstream.dns_min_ttl <= c.upstream.dns_max_ttl);
    let normal = |n: &str| !n.is_empty() && n == config::normalize_name(n);
    assert!(normal(&c.upstream.server_name) && !c.upstream.server_name.contains('*'));
    assert!(c.passthrough_server_names.iter().all(|n| normal(n)));
    if c.mode.terminates_tls() {
        assert!(c.tls.is_some());
    }
    let printed = c.to_string();
    let again = config::parse(&printed)
        .and_then(config::validate)
        .unwrap_or_else(|e| panic!("printed config does not validate: {e}\n{printed}"));
    assert_eq!(
        again, c,
        "printed config changed on the way back:\n{printed}"
    );
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Replay every committed seed of `fuzz/corpus/<target>/`; a target
    /// without seeds fails, so the corpus cannot silently disappear.
    fn replay(target: &str, check: fn(&[u8])) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/corpus")
            .join(target);
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            let r = std::panic::catch_unwind(|| check(&data));
            assert!(r.is_ok(), "seed {} violates an invariant", path.display());
            n += 1;
        }
        assert!(n > 0, "no seeds in {}", dir.display());
    }

    #[test]
    fn corpus_client_hello() {
        replay("client_hello", super::client_hello);
    }

    #[test]
    fn corpus_proxy_v2_roundtrip() {
        replay("proxy_v2_roundtrip", super::proxy_v2_bytes);
    }

    #[test]
    fn corpus_proxy_config() {
        replay("proxy_config", super::proxy_config);
    }

    #[test]
    fn strict_decoder_rejects_what_the_spec_forbids() {
        let h = super::proxy_protocol::header(
            "1.2.3.4:1".parse().unwrap(),
            "5.6.7.8:2".parse().unwrap(),
            "a",
        );
        assert!(super::decode_v2(&h).is_ok());
        for n in 0..h.len() {
            assert!(super::decode_v2(&h[..n]).is_err(), "prefix {n}");
        }
        let mut local = h.clone();
        local[12] = 0x20;
        assert_eq!(super::decode_v2(&local), Err("not version 2 / PROXY"));
        let mut udp = h.clone();
        udp[13] = 0x12;
        assert_eq!(super::decode_v2(&udp), Err("not TCP4 or TCP6"));
        let mut short_tlv = h.clone();
        short_tlv[15] -= 1;
        assert_eq!(super::decode_v2(&short_tlv), Err("tlv past the length"));
    }
}
