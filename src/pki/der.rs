//! Wrapping PKCS#1 (RSA) and SEC1 (EC) private keys in PKCS#8: rcgen builds
//! a signing key from PKCS#8, while cluster CAs are usually PKCS#1 or SEC1.
//!
//! The DER comes from `asn1-rs`, already in the tree under `x509-parser`:
//! one more direct dependency and no new crate, where RustCrypto's `pkcs8`,
//! `sec1`, `der`, `spki` and `const-oid` would add five for two wrappers.

use std::borrow::Cow;

use asn1_rs::{FromDer, Null, Oid, Sequence, ToDer};

/// `rsaEncryption` (RFC 8017).
const RSA_ENCRYPTION: &[u64] = &[1, 2, 840, 113_549, 1, 1, 1];
/// `id-ecPublicKey` (RFC 5480).
const EC_PUBLIC_KEY: &[u64] = &[1, 2, 840, 10_045, 2, 1];
/// `prime256v1`, P-256.
const PRIME256V1: &[u64] = &[1, 2, 840, 10_045, 3, 1, 7];
/// `secp384r1`, P-384.
const SECP384R1: &[u64] = &[1, 3, 132, 0, 34];

fn oid_der(arcs: &[u64]) -> Vec<u8> {
    Oid::from(arcs)
        .ok()
        .and_then(|oid| oid.to_der_vec().ok())
        .expect("the OIDs above are valid")
}

/// A SEQUENCE of already encoded elements.
fn sequence(elements: &[&[u8]]) -> Vec<u8> {
    Sequence::new(Cow::Owned(elements.concat()))
        .to_der_vec()
        .expect("a SEQUENCE in memory encodes")
}

/// PKCS#8 `PrivateKeyInfo` (RFC 5208): version 0, the algorithm, the key.
fn private_key_info(algorithm: &[u8], key: &[u8]) -> Vec<u8> {
    let version = 0u8.to_der_vec().expect("an INTEGER encodes");
    let key = key.to_der_vec().expect("an OCTET STRING encodes");
    sequence(&[&version, algorithm, &key])
}

/// Wrap a PKCS#1 `RSAPrivateKey`.
pub(super) fn pkcs1_to_pkcs8(pkcs1: &[u8]) -> Vec<u8> {
    let null = Null::new().to_der_vec().expect("NULL encodes");
    private_key_info(&sequence(&[&oid_der(RSA_ENCRYPTION), &null]), pkcs1)
}

/// Wrap a SEC1 `ECPrivateKey`; the curve is told by the private key's length
/// (32 bytes: P-256, 48: P-384). `None` for anything else.
pub(super) fn sec1_to_pkcs8(sec1: &[u8]) -> Option<Vec<u8>> {
    let curve = match sec1_private_key_len(sec1)? {
        32 => PRIME256V1,
        48 => SECP384R1,
        _ => return None,
    };
    let algorithm = sequence(&[&oid_der(EC_PUBLIC_KEY), &oid_der(curve)]);
    Some(private_key_info(&algorithm, sec1))
}

/// Length of the `privateKey` OCTET STRING of an `ECPrivateKey` (RFC 5915:
/// version INTEGER, then privateKey).
fn sec1_private_key_len(sec1: &[u8]) -> Option<usize> {
    let parsed: asn1_rs::ParseResult<'_, usize> = Sequence::from_der_and_then(sec1, |body| {
        let (rest, _version) = u32::from_der(body)?;
        let (rest, key) = <&[u8]>::from_der(rest)?;
        Ok((rest, key.len()))
    });
    parsed.ok().map(|(_, len)| len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rsa_algorithm_identifier_is_the_rfc_8017_bytes() {
        // SEQUENCE { OID 1.2.840.113549.1.1.1, NULL }
        let want = [
            0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05,
            0x00,
        ];
        let null = Null::new().to_der_vec().unwrap();
        assert_eq!(sequence(&[&oid_der(RSA_ENCRYPTION), &null]), want);
    }

    #[test]
    fn long_keys_use_the_long_length_form() {
        let key = vec![0u8; 300];
        let info = pkcs1_to_pkcs8(&key);
        // SEQUENCE, long form on two bytes: 3 (version) + 15 (algorithm) + 4 + 300.
        assert_eq!(&info[..4], &[0x30, 0x82, 0x01, 0x42]);
        assert_eq!(
            &info[info.len() - 304..info.len() - 300],
            &[0x04, 0x82, 0x01, 0x2c]
        );
    }

    #[test]
    fn a_sec1_key_of_an_unknown_length_is_refused() {
        // SEQUENCE { INTEGER 1, OCTET STRING (20 bytes) }
        let mut sec1 = vec![0x30, 0x19, 0x02, 0x01, 0x01, 0x04, 0x14];
        sec1.extend([7u8; 20]);
        assert_eq!(sec1_private_key_len(&sec1), Some(20));
        assert!(sec1_to_pkcs8(&sec1).is_none());
        assert!(sec1_to_pkcs8(b"not DER").is_none());
    }
}
