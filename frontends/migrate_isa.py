"""The migration assistant's ``nisa`` rewrites: a classic instruction call, which returns a new
tile, becomes an ``nl.ndarray`` allocation (shape, dtype and buffer by the classic result rules
of ``nki.isa_spec``) and the destination-first call; classic-only arguments (``pred=``,
``expr=``, ``shape=``, ``dst_rmw_op=``) become their current forms."""

from __future__ import annotations

import ast
from typing import Any

from nki import isa_spec

from . import migrate_index as ix
from . import migrate_table as tbl
from .migrate_index import Ctx, Unsupported


def none(node: ast.AST | None) -> bool:
    """A missing argument or a literal None."""
    return node is None or (isinstance(node, ast.Constant) and node.value is None)


def bind_call(call: ast.Call, params: tuple[str, ...], api: str) -> dict[str, ast.AST]:
    """The arguments of a call to an ``nl`` function, by name (Unsupported when they do not
    fit ``params``)."""
    if len(call.args) > len(params) or any(k.arg is None for k in call.keywords):
        raise Unsupported(f"{api} called with more arguments than it takes")
    out = dict(zip(params, call.args))
    for k in call.keywords:
        if k.arg not in params:
            raise Unsupported(f"{api} has no argument {k.arg}=")
        out[k.arg] = k.value
    if params[0] not in out:
        raise Unsupported(f"{api} without its {params[0]} argument")
    return out


class IsaCalls:
    """Mixed into ``frontends.migrate_rewrite.Func``: classic ``nisa`` calls to current ones."""

    src: Any
    nl: str
    nisa: str
    tiles: dict[str, str]
    bases: set[str]

    def isa_name(self, call: ast.AST) -> str | None:
        """The instruction of a classic-form ``nisa`` call used for its value."""
        if not isinstance(call, ast.Call):
            return None
        q = self.src.qual(call.func) or ""
        if not q.startswith("nisa."):
            return None
        try:
            instr = isa_spec.get(q[5:])
        except KeyError:
            return None
        return instr.name if instr.classic is not None else None

    def classic_statement_call(self, call: ast.Call) -> bool:
        """An expression statement ``nisa.x(...)``: classic when it does not fit the current
        form, or passes a classic-only keyword (mask, dst_rmw_op)."""
        name = self.isa_name(call)
        if name is None:
            return False
        if any(k.arg in ("mask", "dst_rmw_op") and not none(k.value) for k in call.keywords):
            return True
        instr = isa_spec.get(name)
        if instr.current is None:
            return True
        try:
            isa_spec.signature(name, isa_spec.CURRENT).bind(
                *call.args, **{k.arg or "": k.value for k in call.keywords}
            )
        except TypeError:
            return True
        return False

    def nl_matmul(self, call: ast.Call, dst: str, ctx: Ctx) -> str:
        args = bind_call(call, ("x", "y", "transpose_x"), "nl.matmul")
        tx = args.get("transpose_x")
        if not (isinstance(tx, ast.Constant) and tx.value is True):
            raise Unsupported(
                "nl.matmul(x, y) without transpose_x=True transposes x itself; pass x with the "
                "contraction on the partitions: nisa.nc_matmul(dst=acc, stationary=x_t, moving=y)"
            )
        x, y = self.operand(args["x"], ctx), self.operand(args["y"], ctx)
        return f"{self.nisa}.nc_matmul(dst={dst}, stationary={x}, moving={y})"

    def isa(
        self,
        call: ast.Call,
        ctx: Ctx,
        new: str | None = None,
        dst: str | None = None,
        overwrite: bool = False,
    ):
        name = self.isa_name(call)
        assert name is not None
        if name in tbl.MANUAL_ISA:
            raise Unsupported(f"nisa.{name}: {tbl.MANUAL_ISA[name]}")
        instr = isa_spec.get(name)
        if any(k.arg is None for k in call.keywords):
            raise Unsupported(f"nisa.{name} called with **kwargs")
        try:
            bound = isa_spec.signature(name, isa_spec.CLASSIC).bind(
                *call.args, **{k.arg: k.value for k in call.keywords if k.arg}
            )
        except TypeError as e:
            msg = f"the arguments of nisa.{name} do not fit its classic form: {e}"
            raise Unsupported(msg) from None
        args: dict[str, Any] = dict(bound.arguments)
        counts = self.mask(call, ctx)
        args.pop("mask", None)
        dtype = args.pop("dtype", None)
        current = {p.name: p for p in instr.params(isa_spec.CURRENT)} if instr.current else {}
        kw: list[tuple[str, str]] = []
        shape = None
        rendered: dict[str, str] = {}
        if name == "affine_select":
            conds = self.axes.pred(args.pop("pred"))
            if len(conds) != 1:
                raise Unsupported("an affine_select predicate with several conditions")
            left, op, right = conds[0]
            pattern, cm, off = ix.affine_value(left + right.scale(-1))
            kw += [("pattern", pattern), ("channel_multiplier", cm)]
            tail = [("cmp_op", f"{self.nl}.{ix.CMP_OPS[op]}"), ("offset", off)]
        elif name == "iota":
            lin = self.axes.lin(args.pop("expr"))
            pattern, cm, off = ix.affine_value(lin)
            kw += [("pattern", pattern), ("offset", off), ("channel_multiplier", cm)]
            shape, tail = ix.shape_text(ix.tile_axes([lin]), {}), []
        else:
            tail = []
        if name == "memset":
            rendered["shape"] = self.seg(args.pop("shape"))
        if name == "dma_copy" and "dst" in args:
            dst, _ = self.access(args.pop("dst"), ctx, counts)
            rmw = args.pop("dst_rmw_op", None)
            if not none(rmw):
                if self.op(rmw) != f"{self.nl}.add":
                    raise Unsupported("dst_rmw_op other than add (dma_compute adds only)")
                src = self.operand(args.pop("src"), ctx, counts)
                reduce = f"reduce_op={self.nl}.add"
                return [f"{self.nisa}.dma_compute(dst={dst}, srcs=[{src}, {dst}], {reduce})"]
        if name == "nc_matmul" and none(args.get("perf_mode")):
            args.pop("perf_mode", None)
        for pname, node in args.items():
            if pname == "dst" and dst is None:
                dst, _ = self.access(node, ctx, counts)
                continue
            if pname not in current:
                if none(node):
                    continue
                raise Unsupported(f"nisa.{name}'s classic argument {pname}= has no current form")
            role = current[pname].role
            if none(node) and pname == "engine":
                continue
            if role == "op":
                text = self.op(node)
            elif role in ("in", "operand", "out"):
                text = self.operand(node, ctx, counts)
            else:
                text = self.seg(node)
            rendered[pname] = text
            kw.append((pname, text))
        kw += tail
        if name == "nc_matmul" and overwrite:  # (``t[...] = nisa.nc_matmul(...)`` replaces t:
            kw.append(("accumulate", "False"))  # the default adds every write after the first)
        lines = []
        if dst is None:
            dst = new or self.temp(f"{name}_out")
            lines.append(self.allocate(instr, dst, rendered, args, dtype, shape))
            dst = self.masked(dst, counts)
        text = ", ".join([f"dst={dst}"] + [f"{k}={v}" for k, v in kw])
        return lines + [f"{self.nisa}.{name}({text})"]

    def allocate(self, instr, new, rendered, args, dtype, shape) -> str:
        """``new = nl.ndarray(shape, dtype=..., buffer=...)`` by the classic result rules."""
        ins = [
            p.name for p in instr.params(isa_spec.CLASSIC) if p.role == "in" and p.name in rendered
        ]
        first = rendered[ins[0]] if ins else None
        full = args.get(ins[0]) if ins else None
        if isinstance(full, ast.Name) and first != full.id:  # a masked operand: the whole tile
            first = full.id
        if shape is None:
            if instr.name == "tensor_reduce":
                shape = _reduce_shape(first, args.get("axis"), args.get("keepdims"))
            elif instr.name in tbl.SHAPES:
                shape = tbl.SHAPES[instr.name].format(**rendered)
            elif first is not None:
                shape = f"{first}.shape"
            else:
                raise Unsupported(f"nisa.{instr.name}: its result shape is not known here")
        rule = instr.result_dtype.partition("|")[2]
        if dtype is not None:
            dt = self.seg(dtype)
        elif rule in ("data", "widest") and first is not None:
            dt = f"{first}.dtype"
            if rule == "widest" and len(ins) > 1:
                self.src.note(
                    getattr(args.get(ins[0]), "lineno", 0),
                    f"nisa.{instr.name}",
                    f"the result takes {first}'s dtype; classic NKI promoted to the widest "
                    f"input dtype: pass that one if the inputs differ",
                    rewritten=True,
                )
        elif rule in ("float32", "uint32"):
            dt = f"{self.nl}.{rule}"
            if instr.name == "nc_matmul" and "is_transpose" in rendered:
                dt = f"{rendered['stationary']}.dtype if {rendered['is_transpose']} else {dt}"
        else:
            raise Unsupported(f"nisa.{instr.name} needs dtype= to allocate its result")
        buffer = "sbuf"
        if instr.name == "nc_matmul":
            buffer = "psum"
        elif instr.name == "nc_transpose":
            eng = rendered.get("engine", "")
            data = args.get("data")
            on_vector = "vector" in eng or (not eng and self.buffer_of(data) == "psum")
            buffer = "sbuf" if on_vector else "psum"
        self.tiles[new] = buffer
        self.bases.add(new)
        return self.alloc_line(new, shape, dt, buffer)

    def alloc_line(self, name: str, shape: str, dtype: str, buffer: str) -> str:
        """``name = nl.ndarray(shape, dtype=..., buffer=nl.<buffer>)``."""
        return f"{name} = {self.nl}.ndarray({shape}, dtype={dtype}, buffer={self.nl}.{buffer})"

    def op(self, node: ast.AST) -> str:
        q = self.src.qual(node) or ""
        if q.startswith("np.") and q[3:] in tbl.NUMPY_OPS:
            return f"{self.nl}.{tbl.NUMPY_OPS[q[3:]]}"
        return self.seg(node)

    # ---- expressions --------------------------------------------------------------------------


def _reduce_shape(data: str | None, axis: ast.AST | None, keepdims: ast.AST | None) -> str:
    try:
        value = ast.literal_eval(axis) if axis is not None else None
    except ValueError:
        value = None
    axes = (value,) if isinstance(value, int) else tuple(value or ())
    if data is None or not axes or not all(isinstance(a, int) and a > 0 for a in axes):
        raise Unsupported("tensor_reduce with an axis that is not a literal: allocate dst by hand")
    k, m = min(axes), len(axes)
    keep = isinstance(keepdims, ast.Constant) and keepdims.value is True
    if k == 1:
        return f"({data}.shape[0], 1)" if not keep or m == 1 else f"({data}.shape[0],) + (1,) * {m}"
    return f"{data}.shape[:{k}]" + (f" + (1,) * {m}" if keep else "")
