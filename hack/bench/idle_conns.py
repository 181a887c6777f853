#!/usr/bin/env python3
"""Open N TLS connections, one request each, and hold them open.

Usage: idle_conns.py HOST PORT N --ca FILE [--sni NAME] [--concurrency C]
                     [--cert FILE --key FILE] [--no-check-hostname]
Prints "ready <opened>" once every connection has had its answer (failures
are summarised on stderr as "errors <n> {type: count}"), then holds them.
Each stdin line "request" sends one more request on every held connection
and prints "requested ok=<n> failed=<m> {type: count}"; stdin closing closes
them all. Used by hack/bench-proxy.sh (memory per idle connection) and
hack/load-proxy.sh (10,000 connections held for a minute).
"""
import argparse
import asyncio
import collections
import resource
import ssl
import sys


async def request(r, w):
    w.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    await w.drain()
    head = await r.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    await r.readexactly(length)


async def one(host, port, ctx, sni, sem, conns):
    async with sem:
        r, w = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=ctx, server_hostname=sni or host), 30
        )
        await asyncio.wait_for(request(r, w), 30)
        conns.append((r, w))


def summary(results):
    return collections.Counter(type(r).__name__ for r in results if isinstance(r, BaseException))


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("n", type=int)
    p.add_argument("--ca", required=True)
    p.add_argument("--sni")
    p.add_argument("--concurrency", type=int, default=50)
    # A client certificate, as kubelet-style clients present on passthrough.
    p.add_argument("--cert")
    p.add_argument("--key")
    # Still verified against the CA, but not against the dialed IP (an L4
    # path shows the tenant's certificate, named for the API host).
    p.add_argument("--no-check-hostname", action="store_true")
    a = p.parse_args()
    # Thousands of sockets: lift the soft descriptor limit to the hard one.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    ctx = ssl.create_default_context(cafile=a.ca)
    ctx.set_alpn_protocols(["http/1.1"])
    if a.cert:
        ctx.load_cert_chain(a.cert, a.key)
    if a.no_check_hostname:
        ctx.check_hostname = False
    sem = asyncio.Semaphore(a.concurrency)
    conns = []
    results = await asyncio.gather(
        *(one(a.host, a.port, ctx, a.sni, sem, conns) for _ in range(a.n)), return_exceptions=True
    )
    errors = summary(results)
    if errors:
        print(f"errors {sum(errors.values())} {dict(errors)}", file=sys.stderr, flush=True)
    print(f"ready {len(conns)}", flush=True)
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        if line.strip() == "request":
            res = await asyncio.gather(
                *(asyncio.wait_for(request(r, w), 30) for r, w in conns), return_exceptions=True
            )
            bad = summary(res)
            print(f"requested ok={len(res) - sum(bad.values())} failed={sum(bad.values())} {dict(bad)}", flush=True)
    for _, w in conns:
        w.close()


if __name__ == "__main__":
    asyncio.run(main())
