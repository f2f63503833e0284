"""Launch grids: ``kernel[g0, g1, ...]`` of the classic API (ints, ``nl.nc(k)``,
``nl.spmd_dim``), ``kernel[lnc]`` of the current API, and whether a grid's physical cores fit
the target."""

from __future__ import annotations

import math
import os

import numpy as np

from .environment import env_reader
from .errors import NKIError, user_loc
from .ir import Grid, GridDim
from .language.core import nc, spmd_dim
from .targets import get_target

MAX_GRID_INSTANCES = 1 << 20


def parse_grid(grid: object) -> Grid:
    """``kernel[g0, g1, ...]``: each dim is a positive int, ``nl.nc(k)`` or ``nl.spmd_dim``."""
    items = grid if isinstance(grid, tuple) else (grid,)
    dims = []
    for it in items:
        if isinstance(it, (int, np.integer)) and not isinstance(it, bool) and int(it) >= 1:
            dims.append(GridDim(((int(it), False),)))
        elif isinstance(it, nc):
            dims.append(GridDim(((it.k, True),)))
        elif isinstance(it, spmd_dim):
            dims.append(GridDim(it.factors))
        else:
            raise NKIError(
                f"invalid launch grid {grid!r}: each grid dimension must be a positive int, "
                f"nl.nc(k) or nl.spmd_dim(...), got {it!r}",
                code="err_invalid_grid",
                loc=user_loc(),
            )
    g = Grid(tuple(dims))
    n = math.prod(g.shape)
    if n > MAX_GRID_INSTANCES:
        # every instance is simulated one after another: a grid this large would run for hours
        # and its instance list alone could exhaust host memory
        raise NKIError(
            f"launch grid {grid!r} has {n} instances; the simulator runs at most "
            f"{MAX_GRID_INSTANCES} instances per launch (give each instance a bigger tile, or "
            "loop inside the kernel with nl.affine_range)",
            code="err_invalid_grid",
            loc=user_loc(),
        )
    return g


LNC_ENV_VAR = "NEURON_LOGICAL_NC_CONFIG"
_lnc_env = env_reader((LNC_ENV_VAR,))


def lnc_shaped(grid: Grid) -> bool:
    """A grid a current-API launch may have: none, or one dimension of 1 or 2 cores."""
    dims = grid.dims
    return not dims or (len(dims) == 1 and len(dims[0].factors) == 1 and grid.shape[0] <= 2)


def lnc_grid(grid: Grid, target_name: str) -> Grid:
    """A current-API launch: ``kernel(args)`` runs on one core (LNC=1, or the LNC of
    ``NEURON_LOGICAL_NC_CONFIG``), ``kernel[lnc](args)`` on ``lnc`` in {1, 2} physical cores of
    one logical NeuronCore (2 only where the target has LNC=2). Each core is one instance with
    private SBUF / PSUM; HBM is shared."""
    if not grid.dims:
        raw = _lnc_env()[0]
        env = os.fsdecode(raw).strip() if raw is not None else ""
        if not env:
            return grid
        if env not in ("1", "2"):
            raise NKIError(
                f"{LNC_ENV_VAR}={env!r}: the logical NeuronCore size must be 1 or 2",
                code="err_invalid_grid",
                loc=user_loc(),
            )
        lnc = int(env)
    elif len(grid.dims) == 1 and len(grid.dims[0].factors) == 1:
        lnc = grid.dims[0].factors[0][0]
    else:
        raise NKIError(
            f"a current-API kernel is launched as kernel[lnc] with one integer lnc in {{1, 2}}; "
            f"got the grid {grid} (multi-dimensional grids, nl.nc and nl.spmd_dim are classic)",
            code="err_invalid_grid",
            loc=user_loc(),
        )
    t = get_target(target_name)
    if lnc not in (1, 2) or lnc > t.max_lnc:
        allowed = "1 or 2" if t.max_lnc >= 2 else "1"
        raise NKIError(
            f"kernel[{lnc}]: a {t.name} logical NeuronCore spans {allowed} physical core(s); "
            f"the LNC of a current-API launch must be {allowed}",
            code="err_invalid_grid",
            loc=user_loc(),
        )
    return Grid((GridDim(((lnc, True),)),))


def check_grid_fits(grid: Grid, target_name: str) -> None:
    """The grid's physical cores fit the target's logical NeuronCore (``max_lnc``)."""
    t = get_target(target_name)
    if grid.num_cores > t.max_lnc:
        raise NKIError(
            f"launch grid {grid} places instances on {grid.num_cores} physical NeuronCores, but "
            f"a {t.name} logical NeuronCore has at most {t.max_lnc}",
            code="err_invalid_grid",
            loc=user_loc(),
        )
