//! PROXY protocol v2 header writer (and a parser, for tests and tools).
//!
//! The authority TLV (`PP2_TYPE_AUTHORITY`) carries the API host name, so an
//! ingress that routes on it (HAProxy `fc_pp_authority`) needs no SNI.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// The 12-byte v2 signature.
pub const SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
const VERSION_PROXY: u8 = 0x21;
const VERSION_LOCAL: u8 = 0x20;
const TCP4: u8 = 0x11;
const TCP6: u8 = 0x21;
/// TLV type of the authority (host name).
pub const PP2_TYPE_AUTHORITY: u8 = 0x02;

/// Errors of the parser.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProxyProtocolError {
    /// Bytes do not start with a v2 header.
    #[error("failed to parse PROXY v2 header: {0}")]
    Invalid(&'static str),
}

fn v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

/// Write a PROXY v2 `PROXY` header for a TCP connection from `src` to `dst`
/// with an authority TLV. Mixed families are sent as IPv6 (v4-mapped). The
/// authority is cut to at most 255 bytes, at a character boundary.
pub fn header(src: SocketAddr, dst: SocketAddr, authority: &str) -> Vec<u8> {
    // A cut inside a multi-byte character would send a TLV that is not UTF-8.
    let mut cut = authority.len().min(255);
    while !authority.is_char_boundary(cut) {
        cut -= 1;
    }
    let authority = &authority.as_bytes()[..cut];
    let tlv_len = 3 + authority.len();
    let mut out = Vec::with_capacity(16 + 36 + tlv_len);
    out.extend_from_slice(&SIGNATURE);
    out.push(VERSION_PROXY);
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out.push(TCP4);
            out.extend_from_slice(&((12 + tlv_len) as u16).to_be_bytes());
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
        }
        (s, d) => {
            out.push(TCP6);
            out.extend_from_slice(&((36 + tlv_len) as u16).to_be_bytes());
            out.extend_from_slice(&v6(s).octets());
            out.extend_from_slice(&v6(d).octets());
        }
    }
    out.extend_from_slice(&src.port().to_be_bytes());
    out.extend_from_slice(&dst.port().to_be_bytes());
    out.push(PP2_TYPE_AUTHORITY);
    out.extend_from_slice(&(authority.len() as u16).to_be_bytes());
    out.extend_from_slice(authority);
    out
}

/// A parsed v2 header.
#[derive(Debug, PartialEq, Eq)]
pub struct Header {
    /// `false` for a LOCAL command.
    pub proxied: bool,
    /// Source and destination (absent for LOCAL/UNSPEC).
    pub addresses: Option<(SocketAddr, SocketAddr)>,
    /// Authority TLV value.
    pub authority: Option<String>,
    /// Total header length in bytes.
    pub len: usize,
}

/// Parse a v2 header at the start of `b`.
pub fn parse(b: &[u8]) -> Result<Header, ProxyProtocolError> {
    let e = ProxyProtocolError::Invalid;
    if b.len() < 16 || b[..12] != SIGNATURE {
        return Err(e("no signature"));
    }
    let proxied = match b[12] {
        VERSION_PROXY => true,
        VERSION_LOCAL => false,
        _ => return Err(e("bad version/command")),
    };
    let len = usize::from(u16::from_be_bytes([b[14], b[15]]));
    let body = b.get(16..16 + len).ok_or(e("truncated"))?;
    let (addresses, mut tlvs) = match b[13] {
        TCP4 if body.len() >= 12 => {
            let ip = |o: usize| IpAddr::from([body[o], body[o + 1], body[o + 2], body[o + 3]]);
            let port = |o: usize| u16::from_be_bytes([body[o], body[o + 1]]);
            (
                Some((
                    SocketAddr::new(ip(0), port(8)),
                    SocketAddr::new(ip(4), port(10)),
                )),
                &body[12..],
            )
        }
        TCP6 if body.len() >= 36 => {
            let ip = |o: usize| {
                let mut a = [0u8; 16];
                a.copy_from_slice(&body[o..o + 16]);
                IpAddr::from(a)
            };
            let port = |o: usize| u16::from_be_bytes([body[o], body[o + 1]]);
            (
                Some((
                    SocketAddr::new(ip(0), port(32)),
                    SocketAddr::new(ip(16), port(34)),
                )),
                &body[36..],
            )
        }
        0x00 => (None, body),
        _ => return Err(e("unsupported family")),
    };
    let mut authority = None;
    while !tlvs.is_empty() {
        if tlvs.len() < 3 {
            return Err(e("truncated tlv"));
        }
        let n = usize::from(u16::from_be_bytes([tlvs[1], tlvs[2]]));
        let v = tlvs.get(3..3 + n).ok_or(e("truncated tlv"))?;
        if tlvs[0] == PP2_TYPE_AUTHORITY {
            authority =
                Some(String::from_utf8(v.to_vec()).map_err(|_| e("authority is not utf-8"))?);
        }
        tlvs = &tlvs[3 + n..];
    }
    Ok(Header {
        proxied,
        addresses,
        authority,
        len: 16 + len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_v4() {
        let src: SocketAddr = "10.244.0.2:40000".parse().unwrap();
        let dst: SocketAddr = "240.0.0.1:443".parse().unwrap();
        let mut h = header(src, dst, "api.tenant-01.example.com");
        assert_eq!(h[13], TCP4);
        h.extend_from_slice(b"\x16\x03\x01rest");
        let p = parse(&h).unwrap();
        assert!(p.proxied);
        assert_eq!(p.addresses, Some((src, dst)));
        assert_eq!(p.authority.as_deref(), Some("api.tenant-01.example.com"));
        assert_eq!(&h[p.len..], b"\x16\x03\x01rest");
    }

    #[test]
    fn round_trip_v6_and_mixed() {
        let src: SocketAddr = "[fd00::2]:1234".parse().unwrap();
        let dst: SocketAddr = "[fd00::1]:443".parse().unwrap();
        let p = parse(&header(src, dst, "a")).unwrap();
        assert_eq!(p.addresses, Some((src, dst)));
        let v4: SocketAddr = "10.0.0.1:5".parse().unwrap();
        let h = header(v4, dst, "a");
        assert_eq!(h[13], TCP6);
        let (s, _) = parse(&h).unwrap().addresses.unwrap();
        assert_eq!(s.ip(), IpAddr::V6("::ffff:10.0.0.1".parse().unwrap()));
    }

    #[test]
    fn long_authority_is_cut_at_a_character_boundary() {
        // A 2-byte character across byte 255 used to be split in half.
        let a: SocketAddr = "1.2.3.4:1".parse().unwrap();
        for pad in 250..256 {
            let authority = format!("{}é.example", "a".repeat(pad));
            let p = parse(&header(a, a, &authority)).unwrap();
            let got = p.authority.unwrap();
            assert!(got.len() <= 255 && authority.starts_with(&got), "{pad}");
            assert!(got.len() >= 254, "cut more than one character: {pad}");
        }
    }

    #[test]
    fn parser_rejects_truncation() {
        let h = header(
            "1.2.3.4:1".parse().unwrap(),
            "5.6.7.8:2".parse().unwrap(),
            "host",
        );
        for n in 0..h.len() {
            assert!(parse(&h[..n]).is_err());
        }
    }
}
