#!/usr/bin/env python3
"""Test client of the proxy e2e tests: plays the pod.

  get  HOST PORT [--sni NAME] --ca FILE [--cert F --key F] [--alpn a,b]
       one TLS connection, one GET; prints one JSON line.
  hold (same flags) like get, then waits for a line on stdin and sends a
       second GET on the SAME connection; prints a second JSON line.
  raw  HOST PORT HEX
       sends raw bytes, reads until the peer closes (max 10 s); prints JSON.
"""
import argparse
import json
import socket
import ssl
import sys


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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("cmd")
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("hex", nargs="?")
    p.add_argument("--sni")
    p.add_argument("--ca")
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--alpn")
    p.add_argument("--no-request", action="store_true")
    a = p.parse_args()

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
