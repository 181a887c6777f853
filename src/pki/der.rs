//! The few DER and base64 encodings the CA loader needs: ring reads private
//! keys as PKCS#8 only, while cluster CAs are usually PKCS#1 (RSA) or SEC1 (EC).

const RSA_ENCRYPTION: &[u8] = &[
    0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01,
];
const DER_NULL: &[u8] = &[0x05, 0x00];
const EC_PUBLIC_KEY: &[u8] = &[0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const PRIME256V1: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const SECP384R1: &[u8] = &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22];

/// One DER TLV.
fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

/// PKCS#8 `PrivateKeyInfo` around a key of the given algorithm.
fn private_key_info(algorithm: &[u8], key: &[u8]) -> Vec<u8> {
    let mut body = tlv(0x02, &[0]);
    body.extend(tlv(0x30, algorithm));
    body.extend(tlv(0x04, key));
    tlv(0x30, &body)
}

/// Wrap a PKCS#1 `RSAPrivateKey`.
pub(super) fn pkcs1_to_pkcs8(pkcs1: &[u8]) -> Vec<u8> {
    private_key_info(&[RSA_ENCRYPTION, DER_NULL].concat(), pkcs1)
}

/// Wrap a SEC1 `ECPrivateKey`; the curve is told by the private key's length
/// (32 bytes: P-256, 48: P-384). `None` for anything else.
pub(super) fn sec1_to_pkcs8(sec1: &[u8]) -> Option<Vec<u8>> {
    let curve = match sec1_private_key_len(sec1)? {
        32 => PRIME256V1,
        48 => SECP384R1,
        _ => return None,
    };
    Some(private_key_info(&[EC_PUBLIC_KEY, curve].concat(), sec1))
}

/// Length of the `privateKey` OCTET STRING of an `ECPrivateKey`.
fn sec1_private_key_len(sec1: &[u8]) -> Option<usize> {
    let (tag, body, _) = read_tlv(sec1)?;
    if tag != 0x30 {
        return None;
    }
    let (tag, _version, rest) = read_tlv(body)?;
    if tag != 0x02 {
        return None;
    }
    let (tag, key, _) = read_tlv(rest)?;
    (tag == 0x04).then_some(key.len())
}

/// (tag, content, rest) of the first TLV.
fn read_tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| acc << 8 | usize::from(*b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// Standard base64 with padding.
pub(super) fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), want);
        }
    }

    #[test]
    fn long_lengths_use_the_long_form() {
        let content = vec![0u8; 300];
        let encoded = tlv(0x04, &content);
        assert_eq!(&encoded[..4], &[0x04, 0x82, 0x01, 0x2c]);
        let (tag, body, rest) = read_tlv(&encoded).unwrap();
        assert_eq!((tag, body.len(), rest.len()), (0x04, 300, 0));
    }
}
