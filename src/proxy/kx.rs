//! The proxy's X25519 key exchange, computed by aws-lc.
//!
//! Every new pod connection costs one X25519 exchange on the pod's
//! handshake, and every upstream handshake (TLS 1.3, resumed or not) one
//! more. ring's X25519 took ~60 µs per exchange on the bench machine (key
//! generation, public key, agreement), aws-lc's ~32 µs: its x86-64 field
//! arithmetic (s2n-bignum) is about twice as fast: 10-16 % less CPU per new
//! reencrypted connection, measured side by side, for ~0.8 MiB more of the
//! binary's code resident in an idle proxy (docs/proxy.md). Everything else in the
//! proxy's TLS stays on ring, as in the rest of the crate: only this one
//! primitive is plugged in through rustls's provider interface, the way
//! rustls's own providers do it. rustls's `aws_lc_rs` feature is not turned
//! on: with two providers compiled in, rustls no longer picks a process
//! default, which the Kubernetes client relies on.

use std::fmt;

use aws_lc_rs::agreement;
use ring::rand::{SecureRandom, SystemRandom};
use rustls::{
    Error, NamedGroup, PeerMisbehaved,
    crypto::{ActiveKeyExchange, GetRandomFailed, SharedSecret, SupportedKxGroup},
};
use zeroize::Zeroizing;

/// X25519 (RFC 7748) for rustls, backed by aws-lc.
pub static X25519: &dyn SupportedKxGroup = &X25519Group;

struct X25519Group;

impl fmt::Debug for X25519Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("X25519 (aws-lc)")
    }
}

impl SupportedKxGroup for X25519Group {
    fn start(&self) -> Result<Box<dyn ActiveKeyExchange>, Error> {
        // The scalar comes from ring's generator (the OS's, as for every
        // other random value of ours): aws-lc's own generator would keep a
        // DRBG and its code resident, ~0.35 MiB of an idle proxy for no gain.
        let mut scalar = Zeroizing::new([0u8; 32]);
        SystemRandom::new()
            .fill(scalar.as_mut())
            .map_err(|_| GetRandomFailed)?;
        let private = agreement::PrivateKey::from_private_key(&agreement::X25519, scalar.as_ref())
            .map_err(|_| GetRandomFailed)?;
        let public = private.compute_public_key().map_err(|_| GetRandomFailed)?;
        Ok(Box::new(Exchange { private, public }))
    }

    fn name(&self) -> NamedGroup {
        NamedGroup::X25519
    }
}

/// One exchange in flight: our ephemeral key, used once and dropped (aws-lc
/// wipes it when freed).
struct Exchange {
    private: agreement::PrivateKey,
    public: agreement::PublicKey,
}

impl ActiveKeyExchange for Exchange {
    fn complete(self: Box<Self>, peer: &[u8]) -> Result<SharedSecret, Error> {
        // A share of any other length is malformed; aws-lc also refuses the
        // all-zero result of a low-order point (RFC 7748 section 6.1).
        if peer.len() != 32 {
            return Err(PeerMisbehaved::InvalidKeyShare.into());
        }
        let peer = agreement::UnparsedPublicKey::new(&agreement::X25519, peer);
        agreement::agree(
            &self.private,
            peer,
            Error::from(PeerMisbehaved::InvalidKeyShare),
            |secret| Ok(SharedSecret::from(secret)),
        )
    }

    fn pub_key(&self) -> &[u8] {
        self.public.as_ref()
    }

    fn group(&self) -> NamedGroup {
        NamedGroup::X25519
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both ends agree with each other and with ring's X25519 (the
    /// implementation every other rustls peer of ours uses).
    #[test]
    fn agrees_with_ring() {
        let ours = X25519.start().unwrap();
        let theirs = rustls::crypto::ring::kx_group::X25519.start().unwrap();
        let (our_pub, their_pub) = (ours.pub_key().to_vec(), theirs.pub_key().to_vec());
        assert_eq!(our_pub.len(), 32);
        let a = ours.complete(&their_pub).unwrap();
        let b = theirs.complete(&our_pub).unwrap();
        assert_eq!(a.secret_bytes(), b.secret_bytes());
        assert_eq!(X25519.name(), NamedGroup::X25519);
    }

    /// Malformed and low-order peer shares are refused, not agreed on.
    #[test]
    fn refuses_bad_shares() {
        for peer in [vec![9u8; 31], vec![0u8; 32], {
            // u = 1, a point of small order: the shared secret would be all
            // zeros (RFC 7748 section 6.1's check).
            let mut p = vec![0u8; 32];
            p[0] = 1;
            p
        }] {
            let Err(e) = X25519.start().unwrap().complete(&peer) else {
                panic!("agreed with the share {peer:?}");
            };
            assert_eq!(e, Error::from(PeerMisbehaved::InvalidKeyShare), "{peer:?}");
        }
    }
}
