//! Put the listen address on an interface (rtnetlink, NET_ADMIN), the way
//! `ip link add NAME type dummy; ip addr replace ADDR/32 dev NAME scope host`
//! does, without a shell or an `ip` binary in the image and without unsafe.

use std::{
    io::{Read, Write},
    net::IpAddr,
};

use socket2::{Domain, Protocol, Socket, Type};

/// Errors of interface set-up.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    /// Socket-level failure.
    #[error("failed to talk rtnetlink: {0}")]
    Io(#[from] std::io::Error),
    /// The kernel refused a request.
    #[error("failed to {what}: {source}")]
    Kernel {
        /// Request.
        what: String,
        /// errno from the kernel.
        source: std::io::Error,
    },
    /// The kernel answered with something unexpected.
    #[error("failed to {0}: unexpected answer")]
    Protocol(String),
}

const AF_NETLINK: i32 = 16;
const NETLINK_ROUTE: i32 = 0;
const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const RTM_NEWADDR: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const IFLA_IFNAME: u16 = 3;
const IFLA_LINKINFO: u16 = 18;
const IFLA_INFO_KIND: u16 = 1;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFF_UP: u32 = 1;
const IFA_F_NODAD: u8 = 0x02;
const RT_SCOPE_HOST: u8 = 254;
const ENODEV: i32 = 19;

fn attr(out: &mut Vec<u8>, typ: u16, data: &[u8]) {
    out.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
    out.extend_from_slice(&typ.to_ne_bytes());
    out.extend_from_slice(data);
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

fn message(typ: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(16 + payload.len());
    m.extend_from_slice(&((16 + payload.len()) as u32).to_ne_bytes());
    m.extend_from_slice(&typ.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(payload);
    m
}

fn ifinfomsg(index: i32, flags: u32, change: u32) -> Vec<u8> {
    let mut p = vec![0u8, 0u8];
    p.extend_from_slice(&0u16.to_ne_bytes());
    p.extend_from_slice(&index.to_ne_bytes());
    p.extend_from_slice(&flags.to_ne_bytes());
    p.extend_from_slice(&change.to_ne_bytes());
    p
}

fn name_attr(p: &mut Vec<u8>, name: &str) {
    let mut n = name.as_bytes().to_vec();
    n.push(0);
    attr(p, IFLA_IFNAME, &n);
}

struct Rtnl {
    sock: Socket,
    seq: u32,
}

enum Answer {
    Ack,
    Errno(i32),
    /// A data message: its type and payload after the header.
    Data(u16, Vec<u8>),
}

impl Rtnl {
    fn open() -> Result<Self, NetlinkError> {
        // An unbound netlink socket sends to the kernel (port 0) by default.
        let sock = Socket::new(
            Domain::from(AF_NETLINK),
            Type::RAW,
            Some(Protocol::from(NETLINK_ROUTE)),
        )?;
        Ok(Self { sock, seq: 1 })
    }

    fn request(&mut self, typ: u16, flags: u16, payload: &[u8]) -> Result<Answer, NetlinkError> {
        self.seq += 1;
        let seq = self.seq;
        (&self.sock).write_all(&message(typ, flags, seq, payload))?;
        let mut buf = vec![0u8; 8192];
        loop {
            let n = (&self.sock).read(&mut buf)?;
            let mut b = &buf[..n];
            while b.len() >= 16 {
                let len = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize;
                let mtype = u16::from_ne_bytes([b[4], b[5]]);
                let mseq = u32::from_ne_bytes([b[8], b[9], b[10], b[11]]);
                if len < 16 || len > b.len() {
                    break;
                }
                let body = &b[16..len];
                if mseq == seq {
                    if mtype == NLMSG_ERROR && body.len() >= 4 {
                        let err = i32::from_ne_bytes([body[0], body[1], body[2], body[3]]);
                        return Ok(if err == 0 {
                            Answer::Ack
                        } else {
                            Answer::Errno(-err)
                        });
                    }
                    return Ok(Answer::Data(mtype, body.to_vec()));
                }
                let next = ((len + 3) & !3).min(b.len());
                b = &b[next..];
            }
        }
    }

    fn check(
        &mut self,
        what: impl Fn() -> String,
        typ: u16,
        flags: u16,
        payload: &[u8],
    ) -> Result<(), NetlinkError> {
        match self.request(typ, flags | NLM_F_ACK, payload)? {
            Answer::Ack => Ok(()),
            Answer::Errno(e) => Err(NetlinkError::Kernel {
                what: what(),
                source: std::io::Error::from_raw_os_error(e),
            }),
            Answer::Data(..) => Err(NetlinkError::Protocol(what())),
        }
    }

    /// Interface index by name, `None` when it does not exist.
    fn index(&mut self, name: &str) -> Result<Option<i32>, NetlinkError> {
        let mut p = ifinfomsg(0, 0, 0);
        name_attr(&mut p, name);
        match self.request(RTM_GETLINK, NLM_F_REQUEST, &p)? {
            Answer::Data(RTM_NEWLINK, body) if body.len() >= 8 => Ok(Some(i32::from_ne_bytes([
                body[4], body[5], body[6], body[7],
            ]))),
            Answer::Errno(ENODEV) => Ok(None),
            Answer::Errno(e) => Err(NetlinkError::Kernel {
                what: format!("look up interface {name}"),
                source: std::io::Error::from_raw_os_error(e),
            }),
            _ => Err(NetlinkError::Protocol(format!("look up interface {name}"))),
        }
    }
}

/// Make sure `interface` exists (created as a dummy link when missing), is
/// up, and carries `addr` as a host-scoped /32 or /128. Idempotent: run
/// periodically to repair a removed address.
pub fn ensure_address(interface: &str, addr: IpAddr) -> Result<(), NetlinkError> {
    let mut nl = Rtnl::open()?;
    let index = match nl.index(interface)? {
        Some(i) => i,
        None => {
            let mut p = ifinfomsg(0, IFF_UP, IFF_UP);
            name_attr(&mut p, interface);
            let mut kind = Vec::new();
            attr(&mut kind, IFLA_INFO_KIND, b"dummy");
            attr(&mut p, IFLA_LINKINFO, &kind);
            nl.check(
                || format!("create dummy interface {interface}"),
                RTM_NEWLINK,
                NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL,
                &p,
            )?;
            nl.index(interface)?.ok_or_else(|| {
                NetlinkError::Protocol(format!("create dummy interface {interface}"))
            })?
        }
    };
    nl.check(
        || format!("set interface {interface} up"),
        RTM_NEWLINK,
        NLM_F_REQUEST,
        &ifinfomsg(index, IFF_UP, IFF_UP),
    )?;
    let (family, prefix, flags, octets): (u8, u8, u8, Vec<u8>) = match addr {
        IpAddr::V4(a) => (2, 32, 0, a.octets().to_vec()),
        IpAddr::V6(a) => (10, 128, IFA_F_NODAD, a.octets().to_vec()),
    };
    let mut p = vec![family, prefix, flags, RT_SCOPE_HOST];
    p.extend_from_slice(&(index as u32).to_ne_bytes());
    attr(&mut p, IFA_LOCAL, &octets);
    attr(&mut p, IFA_ADDRESS, &octets);
    nl.check(
        || format!("add {addr} to {interface}"),
        RTM_NEWADDR,
        NLM_F_REQUEST | NLM_F_CREATE | NLM_F_REPLACE,
        &p,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_padded() {
        let mut v = Vec::new();
        attr(&mut v, IFLA_INFO_KIND, b"dummy");
        assert_eq!(v.len(), 12);
        assert_eq!(u16::from_ne_bytes([v[0], v[1]]), 9);
        let m = message(RTM_GETLINK, NLM_F_REQUEST, 7, &v);
        assert_eq!(
            u32::from_ne_bytes([m[0], m[1], m[2], m[3]]) as usize,
            m.len()
        );
    }
}
