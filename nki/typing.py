"""nki.typing (``import nki.typing as nt``): parameter annotations checked at trace time.

* ``nt.tensor[128, 512]``: the parameter must have exactly this shape.
* ``nt.mutable_tensor`` (optionally ``nt.mutable_tensor[128, 512]``): a parameter the kernel may
  write. A kernel that returns its outputs may write no other parameter."""

from __future__ import annotations

from typing import Any


class _TensorType:
    def __init__(self, mutable: bool, shape: tuple[Any, ...] | None = None) -> None:
        self.mutable = mutable
        self.shape = shape

    def __getitem__(self, shape: Any) -> _TensorType:
        shape = shape if isinstance(shape, tuple) else (shape,)
        return _TensorType(self.mutable, tuple(shape))

    def __repr__(self) -> str:
        base = "nt.mutable_tensor" if self.mutable else "nt.tensor"
        return base + (f"[{', '.join(map(str, self.shape))}]" if self.shape else "")


tensor = _TensorType(False)
mutable_tensor = _TensorType(True)


def annotation_of(ann: Any) -> _TensorType | None:
    """The nt annotation behind a parameter annotation (strings are resolved by name)."""
    if isinstance(ann, _TensorType):
        return ann
    if isinstance(ann, str):
        s = ann.replace(" ", "")
        for prefix, base in (
            ("nt.mutable_tensor", mutable_tensor),
            ("nt.tensor", tensor),
            ("mutable_tensor", mutable_tensor),
            ("tensor", tensor),
        ):
            if s.startswith(prefix):
                rest = s[len(prefix) :]
                if rest.startswith("[") and rest.endswith("]"):
                    try:
                        dims = tuple(int(x) for x in rest[1:-1].split(",") if x)
                    except ValueError:
                        return base
                    return base[dims]
                return base
    return None
