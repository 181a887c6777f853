//! Tests of the TLS stream against itself and against rustls's buffered
//! connections (tokio-rustls): data, resumption, key updates, and the
//! failures a hostile peer can cause.

use super::*;
use std::time::Duration;

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
};

/// A CA-less pair: the client trusts the server's self-signed leaf.
fn configs() -> (Arc<ServerConfig>, Arc<ClientConfig>) {
    configs_for(rustls::DEFAULT_VERSIONS)
}

/// `configs()` speaking only `versions`.
fn configs_for(
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> (Arc<ServerConfig>, Arc<ClientConfig>) {
    let (mut server, client) = crate::tls::test_pair(versions, versions);
    server.send_tls13_tickets = 2;
    (Arc::new(server), Arc::new(client))
}

async fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap());
    let (c, s) = tokio::join!(c, l.accept());
    (c.unwrap(), s.unwrap().0)
}

fn name() -> ServerName<'static> {
    ServerName::try_from("api.example.com").unwrap()
}

/// Our server and our client: data both ways, records larger than one
/// read, a reader with a tiny buffer, a clean close seen as EOF, and no
/// buffer held while idle.
#[tokio::test]
async fn our_client_and_server_talk_and_hold_no_buffer_while_idle() {
    let (server_cfg, client_cfg) = configs();
    let (c, s) = pair().await;
    let server = tokio::spawn(async move {
        let mut t = ServerTls::accept(server_cfg, s, Vec::new()).await.unwrap();
        let mut got = vec![0u8; 100_000];
        t.read_exact(&mut got).await.unwrap();
        assert!(
            t.rx.buf.is_empty() && t.tx.buf.is_empty(),
            "idle server holds a buffer"
        );
        t.write_all(&got).await.unwrap();
        t.flush().await.unwrap();
        // One byte at a time: the rest of a record waits in the stash.
        let mut small = [0u8; 1];
        let mut line = Vec::new();
        while line.last() != Some(&b'\n') {
            t.read_exact(&mut small).await.unwrap();
            line.push(small[0]);
        }
        assert_eq!(line, b"hello, tiny reader\n");
        t.shutdown().await.unwrap();
        let mut rest = Vec::new();
        t.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
    });
    let mut t = ClientTls::connect(client_cfg, name(), c).await.unwrap();
    let payload: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    t.write_all(&payload).await.unwrap();
    t.flush().await.unwrap();
    let mut back = vec![0u8; payload.len()];
    t.read_exact(&mut back).await.unwrap();
    assert_eq!(back, payload);
    assert!(
        t.rx.buf.is_empty() && t.tx.buf.is_empty(),
        "idle client holds a buffer"
    );
    t.write_all(b"hello, tiny reader\n").await.unwrap();
    t.flush().await.unwrap();
    let mut rest = Vec::new();
    t.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
    t.shutdown().await.unwrap();
    server.await.unwrap();
}

/// Interoperates with rustls's buffered connections (tokio-rustls) on
/// the other side, and the second upstream connection resumes the
/// session with the ticket the server issued on the first.
/// Records wait in the send buffer for a flush, but a peer that writes
/// first (and waits for our Finished before it can) must not stall:
/// with TLS 1.2 and TLS 1.3.
#[tokio::test]
async fn a_server_that_speaks_first_gets_our_last_flight() {
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let (server_cfg, client) = configs_for(&[version]);
        let acceptor = tokio_rustls::TlsAcceptor::from(server_cfg.clone());
        let (c, s) = pair().await;
        let server = tokio::spawn(async move {
            let mut t = acceptor.accept(s).await.unwrap();
            t.write_all(b"hello").await.unwrap();
            t.flush().await.unwrap();
            t.get_ref().1.protocol_version()
        });
        let client = async {
            let mut t = ClientTls::connect(client, name(), c).await?;
            let mut got = [0u8; 5];
            t.read_exact(&mut got).await.map(|_| got)
        };
        let got = tokio::time::timeout(std::time::Duration::from_secs(5), client)
            .await
            .expect("stalled: the server never got our handshake's last flight")
            .unwrap();
        assert_eq!(&got, b"hello");
        let spoken = server.await.unwrap();
        assert_eq!(spoken, Some(version.version), "{version:?}");
    }
}

#[tokio::test]
async fn interoperates_with_tokio_rustls_and_resumes() {
    let (server_cfg, client_cfg) = configs();
    let acceptor = tokio_rustls::TlsAcceptor::from(server_cfg.clone());
    let mut kinds = Vec::new();
    for _ in 0..2 {
        let (c, s) = pair().await;
        let acceptor = acceptor.clone();
        let server = tokio::spawn(async move {
            let mut t = acceptor.accept(s).await.unwrap();
            let mut buf = [0u8; 4];
            t.read_exact(&mut buf).await.unwrap();
            t.write_all(b"pong").await.unwrap();
            t.shutdown().await.unwrap();
            buf
        });
        let mut t = ClientTls::connect(client_cfg.clone(), name(), c)
            .await
            .unwrap();
        t.write_all(b"ping").await.unwrap();
        let mut got = Vec::new();
        t.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"pong");
        assert_eq!(&server.await.unwrap(), b"ping");
        kinds.push(t.resumed());
    }
    assert_eq!(kinds, vec![false, true], "resumed");

    // tokio-rustls client against our server, the ClientHello already
    // read by the caller (as the proxy reads it to route).
    let (c, s) = pair().await;
    let server = tokio::spawn(async move {
        let mut s = s;
        let mut first = vec![0u8; 5];
        s.read_exact(&mut first).await.unwrap();
        let mut t = ServerTls::accept(server_cfg, s, first).await.unwrap();
        let mut buf = [0u8; 4];
        t.read_exact(&mut buf).await.unwrap();
        t.write_all(b"pong").await.unwrap();
        t.shutdown().await.unwrap();
    });
    let connector = tokio_rustls::TlsConnector::from(client_cfg);
    let mut t = connector.connect(name(), c).await.unwrap();
    t.write_all(b"ping").await.unwrap();
    let mut got = Vec::new();
    t.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"pong");
    server.await.unwrap();
}

/// With tickets issued one per handshake (as Go's TLS stack does), the
/// proxy's session store keeps enough of them that connections opened
/// together all resume, not only the first eight.
#[tokio::test]
async fn concurrent_upstream_connections_all_resume() {
    let (server_cfg, client_cfg) = configs();
    let mut server_cfg = (*server_cfg).clone();
    server_cfg.send_tls13_tickets = 1;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_cfg));
    let mut client_cfg = (*client_cfg).clone();
    client_cfg.resumption =
        rustls::client::Resumption::store(Arc::new(crate::tls::SessionStore::default()));
    let client_cfg = Arc::new(client_cfg);
    let round = |n: usize| {
        let (acceptor, client_cfg) = (acceptor.clone(), client_cfg.clone());
        async move {
            let mut open = Vec::new();
            for _ in 0..n {
                let (c, s) = pair().await;
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let mut t = acceptor.accept(s).await.unwrap();
                    t.write_all(b"pong").await.unwrap();
                    let mut rest = Vec::new();
                    let _ = t.read_to_end(&mut rest).await;
                });
                open.push(ClientTls::connect(client_cfg.clone(), name(), c));
            }
            let mut conns = futures::future::try_join_all(open).await.unwrap();
            let mut resumed = 0;
            for t in &mut conns {
                let mut buf = [0u8; 4];
                t.read_exact(&mut buf).await.unwrap();
                resumed += usize::from(t.resumed());
            }
            resumed
        }
    };
    // rustls's own memory cache resumes 8 of these 20 (its stock per
    // server), ours all of them.
    assert_eq!(round(20).await, 0);
    assert_eq!(round(20).await, 20);
}

/// TLS 1.3 key updates from a rustls peer that asks for ours too: data
/// flows on through every change, both ways.
#[tokio::test]
async fn key_updates_from_the_peer() {
    let (server_cfg, client_cfg) = configs_for(&[&rustls::version::TLS13]);
    let acceptor = tokio_rustls::TlsAcceptor::from(server_cfg);
    let (c, s) = pair().await;
    let server = tokio::spawn(async move {
        let mut p = acceptor.accept(s).await.unwrap();
        let mut buf = [0u8; 2];
        for round in 0..3u8 {
            p.get_mut().1.refresh_traffic_keys().unwrap();
            p.write_all(&[b'p', round]).await.unwrap();
            p.flush().await.unwrap();
            p.read_exact(&mut buf).await.unwrap();
            assert_eq!(buf, [b'o', round], "our data after the update");
        }
        p.write_all(b"bye").await.unwrap();
        p.shutdown().await.unwrap();
    });
    let mut t = ClientTls::connect(client_cfg, name(), c).await.unwrap();
    let mut buf = [0u8; 2];
    for round in 0..3u8 {
        t.read_exact(&mut buf).await.unwrap();
        assert_eq!(buf, [b'p', round], "the peer's data after its update");
        t.write_all(&[b'o', round]).await.unwrap();
        t.flush().await.unwrap();
    }
    let mut rest = Vec::new();
    t.read_to_end(&mut rest).await.unwrap();
    assert_eq!(rest, b"bye");
    server.await.unwrap();
}

/// A record that does not decrypt ends the connection with an error,
/// and the peer is told why (bad_record_mac), in TLS 1.2 and 1.3.
#[tokio::test]
async fn a_forged_record_is_an_error_and_the_peer_learns_why() {
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let (server_cfg, client_cfg) = configs_for(&[version]);
        let connector = tokio_rustls::TlsConnector::from(client_cfg);
        let (c, s) = pair().await;
        // The forged record comes once the server's handshake is done: in
        // TLS 1.3 the client is done first, and a record arriving with its
        // Finished would fail the handshake instead of the read.
        let (accepted, handshake_done) = tokio::sync::oneshot::channel();
        let server = tokio::spawn(async move {
            let mut t = ServerTls::accept(server_cfg, s, Vec::new()).await.unwrap();
            accepted.send(()).unwrap();
            let mut buf = [0u8; 16];
            let first = t.read(&mut buf).await.unwrap_err();
            // Failed for good: a second read does not drive rustls again.
            let again = t.read(&mut buf).await.unwrap_err();
            (first, again)
        });
        let mut p = connector.connect(name(), c).await.unwrap();
        handshake_done.await.unwrap();
        // A well-formed record under no key we share.
        let mut forged = vec![23, 3, 3, 0, 40];
        forged.extend_from_slice(&[0x5a; 40]);
        p.get_mut().0.write_all(&forged).await.unwrap();
        let (e, again) = server.await.unwrap();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{version:?}");
        assert_eq!(again.kind(), io::ErrorKind::InvalidData, "{version:?}");
        let mut buf = [0u8; 16];
        let alert = p.read(&mut buf).await.unwrap_err().to_string();
        assert!(alert.contains("BadRecordMac"), "{version:?}: {alert}");
    }
}

/// A handshake message declared larger than 64 KiB, spread over full
/// records, fails that connection with an alert. rustls joins such a
/// message in the caller's buffer: handing it less than what it still
/// holds there made it panic, which took the whole proxy down.
#[tokio::test]
async fn an_oversized_fragmented_handshake_message_fails_only_its_connection() {
    let (server_cfg, _) = configs();
    let (mut c, s) = pair().await;
    let server = tokio::spawn(ServerTls::accept(server_cfg, s, Vec::new()));
    let mut record = vec![22, 3, 1, 0x40, 0];
    // client_hello, declared length 0x010000, then zeros.
    record.extend_from_slice(&[1, 1, 0, 0]);
    record.resize(5 + 0x4000, 0);
    let mut more = vec![22, 3, 1, 0x40, 0];
    more.resize(5 + 0x4000, 0);
    c.write_all(&record).await.unwrap();
    let _ = c.write_all(&more).await;
    let e = server.await.expect("the server task panicked").err();
    assert_eq!(
        e.expect("an oversized ClientHello was accepted").kind(),
        io::ErrorKind::InvalidData
    );
    // Closed: rustls has no alert for this one (its own buffered
    // connections close the same way), and nothing else comes back.
    let mut reply = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut reply)).await;
    assert!(read.is_ok(), "the connection was left open");
    assert!(reply.is_empty() || reply[0] == 21, "{reply:?}");
}

/// An error in the read that also made the server's flight (a
/// ClientHello and a bad ChangeCipherSpec in one segment): the flight
/// goes out before the alert, or the peer could not read the alert.
#[tokio::test]
async fn the_flight_made_before_an_error_goes_out_before_its_alert() {
    let (server_cfg, client_cfg) = configs_for(&[&rustls::version::TLS13]);
    let mut hello = Vec::new();
    rustls::ClientConnection::new(client_cfg, name())
        .unwrap()
        .write_tls(&mut hello)
        .unwrap();
    // Two ChangeCipherSpec messages in one record: never valid.
    hello.extend_from_slice(&[20, 3, 3, 0, 2, 1, 1]);
    let (mut c, s) = pair().await;
    c.write_all(&hello).await.unwrap();
    let e = ServerTls::accept(server_cfg, s, Vec::new()).await.err();
    assert!(e.is_some(), "two CCS in one record were accepted");
    let mut reply = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut reply)).await;
    assert_eq!(reply.first(), Some(&22), "no ServerHello first: {reply:?}");
    // The records: ServerHello, then (TLS 1.3) encrypted ones, the last
    // of them the alert.
    let mut types = Vec::new();
    let mut rest = &reply[..];
    while rest.len() >= 5 {
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        types.push(rest[0]);
        rest = &rest[(5 + len).min(rest.len())..];
    }
    assert!(types.len() >= 3, "{types:?}");
}

/// A peer that keeps asking for key updates and never reads ends its
/// own connection (rustls allows 32 requests between data records, and
/// keeps one reply pending), holding a bounded send buffer meanwhile.
#[tokio::test]
async fn a_key_update_flood_ends_the_connection() {
    let (server_cfg, client_cfg) = configs_for(&[&rustls::version::TLS13]);
    let connector = tokio_rustls::TlsConnector::from(client_cfg);
    let (c, s) = pair().await;
    let server = tokio::spawn(async move {
        let mut t = ServerTls::accept(server_cfg, s, Vec::new()).await.unwrap();
        let mut buf = [0u8; 16];
        loop {
            match t.read(&mut buf).await {
                Ok(0) => return (Ok(()), t.tx.len()),
                Ok(_) => {}
                Err(e) => return (Err(e), t.tx.len()),
            }
        }
    });
    let mut p = connector.connect(name(), c).await.unwrap();
    for _ in 0..100 {
        p.get_mut().1.refresh_traffic_keys().unwrap();
        if p.flush().await.is_err() {
            break;
        }
    }
    let (r, held) = server.await.unwrap();
    let e = r.expect_err("100 key update requests in a row were accepted");
    assert!(e.to_string().contains("KeyUpdate"), "{e}");
    assert!(held <= MAX_TX, "{held} bytes queued");
}

/// A TCP close without close_notify is an error (truncation), not EOF;
/// a client that is not TLS fails the handshake.
#[tokio::test]
async fn truncation_and_garbage_are_errors() {
    let (server_cfg, client_cfg) = configs();
    let (c, s) = pair().await;
    let server = tokio::spawn(async move {
        let t = ServerTls::accept(server_cfg.clone(), s, Vec::new())
            .await
            .unwrap();
        drop(t);
        let (mut c, s) = pair().await;
        c.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        ServerTls::accept(server_cfg, s, Vec::new()).await.err()
    });
    let mut t = ClientTls::connect(client_cfg, name(), c).await.unwrap();
    let mut buf = [0u8; 16];
    let e = t.read(&mut buf).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    let e = server.await.unwrap().expect("plain HTTP is refused");
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
}
