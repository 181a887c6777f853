//! The record layer of a TLS connection once its handshake is done.
//!
//! rustls runs every handshake. Then its kernel-TLS interface
//! (`dangerous_into_kernel_connection`) hands over the traffic keys and
//! sequence numbers and keeps what still needs its state: the key schedule
//! for TLS 1.3 key updates and the session tickets a server sends. From
//! there this module seals and opens the records: opened in place in the
//! receive buffer, sealed straight into the send buffer. rustls's own path
//! runs its state machine on every read and write, allocates each record
//! and copies it twice; on the proxy's keep-alive path that was a fifth of
//! the user-space CPU per request.
//!
//! The formats are RFC 8446 section 5 (TLS 1.3) and RFC 5246 section 6.2.3.3
//! with RFC 5288 (TLS 1.2 AES-GCM) and RFC 7905 (ChaCha20-Poly1305); the
//! checks are rustls's: record versions 0x03XX, no empty record other than
//! application data, plaintext of at most 2^14 bytes, TLS 1.3 ciphertext of
//! at most 2^14 + 256. What the records carry besides data (alerts, key
//! updates, tickets, renegotiation requests) is the caller's
//! ([`super::tlsio`]), as rustls's kernel interface leaves it.

use std::ops::Range;

use rustls::{ContentType, ProtocolVersion, SupportedCipherSuite};

use super::aead::Key;

/// Bytes of a record header: type, version, length.
pub const HEADER_LEN: usize = 5;

/// Largest plaintext of one record (RFC 8446 section 5.1).
pub const MAX_PLAINTEXT: usize = 16_384;

/// What a sealed record adds to its plaintext at most, header included
/// (TLS 1.2 GCM: explicit nonce and tag; TLS 1.3: content type and tag).
pub const MAX_OVERHEAD: usize = HEADER_LEN + 8 + 16;

/// Longest record body rustls accepts from a peer in any version.
const MAX_BODY: usize = MAX_PLAINTEXT + 2048;

/// Longest TLS 1.3 record body (RFC 8446 section 5.2).
const MAX_BODY_TLS13: usize = MAX_PLAINTEXT + 256;

/// A record the layer cannot open or seal.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The header's version is not 0x03XX.
    #[error("TLS record with protocol version {0:#06x}")]
    Version(u16),
    /// Content type unknown, or not allowed once the handshake is done.
    #[error("TLS record of content type {0} after the handshake")]
    ContentType(u8),
    /// An empty record of a type that must carry something.
    #[error("empty TLS record of content type {0}")]
    Empty(u8),
    /// Longer than the protocol allows.
    #[error("TLS record of {0} bytes is longer than allowed (record_overflow)")]
    Overflow(usize),
    /// Shorter than its tag and explicit nonce.
    #[error("TLS record of {0} bytes is too short to be encrypted")]
    Short(usize),
    /// Authentication failed: tampered, truncated or out of order.
    #[error("TLS record does not decrypt (bad_record_mac)")]
    Decrypt,
    /// A TLS 1.3 record whose plaintext is all padding.
    #[error("TLS 1.3 record without a content type")]
    NoContentType,
    /// A sequence number would wrap (2^64 records with one key).
    #[error("TLS record sequence numbers exhausted")]
    Exhausted,
    /// More plaintext than one record holds.
    #[error("TLS record plaintext of {0} bytes is longer than one record holds")]
    TooLong(usize),
}

/// One opened record: its content type and where its plaintext lies in the
/// record's bytes.
#[derive(Debug, PartialEq, Eq)]
pub struct Opened {
    /// The real content type (TLS 1.3: the one inside the encryption).
    pub typ: ContentType,
    /// Plaintext within the record slice given to [`Records::open`].
    pub plain: Range<usize>,
}

/// Both directions' keys and sequence numbers of one connection.
pub struct Records {
    tx: Key,
    rx: Key,
    tx_seq: u64,
    rx_seq: u64,
    /// Records one key may seal (the suite's confidentiality limit): TLS
    /// 1.3 replaces the key before, TLS 1.2 closes the connection.
    tx_limit: u64,
    tls13: bool,
}

/// One direction's keys as rustls hands them out: the sequence number of
/// the next record and the key.
pub type Secrets = (u64, rustls::ConnectionTrafficSecrets);

impl Records {
    /// The layer for keys rustls extracted from a finished handshake of
    /// `version` with `suite`; `None` for a version or an AEAD this module
    /// does not know.
    pub fn new(
        version: ProtocolVersion,
        suite: SupportedCipherSuite,
        tx: Secrets,
        rx: Secrets,
    ) -> Option<Self> {
        let tls13 = match version {
            ProtocolVersion::TLSv1_3 => true,
            ProtocolVersion::TLSv1_2 => false,
            _ => return None,
        };
        Some(Self {
            tx: Key::from_secrets(tx.1)?,
            rx: Key::from_secrets(rx.1)?,
            tx_seq: tx.0,
            rx_seq: rx.0,
            tx_limit: match suite {
                SupportedCipherSuite::Tls13(s) => s.common.confidentiality_limit,
                SupportedCipherSuite::Tls12(s) => s.common.confidentiality_limit,
            },
            tls13,
        })
    }

    /// Whether the connection speaks TLS 1.3.
    pub fn is_tls13(&self) -> bool {
        self.tls13
    }

    /// Let the sending key seal only `n` more records (tests reach the
    /// limit quickly).
    #[cfg(test)]
    pub fn set_tx_limit(&mut self, n: u64) {
        self.tx_limit = self.tx_seq + n;
    }

    /// Whether the sending key has sealed all it may: a TLS 1.3 connection
    /// must update it (key update) before the next record, a TLS 1.2 one
    /// must close.
    pub fn tx_worn_out(&self) -> bool {
        self.tx_seq >= self.tx_limit
    }

    /// Replace the sending key (after a TLS 1.3 key update we sent).
    pub fn set_tx(&mut self, next: Secrets) -> bool {
        replace(&mut self.tx, &mut self.tx_seq, next)
    }

    /// Replace the receiving key (after the peer's TLS 1.3 key update).
    pub fn set_rx(&mut self, next: Secrets) -> bool {
        replace(&mut self.rx, &mut self.rx_seq, next)
    }

    /// The length of the whole record at the start of `buf`, checking its
    /// header; `Ok(None)` while fewer bytes than that have arrived.
    pub fn next_len(&self, buf: &[u8]) -> Result<Option<usize>, RecordError> {
        let Some(h) = buf.first_chunk::<HEADER_LEN>() else {
            return Ok(None);
        };
        let typ = h[0];
        let version = u16::from_be_bytes([h[1], h[2]]);
        let len = usize::from(u16::from_be_bytes([h[3], h[4]]));
        if !(20..=23).contains(&typ) {
            return Err(RecordError::ContentType(typ));
        }
        if version >> 8 != 3 {
            return Err(RecordError::Version(version));
        }
        if len == 0 && typ != u8::from(ContentType::ApplicationData) {
            return Err(RecordError::Empty(typ));
        }
        let max = if self.tls13 { MAX_BODY_TLS13 } else { MAX_BODY };
        if len > max {
            return Err(RecordError::Overflow(len));
        }
        Ok((buf.len() >= HEADER_LEN + len).then_some(HEADER_LEN + len))
    }

    /// Open one whole record (header included, as [`Self::next_len`]
    /// measured it) in place.
    pub fn open(&mut self, rec: &mut [u8]) -> Result<Opened, RecordError> {
        let seq = self.rx_seq;
        if seq == u64::MAX {
            return Err(RecordError::Exhausted);
        }
        let (header, body) = rec.split_at_mut(HEADER_LEN);
        let typ = ContentType::from(header[0]);
        let tag_len = self.rx.tag_len();
        let opened = if self.tls13 {
            // Every record after the handshake is encrypted and says
            // "application data" outside.
            if typ != ContentType::ApplicationData {
                return Err(RecordError::ContentType(header[0]));
            }
            if body.len() < tag_len {
                return Err(RecordError::Short(body.len()));
            }
            let len = self
                .rx
                .open_tls13(seq, body)
                .map_err(|_| RecordError::Decrypt)?;
            // The content type is the last byte that is not padding.
            let Some(end) = body[..len].iter().rposition(|&b| b != 0) else {
                return Err(RecordError::NoContentType);
            };
            if end > MAX_PLAINTEXT {
                return Err(RecordError::Overflow(end));
            }
            Opened {
                typ: ContentType::from(body[end]),
                plain: HEADER_LEN..HEADER_LEN + end,
            }
        } else {
            // (Heartbeat and unknown types never pass `next_len`.)
            if typ == ContentType::ChangeCipherSpec {
                return Err(RecordError::ContentType(header[0]));
            }
            if body.len() < self.rx.explicit_nonce_len() + tag_len {
                return Err(RecordError::Short(body.len()));
            }
            let version = ProtocolVersion::from(u16::from_be_bytes([header[1], header[2]]));
            let len = self
                .rx
                .open_tls12(seq, typ, version, body)
                .map_err(|_| RecordError::Decrypt)?;
            if len > MAX_PLAINTEXT {
                return Err(RecordError::Overflow(len));
            }
            Opened {
                typ,
                plain: HEADER_LEN..HEADER_LEN + len,
            }
        };
        self.rx_seq = seq + 1;
        Ok(opened)
    }

    /// Bytes a record of `n` plaintext bytes takes, header included.
    pub fn sealed_len(&self, n: usize) -> usize {
        let inner = if self.tls13 {
            1
        } else {
            self.tx.explicit_nonce_len()
        };
        HEADER_LEN + n + inner + self.tx.tag_len()
    }

    /// Seal `plain` (at most [`MAX_PLAINTEXT`] bytes) as one record of
    /// type `typ` at the start of `out`, which has room for
    /// [`Self::sealed_len`] bytes; returns that length. The caller checks
    /// [`Self::tx_worn_out`] first.
    pub fn seal(
        &mut self,
        typ: ContentType,
        plain: &[u8],
        out: &mut [u8],
    ) -> Result<usize, RecordError> {
        if plain.len() > MAX_PLAINTEXT {
            return Err(RecordError::TooLong(plain.len()));
        }
        let seq = self.tx_seq;
        if seq == u64::MAX {
            return Err(RecordError::Exhausted);
        }
        let total = self.sealed_len(plain.len());
        let out = &mut out[..total];
        let body_len = (total - HEADER_LEN) as u16;
        let tag_len = self.tx.tag_len();
        let (header, body) = out.split_at_mut(HEADER_LEN);
        let (sealed, tag_out) = body.split_at_mut(body.len() - tag_len);
        let tag = if self.tls13 {
            header.copy_from_slice(&record_header(ContentType::ApplicationData, body_len));
            let (data, inner_type) = sealed.split_at_mut(plain.len());
            data.copy_from_slice(plain);
            inner_type[0] = u8::from(typ);
            self.tx.seal_tls13(seq, sealed)
        } else {
            header.copy_from_slice(&record_header(typ, body_len));
            let explicit = self.tx.explicit_nonce_len();
            sealed[explicit..].copy_from_slice(plain);
            self.tx
                .seal_tls12(seq, typ, ProtocolVersion::TLSv1_2, sealed)
        }
        // ring refuses only inputs longer than AES-GCM's 2^36 bytes.
        .map_err(|_| RecordError::TooLong(plain.len()))?;
        tag_out.copy_from_slice(tag.as_ref());
        self.tx_seq = seq + 1;
        Ok(total)
    }
}

/// Put the key of `secrets` in place of `key`, numbering from `seq`;
/// `false` for an AEAD this module does not know.
fn replace(key: &mut Key, seq: &mut u64, (next_seq, secrets): Secrets) -> bool {
    let Some(k) = Key::from_secrets(secrets) else {
        return false;
    };
    *key = k;
    *seq = next_seq;
    true
}

/// A record header: `typ`, version 1.2 (what TLS 1.3 records say too),
/// body length.
fn record_header(typ: ContentType, body_len: u16) -> [u8; HEADER_LEN] {
    let [hi, lo] = body_len.to_be_bytes();
    [u8::from(typ), 3, 3, hi, lo]
}

#[cfg(test)]
mod tests {
    use std::{
        io::{Read, Write},
        sync::Arc,
    };

    use rustls::{
        ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection,
        pki_types::{PrivateKeyDer, ServerName},
    };

    use super::*;
    use crate::proxy::aead::tests::pump;

    /// A rustls server (ring's record layer, unchanged) and our record
    /// layer on the client's keys, for `suite`.
    fn pair(suite: SupportedCipherSuite) -> (Records, ServerConnection) {
        let cert = rcgen::generate_simple_self_signed(vec!["api.example.com".into()]).unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(cert.cert.der().clone()).unwrap();
        let key = PrivateKeyDer::try_from(cert.signing_key.serialize_der()).unwrap();
        let mut provider = rustls::crypto::ring::default_provider();
        provider.cipher_suites = vec![suite];
        let provider = Arc::new(provider);
        let version = match suite {
            SupportedCipherSuite::Tls13(_) => &rustls::version::TLS13,
            SupportedCipherSuite::Tls12(_) => &rustls::version::TLS12,
        };
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[version])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.cert.der().clone()], key)
            .unwrap();
        let mut client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[version])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.enable_secret_extraction = true;
        let name = ServerName::try_from("api.example.com").unwrap();
        let mut c = ClientConnection::new(Arc::new(client), name).unwrap();
        let mut s = ServerConnection::new(Arc::new(server)).unwrap();
        while c.is_handshaking() || s.is_handshaking() || s.wants_write() {
            pump(&mut c, &mut s, &mut Vec::new());
            pump(&mut s, &mut c, &mut Vec::new());
        }
        let v = c.protocol_version().unwrap();
        #[allow(deprecated)] // the kernel interface is for unbuffered connections only
        let secrets = c.dangerous_extract_secrets().unwrap();
        let records = Records::new(v, suite, secrets.tx, secrets.rx).unwrap();
        (records, s)
    }

    fn seal(r: &mut Records, typ: ContentType, plain: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; plain.len() + MAX_OVERHEAD];
        let n = r.seal(typ, plain, &mut out).unwrap();
        assert_eq!(n, r.sealed_len(plain.len()));
        out.truncate(n);
        out
    }

    /// The next record rustls sends, opened by us.
    fn open_next(
        r: &mut Records,
        wire: &mut Vec<u8>,
    ) -> Result<(ContentType, Vec<u8>), RecordError> {
        let len = r.next_len(wire)?.expect("a whole record");
        let mut rec: Vec<u8> = wire.drain(..len).collect();
        let o = r.open(&mut rec)?;
        Ok((o.typ, rec[o.plain].to_vec()))
    }

    /// Records we seal, rustls opens, and the other way round, in every
    /// suite the proxy offers (TLS 1.2 and 1.3, AES-GCM and ChaCha20):
    /// small and full-size data, and close_notify taken as a clean end.
    #[test]
    fn interoperates_with_rustls_in_every_suite() {
        let suites = rustls::crypto::ring::ALL_CIPHER_SUITES
            .iter()
            .filter(|s| !format!("{:?}", s.suite()).contains("_RSA_"));
        let mut tested = 0;
        for &suite in suites {
            let what = format!("{:?}", suite.suite());
            let (mut ours, mut s) = pair(suite);
            let big: Vec<u8> = (0..MAX_PLAINTEXT).map(|i| (i % 251) as u8).collect();
            for msg in [&b"GET /version HTTP/1.1\r\n\r\n"[..], &big, b""] {
                let rec = seal(&mut ours, ContentType::ApplicationData, msg);
                let mut rd = rec.as_slice();
                while !rd.is_empty() {
                    s.read_tls(&mut rd).unwrap();
                    s.process_new_packets().unwrap();
                }
                let mut got = vec![0u8; msg.len()];
                if !msg.is_empty() {
                    s.reader().read_exact(&mut got).unwrap();
                }
                assert_eq!(got, msg, "{what}: rustls read what we sealed");

                s.writer().write_all(msg).unwrap();
                let mut wire = Vec::new();
                while s.wants_write() {
                    s.write_tls(&mut wire).unwrap();
                }
                let mut got = Vec::new();
                while !wire.is_empty() {
                    let (typ, plain) = open_next(&mut ours, &mut wire).unwrap();
                    assert_eq!(typ, ContentType::ApplicationData, "{what}");
                    got.extend_from_slice(&plain);
                }
                assert_eq!(got, msg, "{what}: we opened what rustls sealed");
            }
            let close = seal(&mut ours, ContentType::Alert, &[1, 0]);
            s.read_tls(&mut close.as_slice()).unwrap();
            let state = s.process_new_packets().unwrap();
            assert!(state.peer_has_closed(), "{what}: close_notify");
            tested += 1;
        }
        assert_eq!(tested, 6);
    }

    /// A record that was tampered with, replayed or reordered does not
    /// open; nor does one whose header breaks the rules; more than a
    /// record's plaintext is not sealed.
    #[test]
    fn refuses_tampered_replayed_and_malformed_records() {
        for suite in [
            rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256,
            rustls::crypto::ring::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        ] {
            let (mut ours, mut s) = pair(suite);
            let what = format!("{:?}", suite.suite());
            s.writer().write_all(b"one").unwrap();
            s.writer().write_all(b"two").unwrap();
            let mut wire = Vec::new();
            while s.wants_write() {
                s.write_tls(&mut wire).unwrap();
            }
            let len = ours.next_len(&wire).unwrap().unwrap();
            let first = wire[..len].to_vec();
            let second = wire[len..].to_vec();

            let mut flipped = first.clone();
            flipped[len - 1] ^= 1;
            assert!(
                matches!(ours.open(&mut flipped), Err(RecordError::Decrypt)),
                "{what}: tampered"
            );
            // Out of order: the second record under the first's number.
            let mut early = second.clone();
            assert!(
                matches!(ours.open(&mut early), Err(RecordError::Decrypt)),
                "{what}: reordered"
            );
            let (_, plain) = open_next(&mut ours, &mut first.clone()).unwrap();
            assert_eq!(plain, b"one");
            let mut replay = first.clone();
            assert!(
                matches!(ours.open(&mut replay), Err(RecordError::Decrypt)),
                "{what}: replayed"
            );
            let (_, plain) = open_next(&mut ours, &mut second.clone()).unwrap();
            assert_eq!(plain, b"two");

            let mut bad = first.clone();
            bad[1] = 4;
            assert!(matches!(
                ours.next_len(&bad),
                Err(RecordError::Version(0x0403))
            ));
            assert!(matches!(
                ours.next_len(&[22, 3, 3, 0, 0]),
                Err(RecordError::Empty(22))
            ));
            assert!(matches!(
                ours.next_len(&[23, 3, 3, 0x48, 0x01]),
                Err(RecordError::Overflow(0x4801))
            ));
            assert!(matches!(
                ours.next_len(&[24, 3, 3, 0, 1]),
                Err(RecordError::ContentType(24))
            ));
            assert_eq!(ours.next_len(&first[..len - 1]).unwrap(), None, "partial");
            let big = vec![0u8; MAX_PLAINTEXT + 1];
            let mut out = vec![0u8; big.len() + MAX_OVERHEAD];
            assert!(matches!(
                ours.seal(ContentType::ApplicationData, &big, &mut out),
                Err(RecordError::TooLong(16_385))
            ));
        }
    }

    /// TLS 1.3: every record says "application data" outside; a record
    /// that does not, or whose inner content type is missing, is refused.
    #[test]
    fn tls13_records_carry_their_type_inside() {
        let (mut ours, _) = pair(rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256);
        let mut rec = seal(&mut ours, ContentType::Alert, &[1, 0]);
        assert_eq!(rec[0], 23, "outer type");
        rec[0] = 21;
        assert!(matches!(
            ours.open(&mut rec),
            Err(RecordError::ContentType(21))
        ));
        // A record whose plaintext is all padding: sealed by a layer that
        // sends and receives with one key, as no real peer would.
        let key = || {
            Key::from_secrets(rustls::ConnectionTrafficSecrets::Aes256Gcm {
                key: [7u8; 32].into(),
                iv: rustls::crypto::cipher::Iv::new([9; 12]),
            })
            .unwrap()
        };
        let mut looped = Records {
            tx: key(),
            rx: key(),
            tx_seq: 0,
            rx_seq: 0,
            tx_limit: u64::MAX,
            tls13: true,
        };
        let mut ok = seal(&mut looped, ContentType::ApplicationData, b"x");
        assert_eq!(
            looped.open(&mut ok).unwrap(),
            Opened {
                typ: ContentType::ApplicationData,
                plain: HEADER_LEN..HEADER_LEN + 1
            }
        );
        let mut padding = seal(&mut looped, ContentType::Unknown(0), b"");
        assert!(matches!(
            looped.open(&mut padding),
            Err(RecordError::NoContentType)
        ));
    }
}
