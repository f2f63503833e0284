"""The garbage collector while the torch backend compiles a graph and runs it the first time.
``aot_autograd``'s passes, the graph plans and the kernel traces allocate enough to trigger a
full collection, and a full collection walks every object the process holds: torch's and
transformers' modules, about 480,000 objects and 0.2 s for the tiny Llama's first call. Inside
``new_objects_only`` the objects made before the block are set aside (``gc.freeze``), so a
collection there scans only the objects made inside it; after the block they are back
(``gc.unfreeze``), and the first full collection after it finds those that became unreachable
meanwhile. (Dynamo's own capture of the graph, before the backend is called, triggers another
full collection that this does not reach.)"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["new_objects_only"]


@contextmanager
def new_objects_only(active: bool = True) -> Iterator[None]:
    """Inside the block, a full garbage collection scans only the objects made inside it (see
    the module). Does nothing when objects are frozen already (by the process itself, or by an
    enclosing block), when collection is off, or when ``active`` is false. The freeze is the
    process's: another thread's ``gc.freeze()`` made while the block runs ends with it."""
    if not active or gc.get_freeze_count() or not gc.isenabled():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
