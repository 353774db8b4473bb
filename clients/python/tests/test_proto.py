"""The package is protobuf-neutral: no generated Python code, message
classes built at import from descriptors.binpb by whichever class-making
API the installed runtime has, calls through grpcio's generic API."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest
from google.protobuf import descriptor_pool, message_factory

from sluice import _proto

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "sluice"
API = pathlib.Path(__file__).resolve().parents[3] / "api"
PROTOS = ["doorman/doorman.proto", "quotaservice/quota_service.proto", "sluice/v1/leases.proto", "sluice/v1/limits.proto"]


def run_python(code: str, **env: str) -> str:
    """Runs code in a fresh interpreter on the package's sources."""
    e = dict(os.environ, PYTHONPATH=str(SRC), PYTHONDONTWRITEBYTECODE="1", **env)
    out = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_package_imports_no_generated_module():
    got = run_python(
        "import sys, sluice, sluice.aio, sluice._testing\n"
        "print(sorted(m for m in sys.modules if m.startswith('sluice') and '_pb2' in m))\n"
        "print(sorted(m for m in sys.modules if m.endswith('_pb2_grpc')))\n"
    )
    assert got.split("\n")[:2] == ["[]", "[]"], got
    assert not [p.name for p in PKG.rglob("*_pb2*")]


def _roundtrip(make) -> None:
    """Classes made by ``make`` from the pool's descriptors work: nested
    messages, repeated fields, enums, a Duration's well-known methods, the
    wire format."""
    req_cls = make(_proto.pool.FindMessageTypeByName("doorman.GetCapacityRequest"))
    req = req_cls(client_id="c")
    rr = req.resource.add(resource_id="r", priority=2, wants=7.5)
    rr.has.capacity, rr.has.expiry_time, rr.has.refresh_interval = 3, 100, 5
    back = req_cls.FromString(req.SerializeToString())
    assert back == req and back.resource[0].has.capacity == 3
    ar = make(_proto.pool.FindMessageTypeByName("sluice.v1.AllowResponse"))
    a = ar(status=ar.REJECTED_TIMEOUT)
    a.retry_after.FromNanoseconds(1_500_000_000)
    a2 = ar.FromString(a.SerializeToString())
    assert _proto.enum_name(a2, "status") == "REJECTED_TIMEOUT"
    assert a2.retry_after.ToNanoseconds() == 1_500_000_000 and a2.HasField("retry_after")
    assert ar.Status.Name(ar.OK) == "OK"


def test_classes_without_GetMessageClass(monkeypatch):
    """protobuf 4.21 has no message_factory.GetMessageClass: the classes
    come from MessageFactory(pool).GetPrototype."""
    monkeypatch.delattr(message_factory, "GetMessageClass", raising=False)
    make = _proto._class_maker()
    assert getattr(make, "__name__", "") == "GetPrototype"
    _roundtrip(make)


def test_classes_with_GetMessageClass(monkeypatch):
    """protobuf ≥ 4.22 (5.x, 6.x) has message_factory.GetMessageClass and
    it is preferred. Where the installed runtime lacks it (4.21), a
    stand-in with its signature checks that it is the one used."""
    real = getattr(message_factory, "GetMessageClass", None)
    used = []

    def get_message_class(descriptor):
        used.append(descriptor.full_name)
        if real is not None:
            return real(descriptor)
        return message_factory.MessageFactory(descriptor.file.pool).GetPrototype(descriptor)

    monkeypatch.setattr(message_factory, "GetMessageClass", get_message_class, raising=False)
    make = _proto._class_maker()
    assert make is get_message_class
    _roundtrip(make)
    assert "doorman.GetCapacityRequest" in used


@pytest.mark.parametrize("impl", ["python", "cpp"])
def test_each_protobuf_backend(impl):
    """The package works on each backend the installed runtime offers
    (Debian's 4.21 has python and cpp; upb, 5.x's default, is not there)."""
    code = (
        "from google.protobuf.internal import api_implementation as a\n"
        "import sluice, sluice.aio\n"
        "from sluice._proto import limits, duration, enum_name\n"
        "r = limits.OpenSessionRequest(ttl=duration(2.5))\n"
        "s = limits.ReserveResponse.FromString(limits.ReserveResponse(status=limits.ReserveResponse.OK).SerializeToString())\n"
        "print(a.Type(), limits.OpenSessionRequest.FromString(r.SerializeToString()).ttl.ToNanoseconds(), enum_name(s, 'status'))\n"
    )
    out = run_python(code, PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=impl).strip()
    if not out.startswith(impl):
        pytest.skip(f"this runtime has no {impl} backend ({out})")
    assert out == f"{impl} 2500000000 OK"


def test_a_private_pool():
    """The protos live in their own pool, so another copy of them in the
    process's default pool (generated code elsewhere) does not clash."""
    assert _proto.pool is not descriptor_pool.Default()
    with pytest.raises(KeyError):
        descriptor_pool.Default().FindMessageTypeByName("doorman.GetCapacityRequest")


def test_the_methods_match_the_services():
    methods = {v.path: v for v in vars(_proto).values() if isinstance(v, _proto.Method)}
    for service in ("doorman.Capacity", "quotaservice.QuotaService", "sluice.v1.Leases", "sluice.v1.Limits"):
        for m in _proto.pool.FindServiceByName(service).methods:
            if m.name == "GetServerCapacity":
                continue  # a server's call, not a client's
            got = methods[f"/{service}/{m.name}"]
            assert got.request.DESCRIPTOR.full_name == m.input_type.full_name
            assert got.response.DESCRIPTOR.full_name == m.output_type.full_name
            assert (got.client_streaming, got.server_streaming) == (m.client_streaming, m.server_streaming)


@pytest.mark.skipif(shutil.which("protoc") is None, reason="no protoc (apt-get install protobuf-compiler)")
def test_the_descriptors_and_stubs_are_fresh(tmp_path):
    """descriptors.binpb and the .pyi stubs are what generate.sh makes of
    api/ now: run clients/python/generate.sh after changing a .proto."""
    subprocess.run(
        ["protoc", "-I", str(API), "--include_imports", f"--descriptor_set_out={tmp_path / 'd.binpb'}", "--pyi_out", str(tmp_path), *PROTOS],
        check=True,
    )
    assert (tmp_path / "d.binpb").read_bytes() == (PKG / "_proto" / "descriptors.binpb").read_bytes()
    for p in PROTOS:
        stub = (PKG / "_proto" / (pathlib.Path(p).stem + ".pyi")).read_text().split("\n", 1)[1]
        assert stub == (tmp_path / p.replace(".proto", "_pb2.pyi")).read_text(), p


def test_the_constructors_have_no_test_hooks():
    import inspect

    import sluice.aio

    for cls in (sluice.Client, sluice.aio.Client):
        params = inspect.signature(cls).parameters
        assert not [p for p in params if p.startswith("_") or p in ("clock", "manual")], cls
