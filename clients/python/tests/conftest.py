"""Fixtures: a real `sluice server` on loopback (the binary named by
SLUICE_BIN, as the interop suite sets it, or built here with go build), a
fake clock, and an in-process doorman.Capacity test server that counts what
it is asked."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import threading
from concurrent import futures
from typing import Iterator, List, Optional, Tuple

import grpc
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "src"))

from sluice import _proto  # noqa: E402
from sluice._proto import doorman as pb  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[3]

CONFIG = """
resources:
  - identifier_glob: "fair/*"
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 30, refresh_interval: 5, learning_mode_duration: 0}
  - identifier_glob: "safe/*"
    capacity: 10
    safe_capacity: 2
    algorithm: {kind: STATIC, lease_length: 30, refresh_interval: 5, learning_mode_duration: 0}
limits:
  resources:
    api:
      domains:
        small: {size: 3, fill_rate: 0.0001, wait_timeout: 0s}
    sandboxes:
      algorithm: copies
      domain_limit: 2
      global_limit: 3
"""


@pytest.fixture(scope="session")
def sluice_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    b = os.environ.get("SLUICE_BIN")
    if b:
        return b
    out = tmp_path_factory.mktemp("bin") / "sluice"
    subprocess.run(["go", "build", "-o", str(out), "./cmd/sluice"], cwd=ROOT, check=True)
    return str(out)


def start_server(binary: str, directory: pathlib.Path, config: str, *flags: str) -> Tuple[str, subprocess.Popen]:
    path = directory / "config.yaml"
    path.write_text(config)
    p = subprocess.Popen(
        [binary, "server", "--config", str(path), "--listen", "127.0.0.1:0", "--log-level", "error", *flags],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None
    line = p.stdout.readline()
    if not line.startswith("listening on "):
        p.kill()
        raise RuntimeError(f"sluice server did not start: {line!r}")
    threading.Thread(target=p.stdout.read, daemon=True).start()
    return line.split()[-1], p


@pytest.fixture(scope="session")
def server(sluice_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The address of a real sluice server with CONFIG."""
    addr, p = start_server(sluice_bin, tmp_path_factory.mktemp("server"), CONFIG)
    yield addr
    p.terminate()
    p.wait(10)


class FakeClock:
    """A hand-moved clock, in Unix seconds."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.t = start
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            return self.t

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.t += seconds


def _handler(service: str, methods: dict) -> grpc.GenericRpcHandler:
    """A generic handler of unary methods (name -> (sluice._proto.Method,
    function)): no generated servicer."""
    return grpc.method_handlers_generic_handler(
        service,
        {
            name: grpc.unary_unary_rpc_method_handler(
                f, request_deserializer=m.request.FromString, response_serializer=m.response.SerializeToString
            )
            for name, (m, f) in methods.items()
        },
    )


class CapacityServer:
    """A doorman.Capacity test server on loopback: it grants what is
    wanted (at most ``capacity`` per resource) for ``lease_length`` seconds
    of the fake clock, and records every request. ``master`` set makes it
    answer as a non-master naming that address."""

    def __init__(self, clock: FakeClock, capacity: float = 100.0, lease_length: int = 20, refresh: int = 5) -> None:
        self.clock = clock
        self.capacity = capacity
        self.lease_length = lease_length
        self.refresh = refresh
        self.master: Optional[str] = None
        self.requests: List[pb.GetCapacityRequest] = []
        self.times: List[float] = []  # the fake clock at each request
        self.released: List[List[str]] = []
        self.lock = threading.Lock()
        self.srv = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.srv.add_generic_rpc_handlers(
            (
                _handler(
                    "doorman.Capacity",
                    {
                        "GetCapacity": (_proto.GET_CAPACITY, self.GetCapacity),
                        "ReleaseCapacity": (_proto.RELEASE_CAPACITY, self.ReleaseCapacity),
                        "Discovery": (_proto.DISCOVERY, self.Discovery),
                    },
                ),
            )
        )
        port = self.srv.add_insecure_port("127.0.0.1:0")
        self.addr = f"127.0.0.1:{port}"
        self.srv.start()

    def GetCapacity(self, request: pb.GetCapacityRequest, context: grpc.ServicerContext) -> pb.GetCapacityResponse:
        with self.lock:
            self.requests.append(request)
            self.times.append(self.clock())
        resp = pb.GetCapacityResponse()
        if self.master is not None:
            resp.mastership.master_address = self.master
            return resp
        now = int(self.clock())
        for r in request.resource:
            rr = resp.response.add(resource_id=r.resource_id, safe_capacity=1.5)
            rr.gets.capacity = min(r.wants, self.capacity)
            rr.gets.expiry_time = now + self.lease_length
            rr.gets.refresh_interval = self.refresh
        return resp

    def ReleaseCapacity(self, request: pb.ReleaseCapacityRequest, context: grpc.ServicerContext) -> pb.ReleaseCapacityResponse:
        with self.lock:
            self.released.append(list(request.resource_id))
        return pb.ReleaseCapacityResponse()

    def Discovery(self, request: pb.DiscoveryRequest, context: grpc.ServicerContext) -> pb.DiscoveryResponse:
        resp = pb.DiscoveryResponse(is_master=self.master is None)
        resp.mastership.master_address = self.master or self.addr
        return resp

    def stop(self) -> None:
        self.srv.stop(0)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def capacity_server(clock: FakeClock) -> Iterator[CapacityServer]:
    s = CapacityServer(clock)
    yield s
    s.stop()


def counts(s: CapacityServer) -> List[int]:
    """The number of resources in each request the server received."""
    with s.lock:
        return [len(r.resource) for r in s.requests]


