#!/usr/bin/env python3
"""Test client of the proxy e2e tests: plays the pod.

  get  HOST PORT [--sni NAME] --ca FILE [--cert F --key F] [--alpn a,b]
       one TLS connection, one GET; prints one JSON line.
  hold (same flags) like get, then waits for a line on stdin and sends a
       second GET on the SAME connection; prints a second JSON line.
  raw  HOST PORT HEX
       sends raw bytes, reads until the peer closes (max 10 s); prints JSON.
  many HOST PORT N [--ca F [--sni NAME]] [--stall silent|partial|hello]
       opens N connections at once (asyncio): TLS with one GET each, or with
       --stall clients that never finish the handshake (send nothing, half a
       record header, or a real ClientHello and nothing after). Prints one
       JSON summary, then obeys stdin lines, one JSON summary each:
         request    one GET on every open connection
         loop SECS  GETs back to back on every connection for SECS
         wait SECS  wait up to SECS for the peer to close each connection
       and closes everything at EOF.
"""
import argparse
import asyncio
import collections
import json
import resource
import socket
import ssl
import sys
import time


def request(tls):
    tls.sendall(b"GET / HTTP/1.1\r\nHost: kubernetes.default.svc\r\nUser-Agent: e2e\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = tls.recv(65536)
        if not chunk:
            raise RuntimeError("closed before response head")
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for line in lines[1:]:
        k, _, v = line.partition(":")
        if k.strip().lower() == "content-length":
            length = int(v.strip())
    while len(body) < length:
        chunk = tls.recv(65536)
        if not chunk:
            raise RuntimeError("closed inside body")
        body += chunk
    return status, body[:length].decode("utf-8", "replace")


def connect(a):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(a.ca)
    if a.cert:
        ctx.load_cert_chain(a.cert, a.key)
    if a.alpn:
        ctx.set_alpn_protocols(a.alpn.split(","))
    raw = socket.create_connection((a.host, a.port), timeout=10)
    # An IP literal as server_hostname sends no SNI and checks the IP SAN,
    # exactly like a pod dialing the service IP.
    name = a.sni if a.sni else a.host
    tls = ctx.wrap_socket(raw, server_hostname=name)
    return tls


def describe(tls):
    return {
        "cert": tls.getpeercert(binary_form=True).hex(),
        "alpn": tls.selected_alpn_protocol(),
        "version": tls.version(),
    }


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def http_get(r, w):
    w.write(b"GET / HTTP/1.1\r\nHost: kubernetes.default.svc\r\nUser-Agent: e2e\r\n\r\n")
    await w.drain()
    head = await r.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v.strip())
    await r.readexactly(length)
    if status != 200:
        raise RuntimeError(f"status {status}")


def client_hello(a):
    """The bytes of a real ClientHello, from an SSLObject on memory BIOs."""
    ctx = ssl.create_default_context(cafile=a.ca) if a.ca else ssl._create_unverified_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname=a.sni or a.host)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


async def many(a):
    # Hundreds of sockets: lift the soft descriptor limit to the hard one.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    ctx = None
    if a.ca and not a.stall:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(a.ca)
    hello = client_hello(a) if a.stall == "hello" else b""
    conns, errors = [], collections.Counter()
    sem = asyncio.Semaphore(64)

    async def open_one():
        async with sem:
            try:
                if a.stall:
                    r, w = await asyncio.open_connection(a.host, a.port)
                    w.write({"silent": b"", "partial": b"\x16\x03", "hello": hello}[a.stall])
                    await w.drain()
                else:
                    r, w = await asyncio.wait_for(
                        asyncio.open_connection(a.host, a.port, ssl=ctx, server_hostname=a.sni or a.host),
                        10,
                    )
                    await asyncio.wait_for(http_get(r, w), 10)
                conns.append((r, w))
            except Exception as e:
                errors[type(e).__name__] += 1

    await asyncio.gather(*(open_one() for _ in range(a.n)))
    emit({"opened": len(conns), "failed": sum(errors.values()), "errors": dict(errors)})

    async def until_closed(r, secs):
        try:
            while True:
                if not await asyncio.wait_for(r.read(65536), secs):
                    return "eof"
        except asyncio.TimeoutError:
            return "open"
        except Exception as e:
            return type(e).__name__

    async def looping(r, w, until):
        n = 0
        while time.monotonic() < until:
            await asyncio.wait_for(http_get(r, w), 10)
            n += 1
            await asyncio.sleep(0.05)
        return n

    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        cmd = line.split()
        if cmd[0] == "wait":
            how = await asyncio.gather(*(until_closed(r, float(cmd[1])) for r, _ in conns))
            c = collections.Counter(how)
            emit({"open": c.pop("open", 0), "closed": sum(c.values()), "how": dict(c)})
            continue
        if cmd[0] == "request":
            jobs = [asyncio.wait_for(http_get(r, w), 10) for r, w in conns]
        else:
            until = time.monotonic() + float(cmd[1])
            jobs = [looping(r, w, until) for r, w in conns]
        res = await asyncio.gather(*jobs, return_exceptions=True)
        bad = collections.Counter(type(x).__name__ for x in res if isinstance(x, BaseException))
        emit({
            "ok": len(res) - sum(bad.values()),
            "failed": sum(bad.values()),
            "errors": dict(bad),
            "requests": sum(x for x in res if isinstance(x, int)),
        })
    for _, w in conns:
        w.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("cmd")
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("hex", nargs="?")
    p.add_argument("--stall", choices=["silent", "partial", "hello"])
    p.add_argument("--sni")
    p.add_argument("--ca")
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--alpn")
    p.add_argument("--no-request", action="store_true")
    a = p.parse_args()

    if a.cmd == "many":
        a.n = int(a.hex)
        asyncio.run(many(a))
        return
    if a.cmd == "raw":
        s = socket.create_connection((a.host, a.port), timeout=10)
        try:
            s.sendall(bytes.fromhex(a.hex))
            got = 0
            closed = False
            while True:
                try:
                    chunk = s.recv(65536)
                except ConnectionResetError:
                    closed = True
                    break
                if not chunk:
                    closed = True
                    break
                got += len(chunk)
        except socket.timeout:
            closed = False
        emit({"ok": True, "closed": closed, "received": got})
        return

    try:
        tls = connect(a)
        out = {"ok": True, **describe(tls)}
        if not a.no_request:
            out["status"], out["body"] = request(tls)
        emit(out)
    except Exception as e:  # reported to the test, which asserts on it
        emit({"ok": False, "error": f"{type(e).__name__}: {e}"})
        return
    if a.cmd == "hold":
        sys.stdin.readline()
        try:
            status, body = request(tls)
            emit({"ok": True, "status": status, "body": body, **describe(tls)})
        except Exception as e:
            emit({"ok": False, "error": f"{type(e).__name__}: {e}"})


if __name__ == "__main__":
    main()
