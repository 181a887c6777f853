//! TLS record protection whose keys take little room while a connection is
//! idle.
//!
//! ring expands an AEAD key when it is made: AES round keys and the GHASH
//! table, 544 bytes whatever the cipher (its key type is sized for the
//! largest). A reencrypted pod connection holds two TLS connections, so four
//! such keys: 2.2 KB of every idle connection, a fifth of what it costs.
//! Here a connection's key is what rustls derived (the key bytes, wiped on
//! drop, and the IV); the expanded form lives in a per-thread cache of the
//! keys in use, made again (~115 ns for AES on the bench machine, once)
//! when a key that was pushed out, or swept away while its connection was
//! quiet, is used again. A worker thread going idle sweeps its cache (at
//! most once a second; health checks and reload polls wake the proxy every
//! few seconds): a connection quiet for a few seconds holds no expanded key.
//!
//! The record formats are rustls's ring provider's, line for line, behind
//! rustls's provider interface (`Tls13AeadAlgorithm`, `Tls12AeadAlgorithm`):
//! during a handshake rustls frames, pads, orders and numbers the records;
//! only where the expanded key is kept differs. After it, the proxy's own
//! record layer ([`super::record`]) seals and opens with the same [`Key`]s.
//! Each key carries a process-unique id that its cache entry must match on
//! every use, so a key can never be confused with another connection's.

use std::{
    cell::RefCell,
    sync::{
        LazyLock,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use ring::aead;
use rustls::{
    CipherSuiteCommon, ConnectionTrafficSecrets, ContentType, Error, ProtocolVersion,
    SupportedCipherSuite, Tls12CipherSuite, Tls13CipherSuite,
    crypto::cipher::{
        AeadKey, InboundOpaqueMessage, InboundPlainMessage, Iv, KeyBlockShape, MessageDecrypter,
        MessageEncrypter, NONCE_LEN, Nonce, OutboundOpaqueMessage, OutboundPlainMessage,
        PrefixedPayload, Tls12AeadAlgorithm, Tls13AeadAlgorithm, UnsupportedOperationError,
        make_tls12_aad, make_tls13_aad,
    },
};
use zeroize::Zeroizing;

/// Expanded keys kept per thread. A reencrypted pod connection uses four
/// (five while its handshakes overlap), so this covers ~100 connections
/// moving bytes at the same moment; beyond that a key is expanded again when
/// its turn comes. At most ~300 KB per thread, and only while that many keys
/// were used in the last second or two (see [`SWEEP_EVERY`]).
const CACHE_SLOTS: usize = 512;

/// How often [`sweep_idle_keys`] looks at a thread's cache: a key unused
/// since the sweep before is freed, so a connection that went quiet stops
/// costing its expanded keys within two of these.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Largest plaintext of a TLS record (RFC 8446 section 5.1).
const MAX_FRAGMENT_LEN: usize = 16_384;

/// TLS 1.2 AES-GCM: the explicit part of the nonce sent in each record.
const GCM_EXPLICIT_NONCE_LEN: usize = 8;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static CACHE: RefCell<Cache> = const { RefCell::new(Cache::new()) };
}

/// The suite with the same parameters as `suite` (one of ring's) whose
/// record protection keeps its keys compact; `suite` itself for one this
/// module does not know.
pub fn compact(suite: SupportedCipherSuite) -> SupportedCipherSuite {
    SUITES
        .iter()
        .find(|s| s.suite() == suite.suite())
        .copied()
        .unwrap_or(suite)
}

/// Free the expanded keys this thread has not used since the previous
/// sweep (at most one sweep per [`SWEEP_EVERY`]). The runtime calls it as
/// its worker threads go idle (`on_thread_park`): idle connections then hold
/// their keys compact only, not in the cache.
pub fn sweep_idle_keys() {
    let _ = CACHE.try_with(|c| {
        if let Ok(mut c) = c.try_borrow_mut() {
            c.sweep(Instant::now());
        }
    });
}

/// ring's suites, each with its AEAD replaced by the compact one: made
/// once per process (and never freed, as rustls wants `'static` suites).
static SUITES: LazyLock<Vec<SupportedCipherSuite>> = LazyLock::new(|| {
    rustls::crypto::ring::ALL_CIPHER_SUITES
        .iter()
        .map(|s| match s {
            SupportedCipherSuite::Tls13(s) => {
                SupportedCipherSuite::Tls13(Box::leak(Box::new(Tls13CipherSuite {
                    common: common(&s.common),
                    aead_alg: tls13_aead(s.common.suite),
                    ..**s
                })))
            }
            SupportedCipherSuite::Tls12(s) => {
                SupportedCipherSuite::Tls12(Box::leak(Box::new(Tls12CipherSuite {
                    common: common(&s.common),
                    aead_alg: tls12_aead(s.common.suite),
                    ..**s
                })))
            }
        })
        .collect()
});

fn common(c: &CipherSuiteCommon) -> CipherSuiteCommon {
    CipherSuiteCommon {
        suite: c.suite,
        hash_provider: c.hash_provider,
        confidentiality_limit: c.confidentiality_limit,
    }
}

fn tls13_aead(suite: rustls::CipherSuite) -> &'static dyn Tls13AeadAlgorithm {
    use rustls::CipherSuite as S;
    match suite {
        S::TLS13_AES_128_GCM_SHA256 => &TLS13_AES_128_GCM,
        S::TLS13_AES_256_GCM_SHA384 => &TLS13_AES_256_GCM,
        _ => &TLS13_CHACHA20_POLY1305,
    }
}

fn tls12_aead(suite: rustls::CipherSuite) -> &'static dyn Tls12AeadAlgorithm {
    use rustls::CipherSuite as S;
    match suite {
        S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 | S::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => {
            &TLS12_AES_128_GCM
        }
        S::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 | S::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => {
            &TLS12_AES_256_GCM
        }
        _ => &TLS12_CHACHA20_POLY1305,
    }
}

// ---------------------------------------------------------------------------
// The key and its cache.

/// A key as rustls derived it (key bytes and IV), expanded only while in
/// the cache. 56 bytes: the encrypter or decrypter rustls boxes around it
/// during a handshake takes 56 bytes of mimalloc, the proxy's allocator,
/// which serves small objects in 8-byte steps. After the handshake the
/// record layer ([`super::record`]) holds its two keys inline.
pub(super) struct Key {
    /// Wiped when dropped.
    bytes: Zeroizing<[u8; 32]>,
    iv: [u8; NONCE_LEN],
    /// Unique in the process; 0 marks a free cache slot.
    id: u64,
    /// Where this key was last expanded in its thread's cache.
    slot: u16,
    alg: Alg,
}

/// The AEADs of TLS's suites.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Alg {
    Aes128Gcm,
    Aes256Gcm,
    Chacha20Poly1305,
}

impl Alg {
    fn ring(self) -> &'static aead::Algorithm {
        match self {
            Alg::Aes128Gcm => &aead::AES_128_GCM,
            Alg::Aes256Gcm => &aead::AES_256_GCM,
            Alg::Chacha20Poly1305 => &aead::CHACHA20_POLY1305,
        }
    }

    fn is_gcm(self) -> bool {
        self != Alg::Chacha20Poly1305
    }

    fn tag_len(self) -> usize {
        self.ring().tag_len()
    }

    fn key_len(self) -> usize {
        self.ring().key_len()
    }

    /// TLS 1.2: nonce bytes sent in each record (RFC 5288's for GCM; none
    /// for ChaCha20-Poly1305, RFC 7905).
    fn explicit_nonce_len(self) -> usize {
        if self.is_gcm() {
            GCM_EXPLICIT_NONCE_LEN
        } else {
            0
        }
    }

    /// The secrets rustls hands out for kernel TLS, in this AEAD's variant.
    fn secrets(self, key: AeadKey, iv: Iv) -> ConnectionTrafficSecrets {
        match self {
            Alg::Aes128Gcm => ConnectionTrafficSecrets::Aes128Gcm { key, iv },
            Alg::Aes256Gcm => ConnectionTrafficSecrets::Aes256Gcm { key, iv },
            Alg::Chacha20Poly1305 => ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv },
        }
    }
}

impl Key {
    /// The key rustls hands over at the end of a handshake (`None`: an
    /// AEAD this module does not know).
    pub(super) fn from_secrets(secrets: ConnectionTrafficSecrets) -> Option<Self> {
        let (alg, key, iv) = match secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (Alg::Aes128Gcm, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (Alg::Aes256Gcm, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (Alg::Chacha20Poly1305, key, iv)
            }
            _ => return None,
        };
        Some(Self::new(alg, key, nonce_base(iv.as_ref())))
    }

    /// Bytes of the authentication tag.
    pub(super) fn tag_len(&self) -> usize {
        self.alg.tag_len()
    }

    /// TLS 1.2: nonce bytes each record carries (8 for GCM, 0 otherwise).
    pub(super) fn explicit_nonce_len(&self) -> usize {
        self.alg.explicit_nonce_len()
    }

    /// TLS 1.3 (RFC 8446 section 5.2): seal record `seq`'s inner plaintext
    /// (data and content type) in place; the tag follows it on the wire.
    pub(super) fn seal_tls13(
        &mut self,
        seq: u64,
        inner: &mut [u8],
    ) -> Result<aead::Tag, ring::error::Unspecified> {
        let nonce = aead::Nonce::assume_unique_for_key(self.nonce(seq));
        let aad = aead::Aad::from(make_tls13_aad(inner.len() + self.tag_len()));
        self.with(|k| k.seal_in_place_separate_tag(nonce, aad, inner))
    }

    /// TLS 1.3: open record `seq`'s body (ciphertext and tag) in place;
    /// returns the length of its inner plaintext (data, content type,
    /// padding).
    pub(super) fn open_tls13(
        &mut self,
        seq: u64,
        body: &mut [u8],
    ) -> Result<usize, ring::error::Unspecified> {
        let nonce = aead::Nonce::assume_unique_for_key(self.nonce(seq));
        let aad = aead::Aad::from(make_tls13_aad(body.len()));
        self.with(|k| k.open_in_place(nonce, aad, body).map(|p| p.len()))
    }

    /// TLS 1.2 (RFC 5246 section 6.2.3.3): seal record `seq`, whose `body`
    /// is room for the explicit nonce ([`Self::explicit_nonce_len`] bytes,
    /// written here: GCM sends the nonce's last 8) followed by the
    /// plaintext, encrypted in place; the tag follows it on the wire.
    pub(super) fn seal_tls12(
        &mut self,
        seq: u64,
        typ: ContentType,
        version: ProtocolVersion,
        body: &mut [u8],
    ) -> Result<aead::Tag, ring::error::Unspecified> {
        let nonce = self.nonce(seq);
        let (explicit, data) = body.split_at_mut(self.explicit_nonce_len());
        explicit.copy_from_slice(&nonce[NONCE_LEN - explicit.len()..]);
        let aad = aead::Aad::from(make_tls12_aad(seq, typ, version, data.len()));
        let nonce = aead::Nonce::assume_unique_for_key(nonce);
        self.with(|k| k.seal_in_place_separate_tag(nonce, aad, data))
    }

    /// TLS 1.2: open record `seq`'s body (explicit nonce, ciphertext, tag;
    /// at least [`Self::explicit_nonce_len`] + [`Self::tag_len`] bytes) in
    /// place; the plaintext is moved to the body's start and its length
    /// returned.
    pub(super) fn open_tls12(
        &mut self,
        seq: u64,
        typ: ContentType,
        version: ProtocolVersion,
        body: &mut [u8],
    ) -> Result<usize, ring::error::Unspecified> {
        let explicit = self.explicit_nonce_len();
        let nonce = aead::Nonce::assume_unique_for_key(self.tls12_rx_nonce(body, seq));
        let plain_len = body.len() - explicit - self.tag_len();
        let aad = aead::Aad::from(make_tls12_aad(seq, typ, version, plain_len));
        self.with(|k| k.open_within(nonce, aad, body, explicit..).map(|p| p.len()))
    }

    /// TLS 1.2: the nonce of a received record, whose GCM nonce is the
    /// salt and the record's explicit part (RFC 5288); for
    /// ChaCha20-Poly1305 the IV xor the sequence number (RFC 7905).
    fn tls12_rx_nonce(&self, explicit: &[u8], seq: u64) -> [u8; NONCE_LEN] {
        if self.alg.is_gcm() {
            let mut nonce = [0u8; NONCE_LEN];
            nonce[..4].copy_from_slice(&self.iv[..4]);
            nonce[4..].copy_from_slice(&explicit[..GCM_EXPLICIT_NONCE_LEN]);
            nonce
        } else {
            self.nonce(seq)
        }
    }

    fn new(alg: Alg, key: AeadKey, iv: [u8; NONCE_LEN]) -> Self {
        let mut bytes = Zeroizing::new([0u8; 32]);
        let key = key.as_ref();
        bytes[..key.len()].copy_from_slice(key);
        Self {
            bytes,
            iv,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            slot: u16::MAX,
            alg,
        }
    }

    /// The nonce of record `seq`: the IV xor the sequence number.
    fn nonce(&self, seq: u64) -> [u8; NONCE_LEN] {
        Nonce::new(&Iv::new(self.iv), seq).0
    }

    /// Run `f` with the expanded key.
    fn with<R>(&mut self, f: impl FnOnce(&aead::LessSafeKey) -> R) -> R {
        CACHE.with(|c| f(c.borrow_mut().expanded(self)))
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        // Its slot is free for the next key (when dropped on the thread that
        // last used it; elsewhere it is pushed out or swept in time). During
        // thread teardown the cache may be gone already.
        let _ = CACHE.try_with(|c| {
            if let Ok(mut c) = c.try_borrow_mut() {
                c.release(self);
            }
        });
    }
}

struct Slot {
    id: u64,
    /// Used since the clock hand last passed.
    referenced: bool,
    key: Option<Box<aead::LessSafeKey>>,
}

/// Expanded keys by slot; a slot is reused by the CLOCK rule (an
/// approximation of least recently used that costs one flag per use).
struct Cache {
    slots: Vec<Slot>,
    free: Vec<u16>,
    hand: usize,
    last_sweep: Option<Instant>,
}

impl Cache {
    const fn new() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            hand: 0,
            last_sweep: None,
        }
    }

    fn expanded(&mut self, key: &mut Key) -> &aead::LessSafeKey {
        let hit = self
            .slots
            .get(key.slot as usize)
            .is_some_and(|s| s.id == key.id);
        let i = if hit {
            key.slot as usize
        } else {
            let i = self.victim();
            // rustls derives keys of the length the suite declares.
            let bytes = &key.bytes[..key.alg.key_len()];
            let unbound =
                aead::UnboundKey::new(key.alg.ring(), bytes).expect("key length is the suite's");
            let expanded = aead::LessSafeKey::new(unbound);
            let s = &mut self.slots[i];
            s.id = key.id;
            match &mut s.key {
                Some(b) => **b = expanded,
                None => s.key = Some(Box::new(expanded)),
            }
            key.slot = i as u16;
            i
        };
        let s = &mut self.slots[i];
        s.referenced = true;
        s.key.as_deref().expect("an occupied slot holds its key")
    }

    fn victim(&mut self) -> usize {
        if let Some(i) = self.free.pop() {
            return i as usize;
        }
        if self.slots.len() < CACHE_SLOTS {
            self.slots.push(Slot {
                id: 0,
                referenced: false,
                key: None,
            });
            return self.slots.len() - 1;
        }
        loop {
            let i = self.hand;
            self.hand = (self.hand + 1) % self.slots.len();
            let s = &mut self.slots[i];
            if !std::mem::take(&mut s.referenced) {
                return i;
            }
        }
    }

    /// Free every expanded key not used since the last sweep; the others
    /// lose their mark and go at the next one unless used again.
    fn sweep(&mut self, now: Instant) {
        if self
            .last_sweep
            .is_some_and(|t| now.saturating_duration_since(t) < SWEEP_EVERY)
        {
            return;
        }
        self.last_sweep = Some(now);
        for (i, s) in self.slots.iter_mut().enumerate() {
            if s.key.is_none() || std::mem::take(&mut s.referenced) {
                continue;
            }
            if s.id != 0 {
                self.free.push(i as u16);
            }
            s.id = 0;
            s.key = None;
        }
    }

    /// A dropped key's slot is free for the next key; its allocation is
    /// kept for that key (a handshake replaces keys several times), and
    /// freed by the next sweep if none came.
    fn release(&mut self, key: &Key) {
        if let Some(s) = self.slots.get_mut(key.slot as usize)
            && s.id == key.id
        {
            s.id = 0;
            s.referenced = false;
            self.free.push(key.slot);
        }
    }

    /// Keys held expanded, and allocations held (theirs and free ones').
    #[cfg(test)]
    fn held(&self) -> (usize, usize) {
        let live = self.slots.iter().filter(|s| s.id != 0).count();
        let boxes = self.slots.iter().filter(|s| s.key.is_some()).count();
        (live, boxes)
    }
}

/// An IV of up to 12 bytes, zero-padded to 12.
fn nonce_base(iv: &[u8]) -> [u8; NONCE_LEN] {
    let mut base = [0; NONCE_LEN];
    base[..iv.len()].copy_from_slice(iv);
    base
}

// ---------------------------------------------------------------------------
// TLS 1.3 (RFC 8446 section 5.2): nonce = IV xor sequence number, the
// content type inside the encrypted payload.

struct Tls13Aead {
    alg: Alg,
}

static TLS13_AES_128_GCM: Tls13Aead = Tls13Aead {
    alg: Alg::Aes128Gcm,
};
static TLS13_AES_256_GCM: Tls13Aead = Tls13Aead {
    alg: Alg::Aes256Gcm,
};
static TLS13_CHACHA20_POLY1305: Tls13Aead = Tls13Aead {
    alg: Alg::Chacha20Poly1305,
};

impl Tls13AeadAlgorithm for Tls13Aead {
    fn encrypter(&self, key: AeadKey, iv: Iv) -> Box<dyn MessageEncrypter> {
        Box::new(Tls13Encrypter {
            key: Key::new(self.alg, key, nonce_base(iv.as_ref())),
        })
    }

    fn decrypter(&self, key: AeadKey, iv: Iv) -> Box<dyn MessageDecrypter> {
        Box::new(Tls13Decrypter {
            key: Key::new(self.alg, key, nonce_base(iv.as_ref())),
        })
    }

    fn key_len(&self) -> usize {
        self.alg.key_len()
    }

    fn extract_keys(
        &self,
        key: AeadKey,
        iv: Iv,
    ) -> Result<ConnectionTrafficSecrets, UnsupportedOperationError> {
        Ok(self.alg.secrets(key, iv))
    }

    fn fips(&self) -> bool {
        false
    }
}

struct Tls13Encrypter {
    key: Key,
}

impl MessageEncrypter for Tls13Encrypter {
    fn encrypt(
        &mut self,
        msg: OutboundPlainMessage<'_>,
        seq: u64,
    ) -> Result<OutboundOpaqueMessage, Error> {
        let total_len = self.encrypted_payload_len(msg.payload.len());
        let mut payload = PrefixedPayload::with_capacity(total_len);
        payload.extend_from_chunks(&msg.payload);
        payload.extend_from_slice(&[u8::from(msg.typ)]);
        let tag = self
            .key
            .seal_tls13(seq, payload.as_mut())
            .map_err(|_| Error::EncryptError)?;
        payload.extend_from_slice(tag.as_ref());
        Ok(OutboundOpaqueMessage::new(
            ContentType::ApplicationData,
            ProtocolVersion::TLSv1_2,
            payload,
        ))
    }

    fn encrypted_payload_len(&self, payload_len: usize) -> usize {
        payload_len + 1 + self.key.alg.tag_len()
    }
}

struct Tls13Decrypter {
    key: Key,
}

impl MessageDecrypter for Tls13Decrypter {
    fn decrypt<'a>(
        &mut self,
        mut msg: InboundOpaqueMessage<'a>,
        seq: u64,
    ) -> Result<InboundPlainMessage<'a>, Error> {
        let payload = &mut msg.payload;
        if payload.len() < self.key.alg.tag_len() {
            return Err(Error::DecryptError);
        }
        let plain_len = self
            .key
            .open_tls13(seq, payload)
            .map_err(|_| Error::DecryptError)?;
        payload.truncate(plain_len);
        msg.into_tls13_unpadded_message()
    }
}

// ---------------------------------------------------------------------------
// TLS 1.2: AES-GCM (RFC 5288: 4-byte salt + 8-byte explicit nonce sent in
// each record) and ChaCha20-Poly1305 (RFC 7905: IV xor sequence number).

struct Tls12Aead {
    alg: Alg,
}

static TLS12_AES_128_GCM: Tls12Aead = Tls12Aead {
    alg: Alg::Aes128Gcm,
};
static TLS12_AES_256_GCM: Tls12Aead = Tls12Aead {
    alg: Alg::Aes256Gcm,
};
static TLS12_CHACHA20_POLY1305: Tls12Aead = Tls12Aead {
    alg: Alg::Chacha20Poly1305,
};

impl Tls12Aead {
    /// The 12-byte nonce base: salt and first explicit nonce for GCM, the
    /// whole IV for ChaCha20-Poly1305.
    fn iv(&self, write_iv: &[u8], explicit: &[u8]) -> [u8; NONCE_LEN] {
        let mut iv = [0; NONCE_LEN];
        if self.alg.is_gcm() {
            iv[..4].copy_from_slice(write_iv);
            iv[4..].copy_from_slice(explicit);
        } else {
            iv.copy_from_slice(write_iv);
        }
        iv
    }
}

impl Tls12AeadAlgorithm for Tls12Aead {
    fn encrypter(&self, key: AeadKey, iv: &[u8], extra: &[u8]) -> Box<dyn MessageEncrypter> {
        Box::new(Tls12Encrypter {
            key: Key::new(self.alg, key, self.iv(iv, extra)),
        })
    }

    fn decrypter(&self, key: AeadKey, iv: &[u8]) -> Box<dyn MessageDecrypter> {
        // GCM: the 4-byte salt (the rest comes with each record).
        Box::new(Tls12Decrypter {
            key: Key::new(self.alg, key, nonce_base(iv)),
        })
    }

    fn key_block_shape(&self) -> KeyBlockShape {
        let explicit_nonce_len = self.alg.explicit_nonce_len();
        KeyBlockShape {
            enc_key_len: self.alg.key_len(),
            fixed_iv_len: NONCE_LEN - explicit_nonce_len,
            explicit_nonce_len,
        }
    }

    fn extract_keys(
        &self,
        key: AeadKey,
        iv: &[u8],
        explicit: &[u8],
    ) -> Result<ConnectionTrafficSecrets, UnsupportedOperationError> {
        Ok(self.alg.secrets(key, Iv::new(self.iv(iv, explicit))))
    }

    fn fips(&self) -> bool {
        false
    }
}

struct Tls12Encrypter {
    key: Key,
}

impl MessageEncrypter for Tls12Encrypter {
    fn encrypt(
        &mut self,
        msg: OutboundPlainMessage<'_>,
        seq: u64,
    ) -> Result<OutboundOpaqueMessage, Error> {
        let total_len = self.encrypted_payload_len(msg.payload.len());
        let mut payload = PrefixedPayload::with_capacity(total_len);
        // Room for the explicit nonce, written by the seal.
        payload.extend_from_slice(&[0; GCM_EXPLICIT_NONCE_LEN][..self.key.explicit_nonce_len()]);
        payload.extend_from_chunks(&msg.payload);
        let tag = self
            .key
            .seal_tls12(seq, msg.typ, msg.version, payload.as_mut())
            .map_err(|_| Error::EncryptError)?;
        payload.extend_from_slice(tag.as_ref());
        Ok(OutboundOpaqueMessage::new(msg.typ, msg.version, payload))
    }

    fn encrypted_payload_len(&self, payload_len: usize) -> usize {
        payload_len + self.key.alg.explicit_nonce_len() + self.key.alg.tag_len()
    }
}

struct Tls12Decrypter {
    key: Key,
}

impl MessageDecrypter for Tls12Decrypter {
    fn decrypt<'a>(
        &mut self,
        mut msg: InboundOpaqueMessage<'a>,
        seq: u64,
    ) -> Result<InboundPlainMessage<'a>, Error> {
        if msg.payload.len() < self.key.explicit_nonce_len() + self.key.tag_len() {
            return Err(Error::DecryptError);
        }
        let (typ, version) = (msg.typ, msg.version);
        let payload = &mut msg.payload;
        let plain_len = self
            .key
            .open_tls12(seq, typ, version, payload)
            .map_err(|_| Error::DecryptError)?;
        if plain_len > MAX_FRAGMENT_LEN {
            return Err(Error::PeerSentOversizedRecord);
        }
        payload.truncate(plain_len);
        Ok(msg.into_plain_message())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use rustls::{
        CipherSuite, ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection,
        crypto::{CryptoProvider, cipher::OutboundChunks},
        pki_types::{PrivateKeyDer, ServerName},
    };

    use super::*;

    fn ring_suite(id: CipherSuite) -> SupportedCipherSuite {
        *rustls::crypto::ring::ALL_CIPHER_SUITES
            .iter()
            .find(|s| s.suite() == id)
            .unwrap()
    }

    /// Both ends of one direction of a connection: an encrypter and the
    /// decrypter of the same key.
    type Pair = (Box<dyn MessageEncrypter>, Box<dyn MessageDecrypter>);

    /// The record layer of `suite` for one 32-byte key (rustls derives the
    /// 16-byte keys of AES-128 itself: those are covered by the connection
    /// test below).
    fn pair(suite: SupportedCipherSuite, key: [u8; 32], iv: [u8; 12]) -> Pair {
        match suite {
            SupportedCipherSuite::Tls13(s) => (
                s.aead_alg.encrypter(AeadKey::from(key), Iv::new(iv)),
                s.aead_alg.decrypter(AeadKey::from(key), Iv::new(iv)),
            ),
            SupportedCipherSuite::Tls12(s) => {
                let fixed = s.aead_alg.key_block_shape().fixed_iv_len;
                (
                    s.aead_alg
                        .encrypter(AeadKey::from(key), &iv[..fixed], &iv[fixed..]),
                    s.aead_alg.decrypter(AeadKey::from(key), &iv[..fixed]),
                )
            }
        }
    }

    fn seal(e: &mut dyn MessageEncrypter, data: &[u8], seq: u64) -> Vec<u8> {
        let msg = OutboundPlainMessage {
            typ: ContentType::ApplicationData,
            version: ProtocolVersion::TLSv1_2,
            payload: OutboundChunks::Single(data),
        };
        // The record without its 5-byte header.
        e.encrypt(msg, seq).unwrap().encode()[5..].to_vec()
    }

    fn open(d: &mut dyn MessageDecrypter, mut record: Vec<u8>, seq: u64) -> Result<Vec<u8>, Error> {
        let msg = InboundOpaqueMessage::new(
            ContentType::ApplicationData,
            ProtocolVersion::TLSv1_2,
            &mut record,
        );
        d.decrypt(msg, seq).map(|m| m.payload.to_vec())
    }

    const WIDE_KEY_SUITES: [CipherSuite; 4] = [
        CipherSuite::TLS13_AES_256_GCM_SHA384,
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ];

    /// Every suite ring offers has its compact counterpart, with the same
    /// parameters and another record layer.
    #[test]
    fn every_ring_suite_is_replaced() {
        for &s in rustls::crypto::ring::ALL_CIPHER_SUITES {
            let c = compact(s);
            assert_eq!(c.suite(), s.suite());
            let (ours, theirs): (*const u8, *const u8) = match (c, s) {
                (SupportedCipherSuite::Tls13(c), SupportedCipherSuite::Tls13(s)) => {
                    assert!(std::ptr::addr_eq(c.hkdf_provider, s.hkdf_provider));
                    assert_eq!(
                        c.common.confidentiality_limit,
                        s.common.confidentiality_limit
                    );
                    (
                        c.aead_alg as *const _ as *const u8,
                        s.aead_alg as *const _ as *const u8,
                    )
                }
                (SupportedCipherSuite::Tls12(c), SupportedCipherSuite::Tls12(s)) => {
                    assert_eq!(c.sign, s.sign);
                    (
                        c.aead_alg as *const _ as *const u8,
                        s.aead_alg as *const _ as *const u8,
                    )
                }
                _ => panic!("{:?} changed version", s.suite()),
            };
            assert_ne!(ours, theirs, "{:?}", s.suite());
        }
    }

    /// Our records are byte for byte ring's provider's, and each side opens
    /// the other's; a record changed in one bit, or opened as the wrong
    /// sequence number, is refused.
    #[test]
    fn records_match_rings_provider() {
        for id in WIDE_KEY_SUITES {
            let (key, iv) = ([0x42; 32], [7; 12]);
            let (mut our_e, mut our_d) = pair(compact(ring_suite(id)), key, iv);
            let (mut ring_e, mut ring_d) = pair(ring_suite(id), key, iv);
            for (seq, len) in [(0u64, 0usize), (1, 1), (2, 300), (7, 16_384)] {
                let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
                let ours = seal(our_e.as_mut(), &data, seq);
                let theirs = seal(ring_e.as_mut(), &data, seq);
                assert_eq!(ours, theirs, "{id:?} seq {seq}");
                assert_eq!(open(our_d.as_mut(), theirs, seq).unwrap(), data);
                assert_eq!(open(ring_d.as_mut(), ours.clone(), seq).unwrap(), data);
                let mut bad = ours.clone();
                let last = bad.len() - 1;
                bad[last] ^= 1;
                assert_eq!(open(our_d.as_mut(), bad, seq), Err(Error::DecryptError));
                assert_eq!(
                    open(our_d.as_mut(), ours, seq + 1),
                    Err(Error::DecryptError),
                    "{id:?}"
                );
            }
        }
    }

    /// Keys beyond the cache's size take turns in it and stay correct (each
    /// record still equals ring's); the slots of dropped keys are reused,
    /// and swept away when no key comes for them.
    #[test]
    fn keys_beyond_the_cache_stay_correct() {
        let id = CipherSuite::TLS13_AES_256_GCM_SHA384;
        let n = 3 * CACHE_SLOTS;
        let key = |i: usize| {
            let mut k = [0u8; 32];
            k[..8].copy_from_slice(&(i as u64).to_le_bytes());
            k
        };
        let mut ours: Vec<Pair> = (0..n)
            .map(|i| pair(compact(ring_suite(id)), key(i), [1; 12]))
            .collect();
        let mut ring: Vec<Pair> = (0..n)
            .map(|i| pair(ring_suite(id), key(i), [1; 12]))
            .collect();
        for round in 0..3u64 {
            for i in 0..n {
                let data = format!("key {i} round {round}");
                let sealed = seal(ours[i].0.as_mut(), data.as_bytes(), round);
                assert_eq!(sealed, seal(ring[i].0.as_mut(), data.as_bytes(), round));
                let opened = open(ours[i].1.as_mut(), sealed, round).unwrap();
                assert_eq!(opened, data.as_bytes());
            }
            let (live, _) = CACHE.with(|c| c.borrow().held());
            assert_eq!(live, CACHE_SLOTS, "round {round}");
        }
        ours.clear();
        ring.clear();
        let (live, boxes) = CACHE.with(|c| c.borrow().held());
        assert_eq!((live, boxes), (0, CACHE_SLOTS), "kept for the next keys");
        // Two sweeps later the memory is gone too.
        let t = Instant::now();
        CACHE.with(|c| c.borrow_mut().sweep(t));
        CACHE.with(|c| c.borrow_mut().sweep(t + SWEEP_EVERY));
        assert_eq!(CACHE.with(|c| c.borrow().held()), (0, 0));
    }

    /// A sweep frees the keys unused since the previous one, at most once
    /// per interval; a key used in between survives, and a freed key is
    /// expanded again, correctly, when it is used after all.
    #[test]
    fn sweeps_free_the_keys_of_quiet_connections() {
        let id = CipherSuite::TLS13_CHACHA20_POLY1305_SHA256;
        let mut busy = pair(compact(ring_suite(id)), [1; 32], [0; 12]);
        let mut quiet = pair(compact(ring_suite(id)), [2; 32], [0; 12]);
        let mut ring_quiet = pair(ring_suite(id), [2; 32], [0; 12]);
        seal(busy.0.as_mut(), b"x", 0);
        seal(quiet.0.as_mut(), b"x", 0);
        let held = || CACHE.with(|c| c.borrow().held().1);
        let sweep = |t| CACHE.with(|c| c.borrow_mut().sweep(t));
        assert_eq!(held(), 2);
        let t0 = Instant::now();
        sweep(t0);
        assert_eq!(held(), 2, "both were used before the first sweep");
        seal(busy.0.as_mut(), b"x", 1);
        sweep(t0 + SWEEP_EVERY / 2);
        assert_eq!(held(), 2, "a second sweep within the interval does nothing");
        sweep(t0 + SWEEP_EVERY);
        assert_eq!(held(), 1, "the quiet key is freed, the busy one kept");
        let again = seal(quiet.0.as_mut(), b"later", 1);
        seal(ring_quiet.0.as_mut(), b"x", 0);
        assert_eq!(again, seal(ring_quiet.0.as_mut(), b"later", 1));
        assert_eq!(held(), 2);
        drop((busy, quiet));
        sweep(t0 + 2 * SWEEP_EVERY);
        assert_eq!(held(), 0);
    }

    /// What an idle connection keeps of a key: the encrypter rustls boxes.
    #[test]
    fn a_key_is_small() {
        // Four per reencrypted connection, each in a box of its own.
        assert!(std::mem::size_of::<Tls13Encrypter>() <= 56);
        assert!(std::mem::size_of::<Tls12Decrypter>() <= 56);
        assert!(std::mem::size_of::<aead::LessSafeKey>() >= 500);
    }

    /// Carry every record `from` has to send to `to`, and what `to`
    /// decrypts into `got`.
    pub(crate) fn pump<A, B>(
        from: &mut rustls::ConnectionCommon<A>,
        to: &mut rustls::ConnectionCommon<B>,
        got: &mut Vec<u8>,
    ) {
        let mut wire = Vec::new();
        while from.wants_write() {
            from.write_tls(&mut wire).unwrap();
        }
        let mut rd = wire.as_slice();
        while !rd.is_empty() {
            to.read_tls(&mut rd).unwrap();
            to.process_new_packets().unwrap();
            let _ = std::io::Read::read_to_end(&mut to.reader(), got);
        }
    }

    fn only(suite: SupportedCipherSuite, ours: bool) -> Arc<CryptoProvider> {
        let mut p = rustls::crypto::ring::default_provider();
        p.cipher_suites = vec![if ours { compact(suite) } else { suite }];
        Arc::new(p)
    }

    /// Whole TLS connections in every suite of an ECDSA certificate, both
    /// TLS versions, with ring's provider on the other end (as a client,
    /// then as a server): handshake, then application data both ways.
    #[test]
    fn connections_with_rings_provider_in_every_suite() {
        let cert = rcgen::generate_simple_self_signed(vec!["api.example.com".into()]).unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(cert.cert.der().clone()).unwrap();
        let key = PrivateKeyDer::try_from(cert.signing_key.serialize_der()).unwrap();
        let suites = rustls::crypto::ring::ALL_CIPHER_SUITES
            .iter()
            .filter(|s| !format!("{:?}", s.suite()).contains("_RSA_"));
        let mut tested = 0;
        for &suite in suites {
            for ours_serve in [true, false] {
                let version = match suite {
                    SupportedCipherSuite::Tls13(_) => &rustls::version::TLS13,
                    SupportedCipherSuite::Tls12(_) => &rustls::version::TLS12,
                };
                let server = ServerConfig::builder_with_provider(only(suite, ours_serve))
                    .with_protocol_versions(&[version])
                    .unwrap()
                    .with_no_client_auth()
                    .with_single_cert(vec![cert.cert.der().clone()], key.clone_key())
                    .unwrap();
                let client = ClientConfig::builder_with_provider(only(suite, !ours_serve))
                    .with_protocol_versions(&[version])
                    .unwrap()
                    .with_root_certificates(roots.clone())
                    .with_no_client_auth();
                let name = ServerName::try_from("api.example.com").unwrap();
                let mut c = ClientConnection::new(Arc::new(client), name).unwrap();
                let mut s = ServerConnection::new(Arc::new(server)).unwrap();
                let request = vec![b'q'; 20_000];
                let response = vec![b'r'; 40_000];
                std::io::Write::write_all(&mut c.writer(), &request).unwrap();
                let (mut got_req, mut got_resp) = (Vec::new(), Vec::new());
                let mut responded = false;
                for _ in 0..100 {
                    pump(&mut c, &mut s, &mut got_req);
                    if got_req.len() == request.len() && !responded {
                        std::io::Write::write_all(&mut s.writer(), &response).unwrap();
                        responded = true;
                    }
                    pump(&mut s, &mut c, &mut got_resp);
                    if got_resp.len() == response.len() {
                        break;
                    }
                }
                assert_eq!(c.negotiated_cipher_suite().unwrap().suite(), suite.suite());
                let what = format!("{:?}, ours serving: {ours_serve}", suite.suite());
                assert!(got_req == request, "{what}: {} bytes came", got_req.len());
                assert!(
                    got_resp == response,
                    "{what}: {} bytes came",
                    got_resp.len()
                );
                tested += 1;
            }
        }
        assert_eq!(tested, 12);
    }
}
