//! The pooled path of a connection: finish the pod's TLS handshake offering
//! `h2` and `http/1.1`, then hand the stream to [`crate::pool`] with
//! a [`pool::Dial`] that reaches the upstream the way every other path does
//! (failover, balancing, health marking).

use std::{future::Future, net::SocketAddr, pin::Pin, sync::Arc};

use tokio::{net::TcpStream, time::Instant};

use super::{accept, dial::connect_tls};
use crate::{
    pool,
    state::{Shared, State},
    tlsio::ServerTls,
};

/// Reaches the upstream for the pool: TLS with the given ALPN.
struct Dialer {
    shared: Arc<Shared>,
    state: Arc<State>,
}

impl pool::Dial for Dialer {
    fn dial(
        &self,
        alpn: &'static [u8],
    ) -> Pin<Box<dyn Future<Output = Option<pool::Dialed>> + Send>> {
        let (shared, state) = (self.shared.clone(), self.state.clone());
        Box::pin(async move {
            let (io, guard) = connect_tls(&shared, &state, &[alpn.to_vec()]).await?;
            Some(pool::Dialed {
                alpn: io.alpn_protocol().map(<[u8]>::to_vec),
                peer: io.tcp().peer_addr().ok(),
                io: Box::new(io),
                hold: Box::new(guard),
            })
        })
    }
}

/// Serve one pod connection whose ClientHello (`hello_bytes`) was read.
pub(super) async fn serve(
    shared: Arc<Shared>,
    state: Arc<State>,
    client: TcpStream,
    peer: SocketAddr,
    hello_bytes: Vec<u8>,
    deadline: Instant,
) {
    let m = &shared.metrics;
    let Some(base) = state.tls.server_for(None) else {
        return;
    };
    let server_cfg = shared.pooled.serving_config(&base);
    // The reencrypt path's TLS stream: its buffers exist only while bytes
    // are in flight, and one TLS server's code runs in the process.
    let accept = Box::pin(ServerTls::accept(server_cfg, client, hello_bytes));
    let Some(down) = accept::within_deadline(m, peer, deadline, accept).await else {
        return;
    };
    let alpn = down.alpn_protocol().map(<[u8]>::to_vec);
    let ctx = pool::Ctx {
        pool: shared.pooled.clone(),
        epoch: Arc::as_ptr(&state) as usize,
        max_connections: state.cfg.pool_max_connections,
        authority: state.cfg.upstream.server_name.as_str().into(),
        idle: state.cfg.timeouts.idle,
        dial: Arc::new(Dialer {
            shared: shared.clone(),
            state,
        }),
    };
    pool::serve(down, alpn, ctx).await;
}
