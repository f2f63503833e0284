"""Frontends register themselves with nki.jit: a kernel called with a registered framework's
tensors is routed to that frontend; nki never imports ``frontends`` by name."""

import subprocess
import sys

import numpy as np
import pytest

import nki
import nki.language as nl
from nki.errors import NKIError
from nki.frameworks import FRONTENDS, register_frontend


class _FakeTensor:
    def __init__(self, a):
        self.a = a


_FakeTensor.__module__ = "fakefw.tensors"


class _OtherTensor:
    pass


_OtherTensor.__module__ = "otherfw"


@nki.jit
def _double(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.multiply(nl.load(a), 2.0))
    return out


@pytest.fixture
def fake_frontends():
    saved = dict(FRONTENDS)

    def call(launch, args, kwargs):
        return ("fakefw", launch.run_numpy(*(x.a for x in args)))

    register_frontend("fakefw", ("fakefw",), call)
    register_frontend("otherfw", ("otherfw",), call)
    yield
    FRONTENDS.clear()
    FRONTENDS.update(saved)


def test_registered_frontend_receives_the_call(fake_frontends):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    who, out = _double(_FakeTensor(a))
    assert who == "fakefw"
    np.testing.assert_array_equal(out, a * 2)


def test_mixed_frameworks_are_rejected_at_the_call(fake_frontends):
    with pytest.raises(NKIError, match="mix of fakefw and otherfw tensors") as e:
        _double(_FakeTensor(np.zeros((2, 2), np.float32)), _OtherTensor())
    assert e.value.loc is not None and e.value.loc.file.endswith("test_registration.py")


def test_nki_does_not_import_frontends():
    code = (
        "import sys, numpy as np, nki, nki.language as nl\n"
        "@nki.jit\n"
        "def k(a):\n"
        "    o = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)\n"
        "    nl.store(o, value=nl.load(a))\n"
        "    return o\n"
        "k(np.ones((2, 2), np.float32))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'frontends'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
