"""Inject your own NKI kernel for one ATen op of a compiled model.

Run: python tutorials/torch_backend/inject_kernel.py
``register_kernel("aten::gelu", gelu_tanh_kernel, guard=...)`` makes the "nki" backend run the
user kernel for aten::gelu where the guard accepts the call (2-D, at most 128 rows) and the
built-in kernel elsewhere. The script checks both paths against torch and that the report
names the kernel that ran, then prints PASS / FAIL."""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

import frontends.torch  # noqa: F401  (registers the "nki" backend)
import nki
import nki.language as nl
from frontends import torch_backend as tb


@nki.jit
def gelu_tanh_kernel(x):
    """out = gelu(x) with the tanh approximation; x (N, D), N <= 128, D <= 4096."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.gelu_apprx_tanh(nl.load(x)))
    return out


def small_2d(x: torch.Tensor, *args, **kwargs) -> str | None:
    return None if x.dim() == 2 and x.shape[0] <= 128 else f"shape {tuple(x.shape)}"


def main() -> int:
    tb.register_kernel("aten::gelu", gelu_tanh_kernel, guard=small_2d)
    torch.manual_seed(0)
    ok = True
    for shape, want_kernel, ref in (
        ((16, 32), "gelu_tanh_kernel", lambda t: F.gelu(t, approximate="tanh")),
        ((2, 16, 32), "gelu_kernel", F.gelu),  # guard refuses: the built-in exact gelu runs
    ):
        x = torch.randn(*shape)
        got = torch.compile(lambda t: F.gelu(t), backend="nki", dynamic=False)(x)
        rep = tb.reports()[-1]
        want = ref(x)
        err = (got - want).abs().max().item()
        ran = want_kernel in rep.kernel_calls
        # (fp32: a few units in the last place of |gelu(x)| <= 5, whichever formula runs)
        good = bool(torch.allclose(got, want, rtol=1e-6, atol=1e-6)) and ran
        ok &= good
        verdict = "ok" if good else "WRONG"
        print(f"x {shape}: ran {sorted(rep.kernel_calls)}, max |diff| {err:.2e} {verdict}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
