#!/usr/bin/env python3
"""Hostile TLS client of the proxy e2e tests: plays a pod whose TLS stack
misbehaves, the way the tlsfuzzer conformance suite does.

Runs with tlslite-ng (hack/tls-test-requirements.txt), a real TLS
implementation: the handshake is a genuine one (the proxy's certificate is
not checked, nothing here relies on it), and two hooks let a case change the
ClientHello before it is sent or replace the client's Finished with crafted
records. Whatever is sent after the handshake goes through tlslite's record
layer with the connection's real keys, so the proxy sees well-formed,
correctly encrypted records whose content is hostile.

  hostile.py CASE HOST PORT [ARGS...]

prints one JSON line. Every case reports `handshake` (true once the client
handshake completed) and, for the hostile ones, `end`: how the proxy ended
the connection, one of
  {"kind": "alert", "alert": NAME, "level": "fatal"|"warning"}
  {"kind": "eof"}          TCP FIN without an alert
  {"kind": "close_notify"} an orderly TLS close
  {"kind": "reset"}        a TCP reset, no alert read before it
  {"kind": "open"}         still open after the wait
  {"kind": "undecodable"}  something tlslite could not read as TLS
  {"kind": "error"}        anything else (a bug of this driver)
Cases that should work report the HTTP `status` of a GET through the proxy.

Cases:
  get                          a well-behaved TLS 1.3 GET (the baseline)
  oversized-finished           a Finished that declares more than 0xFFFF
                               bytes, spread over five full records
  keyupdate-fragmented         Finished, a KeyUpdate split over two
                               records and a GET, in one write: must work
  keyupdate-fragmented-appdata Finished, the first half of a KeyUpdate,
                               application data, the second half
  keyupdate-flood SECS EVERY   KeyUpdates asking for ours, back to back,
                               for SECS seconds, never reading; one byte of
                               application data every EVERY of them (0:
                               none) keeps the peer's per-data budget fresh
  empty-appdata N [WHEN]       N zero-length application data records
  keyupdate-raw HEX [WHEN]     a KeyUpdate handshake message of these bytes
                               (type 24, then length and body)
                               WHEN: "now" (default), right behind the
                               Finished, or "settled", after one GET
  hello-version TLS REC HELLO  TLS "1.3" or "1.2"; record-layer and
                               ClientHello legacy versions as "MAJ.MIN"
  hello-max                    a ClientHello that fills one 16 KiB record
  hello-fragmented SIZE        a ClientHello in records of SIZE bytes
  pq                           X25519MLKEM768 and X25519 key shares
  garbage KIND                 not TLS at all (http, zeros, random, sslv2,
                               bad-handshake)
"""
import json
import os
import signal
import socket
import sys
import time

from tlslite import HandshakeSettings, TLSConnection
from tlslite.constants import (
    AlertDescription,
    AlertLevel,
    ContentType,
    ExtensionType,
    GroupName,
    KeyUpdateMessageType,
)
from tlslite.errors import (
    TLSAbruptCloseError,
    TLSLocalAlert,
    TLSRemoteAlert,
)
from tlslite.extensions import PaddingExtension
from tlslite.messages import ClientHello, Finished, Message

# Largest TLS plaintext fragment (RFC 8446, 5.1).
MAX_FRAGMENT = 16384
REQUEST = b"GET / HTTP/1.1\r\nHost: kubernetes.default.svc\r\nUser-Agent: hostile\r\n\r\n"


class Hostile(TLSConnection):
    """A tlslite-ng client connection with two hooks.

    `on_hello(hello)` may change each ClientHello before it is serialised
    (the transcript hash then covers what was really sent), and
    `record_version` replaces the record-layer version of the records that
    carry it. `on_finished(conn, finished_bytes)` replaces the sending of the
    client's TLS 1.3 Finished: it is called with the handshake write keys
    still in place and sends whatever it likes instead.
    """

    def __init__(self, sock):
        super().__init__(sock)
        self.on_hello = None
        self.record_version = None
        self.on_finished = None

    def _sendMsg(self, msg, randomizeFirstBlock=True, update_hashes=True):
        if not isinstance(msg, ClientHello):
            yield from super()._sendMsg(msg, randomizeFirstBlock, update_hashes)
            return
        if self.on_hello:
            self.on_hello(msg)
        record_socket = self._recordLayer._recordSocket
        saved = record_socket.version
        if self.record_version:
            record_socket.version = self.record_version
        try:
            yield from super()._sendMsg(msg, randomizeFirstBlock, update_hashes)
        finally:
            record_socket.version = saved

    def _sendMsgs(self, msgs):
        finished = [m for m in msgs if isinstance(m, Finished)]
        if not (finished and self.on_finished and self.version == (3, 4)):
            yield from super()._sendMsgs(msgs)
            return
        # A middlebox-compatibility ChangeCipherSpec goes out as usual.
        for m in msgs:
            if not isinstance(m, Finished):
                yield from super()._sendMsg(m)
        self.on_finished(self, finished[0].write())


def send_record(conn, ctype, payload):
    """One record of `ctype` through the current write keys, as it is (no
    fragmenting, no transcript update): empty and partial messages too."""
    for _ in conn._sendMsgThroughSocket(Message(ctype, bytearray(payload))):
        pass


def send_records(conn, ctype, payload, size=MAX_FRAGMENT):
    """`payload` cut into records of at most `size` bytes."""
    for i in range(0, len(payload), size):
        send_record(conn, ctype, payload[i : i + size])


def buffered(conn):
    """Records sent until `flush(conn)` leave in one write (one segment
    when small): the proxy reads them together."""
    conn.sock.buffer_writes = True


def flush(conn):
    conn.sock.flush()
    conn.sock.buffer_writes = False


def our_key_update_sent(conn):
    """After a KeyUpdate sent by hand: switch to our next write key."""
    s = conn.session
    s.cl_app_secret, s.sr_app_secret = conn._recordLayer.calcTLS1_3KeyUpdate_reciever(
        s.cipherSuite, s.cl_app_secret, s.sr_app_secret
    )


def key_update(value):
    """A KeyUpdate handshake message: type 24, length 1, `value`."""
    return bytes([24, 0, 0, 1, value])


def settings(tls="1.3", groups=None, shares=None):
    s = HandshakeSettings()
    if tls == "1.3":
        s.minVersion = s.maxVersion = (3, 4)
    else:
        s.minVersion = s.maxVersion = (3, 3)
    # The serving certificate is ECDSA P-256.
    s.eccCurves = groups or ["x25519", "secp256r1"]
    s.keyShares = shares or ["x25519"]
    return s


def tcp(host, port, rcvbuf=None):
    """A TCP connection; `rcvbuf` shrinks our receive buffer (and so the
    window we offer) before connecting, so that what the proxy sends us and
    we do not read stays with the proxy instead of in our kernel."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10)
    sock.connect((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def connect(host, port, tls="1.3", hello=None, record_version=None,
            finished=None, groups=None, shares=None, record_size=None,
            rcvbuf=None):
    """A TLS connection whose handshake the hooks may tamper with; returns
    (conn, None), or (None, end) when the handshake itself failed."""
    conn = Hostile(tcp(host, port, rcvbuf))
    conn.on_hello = hello
    conn.record_version = record_version
    conn.on_finished = finished
    if record_size:
        conn.recordSize = record_size
    try:
        conn.handshakeClientCert(settings=settings(tls, groups, shares))
    except Exception as e:  # noqa: BLE001 - reported, judged by the test
        return None, classify(e)
    return conn, None


def classify(e):
    """How a failed read or handshake says the proxy ended the connection."""
    if isinstance(e, TLSRemoteAlert):
        return {
            "kind": "alert",
            "alert": AlertDescription.toStr(e.description),
            "level": "fatal" if e.level == AlertLevel.fatal else "warning",
        }
    if isinstance(e, TLSAbruptCloseError):
        return {"kind": "eof"}
    if isinstance(e, (socket.timeout, TimeoutError)):
        return {"kind": "open"}
    if isinstance(e, (ConnectionResetError, BrokenPipeError)):
        return {"kind": "reset"}
    if isinstance(e, TLSLocalAlert):
        return {"kind": "undecodable", "error": str(e)}
    return {"kind": "error", "error": f"{type(e).__name__}: {e}"}


class Deadline(Exception):
    """The wait for the proxy's answer is over."""


def _deadline(signum, frame):
    raise Deadline()


def await_end(conn, wait=5.0):
    """Read until the proxy ends the connection (or `wait` seconds pass);
    data it sends meanwhile is counted, not judged. The wait is a timer,
    not a socket timeout: a peer that keeps sending handshake messages
    (KeyUpdates) never lets tlslite's read return."""
    conn.sock.settimeout(wait)
    got = 0
    signal.signal(signal.SIGALRM, _deadline)
    signal.setitimer(signal.ITIMER_REAL, wait)
    try:
        while True:
            data = conn.read()
            if not data:
                return {"kind": "close_notify", "data": got}
            got += len(data)
    except Deadline:
        return {"kind": "open", "data": got}
    except Exception as e:  # noqa: BLE001
        end = classify(e)
        end["data"] = got
        return end
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def http_get(conn, send=True):
    """A GET on the connection (unless already sent); the status code."""
    conn.sock.settimeout(10)
    if send:
        conn.write(REQUEST)
    data = b""
    while b"\r\n" not in data:
        chunk = conn.read()
        if not chunk:
            raise RuntimeError("closed before the response")
        data += chunk
    return int(data.split(b"\r\n", 1)[0].split()[1])


def handshake_report(conn):
    return {
        "handshake": True,
        "version": conn.getVersionName(),
        "cipher": conn.getCipherName(),
        "group": GroupName.toStr(conn.ecdhCurve) if getattr(conn, "ecdhCurve", None) else None,
    }


def works(conn, end, **extra):
    """Report of a case that must complete: handshake, then one GET."""
    if conn is None:
        return {"handshake": False, "end": end, **extra}
    r = handshake_report(conn)
    r.update(extra)
    try:
        r["status"] = http_get(conn)
    except Exception as e:  # noqa: BLE001
        r["end"] = classify(e)
    return r


def hostile(conn, end, act, when="now"):
    """Report of a case whose handshake completes and then misbehaves:
    `act(conn)` does the harm (its return value is reported as `sent`),
    then how the proxy ended the connection. `when`: "now", right behind
    our Finished (the proxy may still be in its handshake code when it
    reads it), or "settled", after one GET answered (the proxy is surely
    past its handshake)."""
    if conn is None:
        return {"handshake": False, "end": end}
    r = handshake_report(conn)
    if when == "settled":
        try:
            r["status"] = http_get(conn)
        except Exception as e:  # noqa: BLE001
            r["end"] = classify(e)
            return r
    try:
        r["sent"] = act(conn)
    except Exception as e:  # noqa: BLE001 - the proxy may close mid-way
        r["send_error"] = f"{type(e).__name__}: {e}"
    r["end"] = await_end(conn)
    return r


# --- the cases ---------------------------------------------------------


def case_get(host, port):
    return works(*connect(host, port))


def case_oversized_finished(host, port):
    """tlsfuzzer test-tls13-finished: a Finished whose declared length is
    past 0xFFFF, which no TLS 1.3 peer may accept (RFC 8446 leaves 2^24 to
    the length field; rustls caps handshake messages at 0xFFFF), sent as
    five full 16 KiB records: the real verify_data first, then padding."""

    def finished(conn, real):
        total = 5 * MAX_FRAGMENT
        body = bytes(real[4:]) + bytes(total - 4 - (len(real) - 4))
        msg = bytes([20]) + (total - 4).to_bytes(3, "big") + body
        assert len(msg) == total and total - 4 > 0xFFFF
        conn.reached_finished = True
        conn.sock.settimeout(10)
        try:
            send_records(conn, ContentType.handshake, msg)
        except Exception as e:  # noqa: BLE001
            # The proxy refused (and closed) before it read it all: tlslite
            # then reads what came back (an alert, or the close).
            conn.finished_end = classify(e)

    conn, end = connect(host, port, finished=finished)
    if conn is None:
        return {"handshake": False, "end": end}
    r = handshake_report(conn)
    r["end"] = getattr(conn, "finished_end", None) or await_end(conn)
    return r


def case_keyupdate_fragmented(host, port, appdata_between):
    """tlsfuzzer test-tls13-keyupdate: a KeyUpdate split over two records,
    arriving in the same write as the Finished. Whole, it is legal and the
    GET after it must work; with application data between its halves it is
    not (RFC 8446, 5.1: handshake messages must not be interleaved with
    other record types): unexpected_message."""
    ku = key_update(KeyUpdateMessageType.update_not_requested)

    def finished(conn, real):
        buffered(conn)
        send_record(conn, ContentType.handshake, real)
        # The client's application traffic keys from here on.
        conn._changeWriteState()
        # tlslite switches once more after this hook: make that a no-op.
        conn._recordLayer._pendingWriteState = conn._recordLayer._writeState
        send_record(conn, ContentType.handshake, ku[:2])
        if appdata_between:
            send_record(conn, ContentType.application_data, REQUEST)
            send_record(conn, ContentType.handshake, ku[2:])
            flush(conn)
            return
        send_record(conn, ContentType.handshake, ku[2:])
        conn.after_finished = True

    conn, end = connect(host, port, finished=finished)
    if conn is None:
        return {"handshake": False, "end": end}
    if appdata_between:
        return hostile(conn, None, lambda c: None)
    # Our next key, then the GET in the same write as the rest.
    our_key_update_sent(conn)
    send_record(conn, ContentType.application_data, REQUEST)
    flush(conn)
    r = handshake_report(conn)
    try:
        r["status"] = http_get(conn, send=False)
    except Exception as e:  # noqa: BLE001
        r["end"] = classify(e)
    return r


def case_keyupdate_flood(host, port, secs, every):
    """KeyUpdates with update_requested back to back, never reading: each
    asks the proxy to send one of its own, which it cannot deliver to a
    client that does not read. `every` > 0 sends one byte of application
    data every `every` KeyUpdates, as rustls and BoringSSL reset their
    KeyUpdate budget on data; a newline, which the tenant's HTTP server
    skips before a request line."""
    secs, every = float(secs), int(every)

    ku = key_update(KeyUpdateMessageType.update_requested)
    # The smallest receive buffer: the proxy's KeyUpdates pile up on its
    # side after a few kilobytes.
    conn, end = connect(host, port, rcvbuf=4096)
    if conn is None:
        return {"handshake": False, "end": end}
    r = handshake_report(conn)
    r["sent"] = 0
    # A proxy that stops reading (back-pressure: it holds what it cannot
    # deliver) blocks our writes: that ends the flood, reported as
    # `blocked`; so does the proxy closing the connection.
    conn.sock.settimeout(2)
    start = last = time.monotonic()
    try:
        while time.monotonic() < start + secs:
            buffered(conn)
            for _ in range(64):
                send_record(conn, ContentType.handshake, ku)
                our_key_update_sent(conn)
                r["sent"] += 1
                if every and r["sent"] % every == 0:
                    send_record(conn, ContentType.application_data, b"\n")
            flush(conn)
            # Progress on stderr once a second, for the test's log.
            if time.monotonic() - last >= 1:
                last = time.monotonic()
                sys.stderr.write(json.dumps({"key_updates": r["sent"]}) + "\n")
                sys.stderr.flush()
    except (socket.timeout, TimeoutError):
        r["blocked"] = True
    except Exception as e:  # noqa: BLE001
        r["send_error"] = f"{type(e).__name__}: {e}"
    r["seconds"] = round(time.monotonic() - start, 1)
    # Now read: what the proxy queued for us, then how it ends (or not).
    r["end"] = await_end(conn, wait=3)
    return r


def case_empty_appdata(host, port, n, when="now"):
    """N zero-length application data records in a row: legal one at a
    time (RFC 8446, 5.4), a cheap way to keep a peer busy in bulk; rustls
    refuses more than 32 in a row."""
    n = int(n)

    def act(conn):
        buffered(conn)
        for _ in range(n):
            send_record(conn, ContentType.application_data, b"")
        flush(conn)
        return n

    return hostile(*connect(host, port), act, when)


def case_keyupdate_raw(host, port, hexmsg, when="now"):
    """A KeyUpdate of these bytes, then a GET under our old key (a peer
    that refused the KeyUpdate never reads it): request_update values
    other than 0 and 1 are illegal_parameter (RFC 8446, 4.6.3), a length
    other than 1 is decode_error."""
    msg = bytes.fromhex(hexmsg)

    def act(conn):
        buffered(conn)
        send_record(conn, ContentType.handshake, msg)
        send_record(conn, ContentType.application_data, REQUEST)
        flush(conn)
        return hexmsg

    return hostile(*connect(host, port), act, when)


def version(s):
    major, minor = s.split(".")
    return (int(major), int(minor))


def case_hello_version(host, port, tls, rec, hello):
    """tlsfuzzer test-version-numbers / test-tls13-legacy-version: a
    server must negotiate from supported_versions (TLS 1.3) or treat a
    legacy_version above TLS 1.2 as TLS 1.2 (RFC 8446, 4.2.1 and D.2), and
    accept any 0x03XX record-layer version on a ClientHello (RFC 8446,
    5.1)."""

    def edit(ch):
        ch.client_version = version(hello)

    return works(*connect(host, port, tls=tls, hello=edit, record_version=version(rec)))


def case_hello_max(host, port):
    """A ClientHello that fills one record to the byte (16384 bytes of
    handshake message), padded with the padding extension (RFC 7685)."""
    sizes = {}

    def edit(ch):
        # Ours replaces the one tlslite may have added (a duplicate
        # extension would be refused for that).
        ch.extensions = [
            e for e in ch.extensions if e.extType != ExtensionType.client_hello_padding
        ]
        base = len(ch.write())
        pad = PaddingExtension().create(MAX_FRAGMENT - base - 4)
        ch.extensions.append(pad)
        sizes["hello"] = len(ch.write())

    conn, end = connect(host, port, hello=edit)
    return works(conn, end, hello_bytes=sizes.get("hello"))


def case_hello_fragmented(host, port, size):
    """A ClientHello cut into records of `size` bytes (legal, RFC 8446
    5.1), as stacks with small record limits send it."""
    return works(*connect(host, port, record_size=int(size)))


def case_pq(host, port):
    """The key shares a current browser sends: X25519MLKEM768 (codepoint
    0x11EC, 1216 bytes) and X25519. The ClientHello is then larger than
    one Ethernet frame; whichever group the proxy picks, it must work."""
    sizes = {}

    def edit(ch):
        sizes["hello"] = len(ch.write())

    conn, end = connect(
        host,
        port,
        hello=edit,
        groups=["x25519mlkem768", "x25519", "secp256r1"],
        shares=["x25519mlkem768", "x25519"],
    )
    return works(conn, end, hello_bytes=sizes.get("hello"))


GARBAGE = {
    "http": REQUEST,
    "zeros": bytes(4096),
    "random": os.urandom(64 * 1024),
    # An SSLv2-format ClientHello (two-byte header with the high bit).
    "sslv2": bytes.fromhex("802b0103010012000000100100800700c0030080060040020080040080")
    + os.urandom(16),
    # A handshake record header whose content is not a ClientHello.
    "bad-handshake": bytes.fromhex("1603010010") + bytes([2]) + os.urandom(15),
}


def case_garbage(host, port, kind):
    """Bytes that are not a ClientHello: the proxy must end the connection
    at once, not wait for a handshake timeout."""
    sock = tcp(host, port)
    start = time.monotonic()
    r = {"handshake": False}
    try:
        sock.sendall(GARBAGE[kind])
    except OSError as e:
        r["send_error"] = f"{type(e).__name__}: {e}"
    got = b""
    sock.settimeout(8)
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                r["end"] = {"kind": "eof"}
                break
            got += chunk
    except OSError as e:
        r["end"] = classify(e)
    r["seconds"] = round(time.monotonic() - start, 2)
    r["received"] = got[:64].hex()
    return r


CASES = {
    "get": case_get,
    "oversized-finished": case_oversized_finished,
    "keyupdate-fragmented": lambda h, p: case_keyupdate_fragmented(h, p, False),
    "keyupdate-fragmented-appdata": lambda h, p: case_keyupdate_fragmented(h, p, True),
    "keyupdate-flood": case_keyupdate_flood,
    "empty-appdata": case_empty_appdata,
    "keyupdate-raw": case_keyupdate_raw,
    "hello-version": case_hello_version,
    "hello-max": case_hello_max,
    "hello-fragmented": case_hello_fragmented,
    "pq": case_pq,
    "garbage": case_garbage,
}


def main():
    if len(sys.argv) < 4 or sys.argv[1] not in CASES:
        sys.exit(__doc__)
    case, host, port, *args = sys.argv[1:]
    report = CASES[case](host, port, *args)
    report["case"] = " ".join([case, *args])
    sys.stdout.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    main()
