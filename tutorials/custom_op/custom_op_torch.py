"""(a + b) * a * b in PyTorch with the addition done by an NKI kernel, then trained through a
torch.autograd.Function; values and gradients are checked against native PyTorch.

Run: python tutorials/custom_op/custom_op_torch.py"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from add_kernel import grid, nki_tensor_add_kernel  # noqa: E402

from frontends.torch import autograd_function  # noqa: E402

# d(a + b)/da = d(a + b)/db = 1: the backward passes the output gradient through
NkiAdd = autograd_function(nki_tensor_add_kernel, lambda a, b, g: (g, g), grid=grid)


def main() -> int:
    ok = True
    for dtype in (torch.float32, torch.bfloat16):
        torch.manual_seed(0)
        a = torch.randn(256, 1024, dtype=dtype, requires_grad=True)
        b = torch.randn(256, 1024, dtype=dtype, requires_grad=True)
        out = NkiAdd.apply(a, b) * a * b  # NKI kernel instead of the built-in '+'
        out.sum().backward()
        ga, gb = a.grad.clone(), b.grad.clone()
        a.grad = b.grad = None
        ref = (a + b) * a * b
        ref.sum().backward()
        same = torch.equal(out, ref) and torch.equal(ga, a.grad) and torch.equal(gb, b.grad)
        ok &= same
        print(
            f"{str(dtype):15s} values and gradients: NKI and PyTorch "
            f"{'match' if same else 'DIFFER'}"
        )
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
