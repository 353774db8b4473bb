"""Python's interop driver: the cross-language interop suite's JSON-lines
protocol (docs/python.md, "The interop driver") over the sluice library.

    scripts/interop-driver python --server 127.0.0.1:15000 --client-id py-1

It reads one JSON object per line on standard input and writes one JSON
object per line answering it, in order, on standard output; logs go to
standard error. Any failure answers {"error":{"code":CODE,"message":...}}
with CODE a gRPC code's name, and the driver keeps serving; "close" closes
the client and exits 0, as does the end of standard input.

With ``--asyncio`` (or SLUICE_PYTHON_ASYNCIO=1 in the environment, which
reaches the drivers the interop suite starts) the driver runs on
``sluice.aio`` instead of the threaded client: the same commands, awaited
on one event loop, standard input read off the loop.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import logging
import math
import os
import sys
import time
from typing import Any, Dict, Optional, Union

import sluice
import sluice.aio

#: The burst of every rate limiter the driver binds to a lease, in seconds
#: (the interop suite's bound on what a run may take).
BURST_SECONDS = 0.1


class Failure(Exception):
    """An error answer: a gRPC code's name and a message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


async def done(x: Any) -> Any:
    """x's result: awaited when the client is sluice.aio's, as is when the
    threaded client answered it already."""
    if inspect.isawaitable(x):
        return await x
    return x


class Driver:
    """One driver process: its client (threaded or asyncio), leased
    resources with their limiters, and the holds it was granted."""

    def __init__(self, client: Union[sluice.Client, sluice.aio.Client]) -> None:
        # The two APIs' objects, used by name: Any.
        self.client: Any = client
        self.res: Dict[str, Any] = {}  # sluice.Resource or sluice.aio.Resource
        self.limiters: Dict[str, Any] = {}  # sluice.RateLimiter or sluice.aio.RateLimiter
        self.holds: Dict[int, Any] = {}  # sluice.Hold or sluice.aio.Hold
        self.next_hold = 0

    def resource(self, rid: Any) -> Any:
        r = self.res.get(rid)
        if r is None:
            raise Failure("NOT_FOUND", f"no resource {rid!r} (send resource first)")
        return r

    async def do(self, cmd: Dict[str, Any]) -> Dict[str, Any]:
        op = cmd.get("op")
        if op == "resource":
            rid: Any = cmd.get("id")
            if rid in self.res:
                raise Failure("ALREADY_EXISTS", f"resource {rid!r} is leased already (use set_wants)")
            if "wants" not in cmd:
                raise Failure("INVALID_ARGUMENT", "resource: no wants")
            r = self.client.resource(rid, cmd["wants"])
            self.res[rid] = r
            self.limiters[rid] = r.rate_limiter(BURST_SECONDS)
            return {"ok": True}
        if op == "set_wants":
            r = self.resource(cmd.get("id"))
            if "wants" not in cmd:
                raise Failure("INVALID_ARGUMENT", "set_wants: no wants")
            r.set_wants(cmd["wants"])
            return {"ok": True}
        if op == "capacity":
            c = self.resource(cmd.get("id")).capacity
            return {"capacity": -1 if math.isinf(c) else c}
        if op == "run":
            self.resource(cmd.get("id"))
            seconds = cmd.get("seconds", 0)
            if not isinstance(seconds, (int, float)) or not 0 <= seconds <= 600:
                raise Failure("INVALID_ARGUMENT", f"run: seconds {seconds!r} outside [0, 600]")
            lim = self.limiters[cmd["id"]]
            deadline = time.monotonic() + seconds
            n = 0
            while True:
                try:
                    await done(lim.acquire(timeout=deadline - time.monotonic()))
                except sluice.DeadlineExceeded:
                    break
                n += 1
            return {"acquired": n}
        if op == "release":
            rid = cmd.get("id")
            r = self.resource(rid)
            del self.res[rid], self.limiters[rid]
            await done(r.release())
            return {"ok": True}
        if op == "allow":
            a = await done(
                self.client.allow(cmd.get("resource", ""), cmd.get("domain", ""), tokens=max(cmd.get("tokens") or 1, 1), max_wait=0)
            )
            return {"status": a.status, "granted": a.granted}
        if op == "reserve":
            try:
                h = await done(
                    self.client.reserve_copies(
                        cmd.get("resource", ""), cmd.get("domain", ""), copies=cmd.get("copies", 1), min_copies=cmd.get("min", 0)
                    )
                )
            except sluice.OverLimit:
                return {"granted": 0, "hold": None}
            self.next_hold += 1
            self.holds[self.next_hold] = h
            return {"granted": h.copies, "hold": self.next_hold}
        if op == "free":
            h = self.holds.pop(cmd.get("hold"), None)  # type: ignore[arg-type]
            if h is None:
                raise Failure("NOT_FOUND", "free: no such hold")
            await done(h.release())
            return {"ok": True}
        if op == "close":
            await done(self.client.close())
            return {"ok": True}
        raise Failure("INVALID_ARGUMENT", f"unknown op {op!r}")


def answer_error(e: BaseException) -> Dict[str, Any]:
    if isinstance(e, Failure):
        return {"error": {"code": e.code, "message": e.message}}
    if isinstance(e, sluice.SluiceError):
        return {"error": {"code": e.code_name, "message": e.message}}
    return {"error": {"code": "UNKNOWN", "message": f"{type(e).__name__}: {e}"}}


async def serve(args: argparse.Namespace) -> int:
    tls = None
    if args.tls_ca:
        tls = sluice.TLS(root_certificates=args.tls_ca, certificate_chain=args.tls_cert, private_key=args.tls_key)
    make: Any = sluice.aio.Client if args.asyncio else sluice.Client
    client = make(args.server, args.client_id, tls=tls, call_timeout=5.0, session_ttl=5.0, fail_open=False)
    d = Driver(client)
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)  # the loop runs the client's tasks meanwhile
        if not line:
            break
        line = line.strip()
        if not line:
            continue
        op = None
        try:
            cmd = json.loads(line)
            if not isinstance(cmd, dict):
                raise Failure("INVALID_ARGUMENT", "a command is a JSON object")
            op = cmd.get("op")
            out = await d.do(cmd)
        except json.JSONDecodeError as e:
            out = {"error": {"code": "INVALID_ARGUMENT", "message": f"not a JSON command: {e}"}}
        except Exception as e:  # every failure is an answer; the driver keeps serving
            out = answer_error(e)
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
        if op == "close" and "error" not in out:
            return 0
    await done(client.close())
    return 0


def main(argv: Optional[list] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--server", required=True, help="the Sluice server (host:port)")
    p.add_argument("--client-id", required=True, help="the client id")
    p.add_argument("--tls-ca", help="speak TLS, verifying the server with these CAs (PEM)")
    p.add_argument("--tls-cert", help="client certificate (PEM) for mTLS")
    p.add_argument("--tls-key", help="the private key of --tls-cert (PEM)")
    p.add_argument(
        "--asyncio",
        action="store_true",
        default=os.environ.get("SLUICE_PYTHON_ASYNCIO", "") not in ("", "0"),
        help="drive sluice.aio.Client instead of sluice.Client (default: $SLUICE_PYTHON_ASYNCIO)",
    )
    args = p.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    return asyncio.run(serve(args))


if __name__ == "__main__":
    sys.exit(main())
