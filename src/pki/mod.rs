//! Certificates (minted by the controller; see issue 6).
