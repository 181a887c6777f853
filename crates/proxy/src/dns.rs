//! A minimal stub resolver that returns TTLs (getaddrinfo does not): one A
//! and one AAAA query over UDP to the first `nameserver` of
//! `/etc/resolv.conf`. Anything unusual (no nameserver, truncation, a name in
//! /etc/hosts, an error answer) falls back to the system resolver with the
//! configured minimum TTL, so this only ever adds information.

use std::{
    hash::{BuildHasher, Hasher},
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    time::Duration,
};

use tokio::net::UdpSocket;

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;

/// Encode a query for `name` and `qtype` with recursion desired.
pub fn query(id: u16, name: &str, qtype: u16) -> Option<Vec<u8>> {
    let mut q = Vec::with_capacity(18 + name.len());
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        if label.is_empty() || label.len() > 63 {
            return None;
        }
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&1u16.to_be_bytes());
    Some(q)
}

fn skip_name(b: &[u8], mut i: usize) -> Option<usize> {
    // Labels until a zero byte or a compression pointer (which ends the name).
    for _ in 0..128 {
        let len = *b.get(i)?;
        match len {
            0 => return Some(i + 1),
            l if l & 0xc0 == 0xc0 => {
                b.get(i + 1)?;
                return Some(i + 2);
            }
            l => i += 1 + usize::from(l),
        }
    }
    None
}

/// Parse an answer: addresses of type `qtype` and the smallest TTL.
/// `None` for anything but a clean answer to query `id`.
pub fn parse_answer(b: &[u8], id: u16, qtype: u16) -> Option<(Vec<IpAddr>, u32)> {
    let u16_at = |i: usize| Some(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?]));
    if b.len() < 12 || u16_at(0)? != id {
        return None;
    }
    let flags = u16_at(2)?;
    // QR set, not truncated, RCODE 0.
    if flags & 0x8000 == 0 || flags & 0x0200 != 0 || flags & 0x000f != 0 {
        return None;
    }
    let (qd, an) = (u16_at(4)?, u16_at(6)?);
    let mut i = 12;
    for _ in 0..qd {
        i = skip_name(b, i)? + 4;
    }
    let mut addrs = Vec::new();
    let mut ttl = u32::MAX;
    for _ in 0..an {
        i = skip_name(b, i)?;
        let typ = u16_at(i)?;
        let t = u32::from_be_bytes([
            *b.get(i + 4)?,
            *b.get(i + 5)?,
            *b.get(i + 6)?,
            *b.get(i + 7)?,
        ]);
        let len = usize::from(u16_at(i + 8)?);
        let data = b.get(i + 10..i + 10 + len)?;
        i += 10 + len;
        match (typ, data.len()) {
            (TYPE_A, 4) if qtype == TYPE_A => {
                addrs.push(IpAddr::V4(Ipv4Addr::new(
                    data[0], data[1], data[2], data[3],
                )));
                ttl = ttl.min(t);
            }
            (TYPE_AAAA, 16) if qtype == TYPE_AAAA => {
                let mut a = [0u8; 16];
                a.copy_from_slice(data);
                addrs.push(IpAddr::V6(Ipv6Addr::from(a)));
                ttl = ttl.min(t);
            }
            // CNAMEs on the way: their TTL bounds the answer too.
            _ => ttl = ttl.min(t),
        }
    }
    Some((addrs, ttl))
}

/// First nameserver of a resolv.conf text.
pub fn nameserver(resolv_conf: &str) -> Option<IpAddr> {
    resolv_conf.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next() == Some("nameserver"))
            .then(|| w.next()?.split('%').next()?.parse().ok())
            .flatten()
    })
}

fn random_id() -> u16 {
    // RandomState is seeded randomly per instance: enough for a query id.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    h.finish() as u16
}

async fn ask(
    server: SocketAddr,
    name: &str,
    qtype: u16,
    timeout: Duration,
) -> Option<(Vec<IpAddr>, u32)> {
    let bind: SocketAddr = if server.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = UdpSocket::bind(bind).await.ok()?;
    sock.connect(server).await.ok()?;
    let id = random_id();
    sock.send(&query(id, name, qtype)?).await.ok()?;
    let mut buf = vec![0u8; 1500];
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let n = tokio::time::timeout_at(deadline, sock.recv(&mut buf))
            .await
            .ok()?
            .ok()?;
        if let Some(r) = parse_answer(&buf[..n], id, qtype) {
            return Some(r);
        }
    }
}

/// Resolve `name` (A and AAAA) with the TTL of the answer, when the stub
/// path applies; `None` means "use the system resolver".
pub async fn resolve_with_ttl(name: &str) -> Option<(Vec<IpAddr>, Duration)> {
    let hosts = tokio::fs::read_to_string("/etc/hosts")
        .await
        .unwrap_or_default();
    let listed = hosts
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .any(|l| {
            l.split_whitespace()
                .skip(1)
                .any(|h| h.eq_ignore_ascii_case(name))
        });
    // Single-label names depend on search domains: the system resolver's job.
    if listed || !name.trim_end_matches('.').contains('.') {
        return None;
    }
    let conf = tokio::fs::read_to_string("/etc/resolv.conf").await.ok()?;
    let server = SocketAddr::new(nameserver(&conf)?, 53);
    let t = Duration::from_secs(2);
    let (a, aaaa) = tokio::join!(
        ask(server, name, TYPE_A, t),
        ask(server, name, TYPE_AAAA, t)
    );
    let (a, aaaa) = (a?, aaaa.unwrap_or((Vec::new(), u32::MAX)));
    let ttl = a.1.min(aaaa.1);
    let mut addrs = a.0;
    addrs.extend(aaaa.0);
    if addrs.is_empty() {
        return None;
    }
    Some((addrs, Duration::from_secs(u64::from(ttl))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(id: u16, name: &str, records: &[(u16, u32, &[u8])], flags: u16) -> Vec<u8> {
        let q = query(id, name, TYPE_A).unwrap();
        let mut b = q[..12].to_vec();
        b[2..4].copy_from_slice(&flags.to_be_bytes());
        b[6..8].copy_from_slice(&(records.len() as u16).to_be_bytes());
        b.extend_from_slice(&q[12..]);
        for (typ, ttl, data) in records {
            b.extend_from_slice(&[0xc0, 12]);
            b.extend_from_slice(&typ.to_be_bytes());
            b.extend_from_slice(&1u16.to_be_bytes());
            b.extend_from_slice(&ttl.to_be_bytes());
            b.extend_from_slice(&(data.len() as u16).to_be_bytes());
            b.extend_from_slice(data);
        }
        b
    }

    #[test]
    fn parses_addresses_and_min_ttl() {
        let b = answer(
            7,
            "api.example.com",
            &[
                (5, 30, b"\x03foo\x00"),
                (TYPE_A, 60, &[192, 0, 2, 10]),
                (TYPE_A, 45, &[192, 0, 2, 11]),
            ],
            0x8180,
        );
        let (addrs, ttl) = parse_answer(&b, 7, TYPE_A).unwrap();
        assert_eq!(
            addrs,
            vec![IpAddr::from([192, 0, 2, 10]), IpAddr::from([192, 0, 2, 11])]
        );
        assert_eq!(ttl, 30);
        assert!(parse_answer(&b, 8, TYPE_A).is_none(), "wrong id");
        let nx = answer(7, "api.example.com", &[], 0x8183);
        assert!(parse_answer(&nx, 7, TYPE_A).is_none(), "NXDOMAIN");
        let tc = answer(7, "api.example.com", &[], 0x8380);
        assert!(parse_answer(&tc, 7, TYPE_A).is_none(), "truncated");
        for n in 0..b.len() {
            let _ = parse_answer(&b[..n], 7, TYPE_A);
        }
    }

    #[test]
    fn resolv_conf() {
        assert_eq!(
            nameserver("# x\nsearch a\nnameserver fe80::1%eth0\nnameserver 10.0.0.1\n"),
            Some("fe80::1".parse().unwrap())
        );
        assert_eq!(nameserver("search a\n"), None);
        assert!(query(1, "a..b", TYPE_A).is_none());
    }
}
