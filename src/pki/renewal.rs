//! Whether a proxy certificate in a workload cluster can stay or must be
//! minted again, and why: a decision apart from minting, so it has its own
//! file.

use std::{fmt, time::SystemTime};

use x509_parser::{certificate::X509Certificate, prelude::FromDer};

use super::ca::{
    CertificateAuthority, LeafSpec, cert_sans, first_certificate, from_unix, renew_at, rfc3339,
};

/// Whether a certificate can stay, and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renewal {
    /// Keep it; re-check (at the latest) at `renew_at`.
    Valid {
        /// Two thirds into the certificate's life.
        renew_at: SystemTime,
    },
    /// Mint a new one now.
    Due(RenewReason),
}

/// Why a certificate must be re-minted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenewReason {
    /// No certificate, or not one we can read.
    Unparsable(String),
    /// Not signed by the given CA: the CA rotated, or someone else issued it.
    OtherIssuer,
    /// Its names are not the ones wanted (domain, service IP or advertise address changed).
    SansDiffer {
        /// Wanted but absent (`DNS:x`, `IP:y`).
        missing: Vec<String>,
        /// Present but not wanted.
        unexpected: Vec<String>,
    },
    /// Its validity starts in the future (it was minted by a clock far ahead).
    NotYetValid {
        /// Start of validity.
        not_before: SystemTime,
    },
    /// Two thirds of its life have passed (or all of it).
    LifeElapsed {
        /// Two thirds into its life.
        renew_at: SystemTime,
        /// End of validity.
        not_after: SystemTime,
    },
}

impl fmt::Display for RenewReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RenewReason::Unparsable(why) => write!(f, "the certificate is unreadable: {why}"),
            RenewReason::OtherIssuer => {
                f.write_str("the certificate is not signed by the cluster CA (rotated CA?)")
            }
            RenewReason::SansDiffer {
                missing,
                unexpected,
            } => write!(
                f,
                "the certificate's names differ: missing [{}], unexpected [{}]",
                missing.join(", "),
                unexpected.join(", ")
            ),
            RenewReason::NotYetValid { not_before } => {
                write!(
                    f,
                    "the certificate is not valid before {}",
                    rfc3339(*not_before)
                )
            }
            RenewReason::LifeElapsed {
                renew_at,
                not_after,
            } => write!(
                f,
                "two thirds of the certificate's life have passed (renew at {}, expires {})",
                rfc3339(*renew_at),
                rfc3339(*not_after)
            ),
        }
    }
}

/// Decide whether `cert_pem` (the `tls.crt` in the workload cluster) can stay:
/// it must parse, be signed by `ca`, carry exactly the SANs of `spec`, and be
/// less than two thirds into its life at `now`. `spec.now` is not used.
pub fn renewal_due(
    cert_pem: &str,
    now: SystemTime,
    ca: &CertificateAuthority,
    spec: &LeafSpec,
) -> Renewal {
    let der = match first_certificate(cert_pem) {
        Ok(der) => der,
        Err(why) => return Renewal::Due(RenewReason::Unparsable(why)),
    };
    let cert = match X509Certificate::from_der(&der) {
        Ok((_, cert)) => cert,
        Err(e) => return Renewal::Due(RenewReason::Unparsable(format!("not X.509: {e}"))),
    };
    let (_, ca_cert) =
        X509Certificate::from_der(&ca.cert_der).expect("the CA parsed when it was loaded");
    let signed_by_ca = cert.issuer().as_raw() == ca_cert.subject().as_raw()
        && cert.verify_signature(Some(ca_cert.public_key())).is_ok();
    if !signed_by_ca {
        return Renewal::Due(RenewReason::OtherIssuer);
    }
    let have = match cert_sans(&cert) {
        Ok(sans) => sans,
        Err(why) => return Renewal::Due(RenewReason::Unparsable(why)),
    };
    let want = spec.sans();
    if have != want {
        let missing = want.iter().filter(|s| !have.contains(s)).cloned().collect();
        let unexpected = have.iter().filter(|s| !want.contains(s)).cloned().collect();
        return Renewal::Due(RenewReason::SansDiffer {
            missing,
            unexpected,
        });
    }
    let not_before = from_unix(cert.validity().not_before.timestamp());
    let not_after = from_unix(cert.validity().not_after.timestamp());
    if now < not_before {
        return Renewal::Due(RenewReason::NotYetValid { not_before });
    }
    let renew = renew_at(not_before, not_after);
    if now >= renew {
        return Renewal::Due(RenewReason::LifeElapsed {
            renew_at: renew,
            not_after,
        });
    }
    Renewal::Valid { renew_at: renew }
}
