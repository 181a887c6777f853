#!/usr/bin/env python3
"""Open N TLS connections, one request each, and hold them open.

Usage: idle_conns.py HOST PORT N --ca FILE [--sni NAME]
Prints "ready <opened>" once every connection has had its answer, then holds
them until stdin closes. Used by hack/bench-proxy.sh to measure memory per
idle connection (VmRSS of the proxy before and after).
"""
import argparse
import asyncio
import ssl
import sys


async def one(host, port, ctx, sni, sem, conns):
    async with sem:
        r, w = await asyncio.open_connection(host, port, ssl=ctx, server_hostname=sni or host)
        w.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        await w.drain()
        head = await r.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        await r.readexactly(length)
        conns.append((r, w))


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("n", type=int)
    p.add_argument("--ca", required=True)
    p.add_argument("--sni")
    a = p.parse_args()
    ctx = ssl.create_default_context(cafile=a.ca)
    ctx.set_alpn_protocols(["http/1.1"])
    sem = asyncio.Semaphore(50)
    conns = []
    results = await asyncio.gather(
        *(one(a.host, a.port, ctx, a.sni, sem, conns) for _ in range(a.n)), return_exceptions=True
    )
    errors = [r for r in results if isinstance(r, Exception)]
    if errors:
        print(f"errors {len(errors)} first={errors[0]!r}", file=sys.stderr)
    print(f"ready {len(conns)}", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)
    for _, w in conns:
        w.close()


if __name__ == "__main__":
    asyncio.run(main())
