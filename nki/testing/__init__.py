"""nki.testing: property-based correctness testing of NKI kernels (needs ``hypothesis``;
``pip install nki-sim[test]``).

* strategies: ``tile_shapes``, ``hbm_shapes``, ``dtypes``, ``arrays``, ``special_values``,
  ``grids`` (plus ``free_limit`` / ``sbuf_budget`` for the target's budgets);
* ``assert_allclose`` with per-dtype tolerances (``tolerance``, ``TOLERANCES``), widened for
  long fp32 accumulations (``accumulations``, ``accumulation_tolerance``);
* ``check_kernel``: draw inputs, run kernel and reference, compare, shrink a failure;
* ``assert_order_independent``: same results in every instance / ``affine_range`` order;
* hypothesis profiles ``ci`` / ``dev`` / ``thorough`` (``load_profile``), and a pytest plugin
  (``nki.testing.pytest_plugin``) with an ``nki_target`` fixture and ``nki_targets`` marker.

Example::

    from nki.testing import check_kernel, tile_shapes
    from hypothesis import strategies as st

    s = st.shared(tile_shapes(), key="s")
    check_kernel(add_kernel, lambda a, b: a + b, shapes=[s, s], dtypes="bfloat16")
"""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("hypothesis") is None:  # pragma: no cover - depends on the install
    # keep the package importable (the pytest plugin lives here and pytest loads it in every
    # session); using the toolkit says what is missing
    def __getattr__(name: str):
        raise ImportError(
            f"nki.testing.{name} needs hypothesis: pip install 'nki-sim[test]' "
            "(or pip install hypothesis)"
        )

else:
    from .check import KernelCheckError, KernelExample, ToolkitUsageError, check_kernel
    from .order import DEFAULT_SEEDS, OrderDependenceError, assert_order_independent
    from .profiles import PROFILES, load_profile, profile_name, register_profiles
    from .strategies import (
        arrays,
        dtypes,
        free_limit,
        grid_size,
        grids,
        hbm_shapes,
        sbuf_budget,
        special_values,
        tile_shapes,
    )
    from .tolerance import (
        TOLERANCES,
        accumulation_tolerance,
        accumulations,
        assert_allclose,
        compare,
        tolerance,
    )

    register_profiles()

TARGETS = ("trn1", "trn2", "trn3")

__all__ = [
    "DEFAULT_SEEDS",
    "KernelCheckError",
    "KernelExample",
    "OrderDependenceError",
    "PROFILES",
    "TARGETS",
    "TOLERANCES",
    "ToolkitUsageError",
    "accumulation_tolerance",
    "accumulations",
    "arrays",
    "assert_allclose",
    "assert_order_independent",
    "check_kernel",
    "compare",
    "dtypes",
    "free_limit",
    "grid_size",
    "grids",
    "hbm_shapes",
    "load_profile",
    "profile_name",
    "register_profiles",
    "sbuf_budget",
    "special_values",
    "tile_shapes",
    "tolerance",
]
