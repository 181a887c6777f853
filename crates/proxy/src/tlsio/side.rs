//! The two sides of rustls's unbuffered API, server and client, behind one
//! trait, so that one state machine ([`TlsIo`](super::TlsIo)) drives both.

use std::ops::DerefMut;

use rustls::{
    client::{ClientConnectionData, UnbufferedClientConnection},
    server::{ServerConnectionData, UnbufferedServerConnection},
    unbuffered::{UnbufferedConnectionCommon, UnbufferedStatus},
};

/// The two kinds of unbuffered connection, driven by the same code.
pub trait Side: DerefMut<Target = UnbufferedConnectionCommon<Self::Data>> + Unpin {
    /// rustls's per-side connection data.
    type Data;
    /// Process the records of `incoming` (see rustls's `process_tls_records`).
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self::Data>;
}

// rustls implements `process_tls_records` once per side, not generically.
macro_rules! side {
    ($conn:ty, $data:ty) => {
        impl Side for $conn {
            type Data = $data;
            fn process<'c, 'i>(
                &'c mut self,
                incoming: &'i mut [u8],
            ) -> UnbufferedStatus<'c, 'i, $data> {
                (**self).process_tls_records(incoming)
            }
        }
    };
}
side!(UnbufferedServerConnection, ServerConnectionData);
side!(UnbufferedClientConnection, ClientConnectionData);
