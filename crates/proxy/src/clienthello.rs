//! A small TLS ClientHello parser: just enough to route (SNI) and to carry
//! the client's ALPN offer upstream. It never panics and never allocates
//! more than the names it returns; every length is checked against what is
//! actually there.

/// What the proxy learns from a ClientHello.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientHello {
    /// `server_name` (host_name entry), lowercase, without a trailing dot.
    pub sni: Option<String>,
    /// ALPN protocol names offered, in the client's order.
    pub alpn: Vec<Vec<u8>>,
}

/// Why bytes are not a ClientHello we accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HelloError {
    /// Not a TLS handshake record (plain HTTP, SSLv2, garbage).
    #[error("failed to parse ClientHello: not a TLS handshake record")]
    NotTls,
    /// Structurally broken: a length points past its container, etc.
    #[error("failed to parse ClientHello: {0}")]
    Malformed(&'static str),
    /// The ClientHello is larger than the configured bound.
    #[error("failed to parse ClientHello: larger than the limit")]
    Oversized,
}

impl HelloError {
    /// Short reason for metric labels.
    pub fn reason(self) -> &'static str {
        match self {
            HelloError::NotTls => "not_tls",
            HelloError::Malformed(_) => "malformed",
            HelloError::Oversized => "oversized",
        }
    }
}

/// Result of looking at the bytes received so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// More bytes are needed.
    Incomplete,
    /// A complete ClientHello.
    Done(ClientHello),
}

const RECORD_HANDSHAKE: u8 = 22;
const HS_CLIENT_HELLO: u8 = 1;
const EXT_SERVER_NAME: u16 = 0;
const EXT_ALPN: u16 = 16;
const MAX_RECORD: usize = 16384 + 256;

/// A bounds-checked reader over a byte slice.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.buf.len() {
            return None;
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
    /// A vector with a 1- or 2-byte length prefix.
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.take(usize::from(n))
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }
    fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

/// Most bytes read for a ClientHello of at most `max` bytes: room for its
/// record headers when it comes fragmented. One record header per
/// 5 bytes of message or more fits; a hello cut into smaller records
/// (1-byte records cost 6 wire bytes per byte) fits up to a third of `max`,
/// which ordinary hellos, post-quantum key shares included (~1.9 KB), are
/// far below.
pub fn wire_limit(max: usize) -> usize {
    2 * max
}

/// Parse the bytes received so far. `max` bounds the ClientHello message
/// (its 4-byte handshake header and body, as `limits.maxClientHelloBytes`
/// says), [`wire_limit`] the records that carry it: once more would be
/// needed, the answer is [`HelloError::Oversized`] without waiting for them.
///
/// The ClientHello's own version fields are not checked: TLS asks a server
/// to answer any version it does not know with the highest it speaks (RFC
/// 5246 E.1, RFC 8446 4.2.1), which the TLS stack behind (rustls, or the
/// upstream's on a passthrough path) does. Only the record layer's major
/// version must be 3, as rustls requires.
pub fn parse(data: &[u8], max: usize) -> Result<Parsed, HelloError> {
    // First pass: walk the complete records without copying until the
    // message's length is known and covered. The proxy re-parses after every
    // read, so a hello dripped in small records costs a walk of headers per
    // read, not a copy of everything received.
    let mut rest = data;
    let mut wire = 0usize;
    let mut have = 0usize;
    let mut head = [0u8; 4];
    let mut need = None;
    while need.is_none_or(|n| have < n) {
        if rest.is_empty() {
            return Ok(Parsed::Incomplete);
        }
        if rest[0] != RECORD_HANDSHAKE || rest.get(1).is_some_and(|&major| major != 3) {
            return Err(HelloError::NotTls);
        }
        if rest.len() < 5 {
            return Ok(Parsed::Incomplete);
        }
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        if len == 0 {
            return Err(HelloError::Malformed("empty record"));
        }
        if len > MAX_RECORD {
            return Err(HelloError::Malformed("record too long"));
        }
        if wire + 5 + len > wire_limit(max) {
            return Err(HelloError::Oversized);
        }
        if rest.len() < 5 + len {
            return Ok(Parsed::Incomplete);
        }
        let payload = &rest[5..5 + len];
        for (slot, byte) in head.iter_mut().skip(have).zip(payload) {
            *slot = *byte;
        }
        have += len;
        wire += 5 + len;
        rest = &rest[5 + len..];
        if need.is_none() && have >= 4 {
            if head[0] != HS_CLIENT_HELLO {
                return Err(HelloError::Malformed(
                    "first handshake message is not a ClientHello",
                ));
            }
            let body_len =
                (usize::from(head[1]) << 16) | (usize::from(head[2]) << 8) | usize::from(head[3]);
            if 4 + body_len > max {
                return Err(HelloError::Oversized);
            }
            need = Some(4 + body_len);
        }
    }
    let end = need.unwrap_or(0);
    // Second pass: the message itself, borrowed when one record holds it,
    // joined from its records otherwise.
    let first = usize::from(u16::from_be_bytes([data[3], data[4]]));
    if end <= first {
        return parse_body(&data[5 + 4..5 + end]).map(Parsed::Done);
    }
    let mut message = Vec::with_capacity(end);
    let mut rest = data;
    while message.len() < end {
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        let take = len.min(end - message.len());
        message.extend_from_slice(&rest[5..5 + take]);
        rest = &rest[5 + len..];
    }
    parse_body(&message[4..]).map(Parsed::Done)
}

fn parse_body(body: &[u8]) -> Result<ClientHello, HelloError> {
    let m = HelloError::Malformed;
    let mut r = Reader::new(body);
    // legacy_version: any value (see `parse`).
    r.take(2).ok_or(m("truncated version"))?;
    r.take(32).ok_or(m("truncated random"))?;
    let sid = r.vec8().ok_or(m("truncated session id"))?;
    if sid.len() > 32 {
        return Err(m("session id too long"));
    }
    let suites = r.vec16().ok_or(m("truncated cipher suites"))?;
    if suites.is_empty() || suites.len() % 2 != 0 {
        return Err(m("bad cipher suites length"));
    }
    let comp = r.vec8().ok_or(m("truncated compression methods"))?;
    if comp.is_empty() {
        return Err(m("no compression method"));
    }
    let mut hello = ClientHello::default();
    if r.is_empty() {
        // No extensions at all (old clients): no SNI, no ALPN.
        return Ok(hello);
    }
    let exts = r.vec16().ok_or(m("truncated extensions"))?;
    if !r.is_empty() {
        return Err(m("trailing bytes after extensions"));
    }
    let mut er = Reader::new(exts);
    let mut seen_sni = false;
    let mut seen_alpn = false;
    while !er.is_empty() {
        let typ = er.u16().ok_or(m("truncated extension type"))?;
        let data = er.vec16().ok_or(m("truncated extension"))?;
        match typ {
            EXT_SERVER_NAME => {
                if seen_sni {
                    return Err(m("duplicate server_name"));
                }
                seen_sni = true;
                hello.sni = parse_sni(data)?;
            }
            EXT_ALPN => {
                if seen_alpn {
                    return Err(m("duplicate alpn"));
                }
                seen_alpn = true;
                hello.alpn = parse_alpn(data)?;
            }
            _ => {}
        }
    }
    Ok(hello)
}

fn parse_sni(data: &[u8]) -> Result<Option<String>, HelloError> {
    let m = HelloError::Malformed;
    let mut r = Reader::new(data);
    let list = r.vec16().ok_or(m("truncated server_name list"))?;
    if !r.is_empty() {
        return Err(m("trailing bytes in server_name"));
    }
    let mut lr = Reader::new(list);
    let mut host = None;
    while !lr.is_empty() {
        let typ = lr.u8().ok_or(m("truncated server_name entry"))?;
        let name = lr.vec16().ok_or(m("truncated server_name entry"))?;
        if typ != 0 {
            continue;
        }
        if host.is_some() {
            return Err(m("more than one host_name"));
        }
        if name.is_empty() || name.len() > 255 {
            return Err(m("bad host_name length"));
        }
        if !name
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
        {
            return Err(m("host_name is not a DNS name"));
        }
        // Checked ASCII above, so this conversion cannot fail.
        let s = String::from_utf8_lossy(name);
        let s = s.trim_end_matches('.');
        // "." alone (or only dots) names no host; an empty SNI is not one.
        if s.is_empty() {
            return Err(m("host_name is not a DNS name"));
        }
        host = Some(s.to_ascii_lowercase());
    }
    Ok(host)
}

fn parse_alpn(data: &[u8]) -> Result<Vec<Vec<u8>>, HelloError> {
    let m = HelloError::Malformed;
    let mut r = Reader::new(data);
    let list = r.vec16().ok_or(m("truncated alpn list"))?;
    if !r.is_empty() {
        return Err(m("trailing bytes in alpn"));
    }
    let mut lr = Reader::new(list);
    let mut out = Vec::new();
    while !lr.is_empty() {
        let p = lr.vec8().ok_or(m("truncated alpn entry"))?;
        if p.is_empty() {
            return Err(m("empty alpn protocol"));
        }
        out.push(p.to_vec());
    }
    Ok(out)
}

/// Build a syntactically valid ClientHello (tests, fuzzing seeds, health
/// check fixtures): one record unless `record_split` cuts the handshake.
#[cfg(test)]
pub(crate) fn build(
    sni: Option<&str>,
    alpn: &[&[u8]],
    padding: usize,
    record_split: Option<usize>,
) -> Vec<u8> {
    let mut exts = Vec::new();
    if let Some(name) = sni {
        let mut entry = vec![0u8];
        entry.extend_from_slice(&(name.len() as u16).to_be_bytes());
        entry.extend_from_slice(name.as_bytes());
        let mut list = (entry.len() as u16).to_be_bytes().to_vec();
        list.extend_from_slice(&entry);
        exts.extend_from_slice(&0u16.to_be_bytes());
        exts.extend_from_slice(&(list.len() as u16).to_be_bytes());
        exts.extend_from_slice(&list);
    }
    if !alpn.is_empty() {
        let mut list = Vec::new();
        for p in alpn {
            list.push(p.len() as u8);
            list.extend_from_slice(p);
        }
        let mut data = (list.len() as u16).to_be_bytes().to_vec();
        data.extend_from_slice(&list);
        exts.extend_from_slice(&16u16.to_be_bytes());
        exts.extend_from_slice(&(data.len() as u16).to_be_bytes());
        exts.extend_from_slice(&data);
    }
    if padding > 0 {
        exts.extend_from_slice(&21u16.to_be_bytes());
        exts.extend_from_slice(&(padding as u16).to_be_bytes());
        exts.extend(std::iter::repeat_n(0u8, padding));
    }
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7u8; 32]);
    body.push(0);
    body.extend_from_slice(&[0, 2, 0x13, 0x01]);
    body.extend_from_slice(&[1, 0]);
    body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
    body.extend_from_slice(&exts);
    let mut hs = vec![1];
    hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend_from_slice(&body);
    let chunks: Vec<&[u8]> = match record_split {
        Some(at) if at < hs.len() => vec![&hs[..at], &hs[at..]],
        _ => vec![&hs[..]],
    };
    let mut out = Vec::new();
    for c in chunks {
        out.extend_from_slice(&[22, 3, 1]);
        out.extend_from_slice(&(c.len() as u16).to_be_bytes());
        out.extend_from_slice(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sni_and_alpn() {
        let b = build(
            Some("API.Tenant.example.com."),
            &[b"h2", b"http/1.1"],
            0,
            None,
        );
        let Parsed::Done(h) = parse(&b, 16384).unwrap() else {
            panic!("incomplete")
        };
        assert_eq!(h.sni.as_deref(), Some("api.tenant.example.com"));
        assert_eq!(h.alpn, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
    }

    #[test]
    fn no_sni() {
        let b = build(None, &[], 0, None);
        assert_eq!(
            parse(&b, 16384).unwrap(),
            Parsed::Done(ClientHello::default())
        );
    }

    #[test]
    fn every_prefix_is_incomplete_and_split_records_reassemble() {
        for split in [None, Some(10), Some(60)] {
            let b = build(Some("a.example.com"), &[b"h2"], 300, split);
            for n in 0..b.len() {
                assert_eq!(
                    parse(&b[..n], 16384).unwrap(),
                    Parsed::Incomplete,
                    "prefix {n}"
                );
            }
            let Parsed::Done(h) = parse(&b, 16384).unwrap() else {
                panic!()
            };
            assert_eq!(h.sni.as_deref(), Some("a.example.com"));
        }
    }

    #[test]
    fn oversized_is_detected_from_the_header() {
        let b = build(Some("a.example.com"), &[], 5000, None);
        assert_eq!(parse(&b[..5], 1024), Err(HelloError::Oversized));
        let b = build(Some("a.example.com"), &[], 5000, Some(100));
        assert_eq!(parse(&b[..200], 1024), Err(HelloError::Oversized));
    }

    #[test]
    fn garbage() {
        assert_eq!(parse(b"GET / HTTP/1.1\r\n", 16384), Err(HelloError::NotTls));
        assert_eq!(parse(&[22, 2, 0], 16384), Err(HelloError::NotTls));
        assert_eq!(
            parse(&[22, 3, 1, 0, 0], 16384),
            Err(HelloError::Malformed("empty record"))
        );
        // A ServerHello where a ClientHello should be.
        let mut b = build(None, &[], 0, None);
        b[5] = 2;
        assert!(matches!(parse(&b, 16384), Err(HelloError::Malformed(_))));
    }

    /// The message of a one-record hello cut into records of `size` bytes.
    fn fragmented(hello: &[u8], size: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for c in hello[5..].chunks(size) {
            out.extend_from_slice(&[22, 3, 1]);
            out.extend_from_slice(&(c.len() as u16).to_be_bytes());
            out.extend_from_slice(c);
        }
        out
    }

    /// Versions this parser does not know are the TLS stack's to answer
    /// (with the highest it speaks), never a reason to drop the client.
    #[test]
    fn any_legacy_version_routes() {
        for version in [[3, 4], [4, 1], [6, 3], [254, 254], [3, 0]] {
            let mut b = build(Some("a.example.com"), &[], 0, None);
            b[9..11].copy_from_slice(&version);
            let Parsed::Done(h) = parse(&b, 16384).unwrap() else {
                panic!("{version:?}: incomplete")
            };
            assert_eq!(h.sni.as_deref(), Some("a.example.com"), "{version:?}");
        }
    }

    /// With the default limit: a hello that fills one maximal record, a
    /// hello with a post-quantum key share's size cut into 1-byte records,
    /// and a large hello over records of a few hundred bytes.
    #[test]
    fn large_and_fragmented_hellos_fit_the_default_limit() {
        let full = build(Some("a.example.com"), &[b"h2"], 16384 - 82, None);
        assert_eq!(full.len(), 5 + 16384, "one maximal record");
        assert!(matches!(parse(&full, 16384), Ok(Parsed::Done(_))));
        let pq = build(Some("a.example.com"), &[b"h2"], 1300, None);
        let tiny = fragmented(&pq, 1);
        assert!(tiny.len() > 6 * 1300);
        let Parsed::Done(h) = parse(&tiny, 16384).unwrap() else {
            panic!("incomplete")
        };
        assert_eq!(h.alpn, vec![b"h2".to_vec()]);
        let big = fragmented(&full, 300);
        assert!(matches!(parse(&big, 16384), Ok(Parsed::Done(_))));
        // One byte more than the limit is refused, however it is cut.
        let over = build(Some("a.example.com"), &[b"h2"], 16384 - 81, Some(16000));
        assert_eq!(parse(&over, 16384), Err(HelloError::Oversized));
    }

    #[test]
    fn dots_only_host_name_is_malformed() {
        // "." used to come back as an empty SNI, breaking the documented
        // shape (the fuzz target's invariant).
        for name in [".", "..."] {
            let b = build(Some(name), &[], 0, None);
            assert_eq!(
                parse(&b, 16384),
                Err(HelloError::Malformed("host_name is not a DNS name")),
                "{name:?}"
            );
        }
    }

    #[test]
    fn never_panics_on_mutations() {
        // Deterministic pseudo-random mutations and truncations of valid hellos.
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let seeds = [
            build(Some("a.example.com"), &[b"h2", b"http/1.1"], 40, None),
            build(Some("b.example.com"), &[], 0, Some(30)),
            build(None, &[b"x"], 0, None),
        ];
        for _ in 0..20_000 {
            let mut b = seeds[(next() % 3) as usize].clone();
            for _ in 0..(next() % 4 + 1) {
                let i = (next() as usize) % b.len();
                b[i] = next() as u8;
            }
            let cut = (next() as usize) % (b.len() + 1);
            let _ = parse(&b[..cut], 16384);
            let _ = parse(&b, 64);
        }
        for len in 0..64 {
            let b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let _ = parse(&b, 16384);
        }
    }
}
