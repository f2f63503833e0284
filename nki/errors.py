"""Errors raised by nki-sim, with the classic NKI error codes and the user's source location.

Every error a kernel author can provoke is an :class:`NKIError`. It carries

* ``code``: the classic error code where one exists (``err_num_partition_exceed_arch_limit``...),
  listed with its meaning and fix in ``nki.error_codes`` (``err.meaning``, ``err.fix``);
* ``loc``: the kernel source location (file, line, column) of the offending statement;
* ``instance`` / ``core``: for run-time errors, the SPMD grid instance and physical core;
* ``related``: other source locations involved (e.g. the second write of a race).

The traceback of an error raised through a kernel call is rewritten so that it ends in the
user's kernel source, not in simulator internals (see :func:`user_facing`).
"""

from __future__ import annotations

import ast
import bisect
import dis
import functools
import inspect
import linecache
import os
import sys
import sysconfig
import types
import warnings
from dataclasses import dataclass
from typing import Any

from .error_codes import fix, meaning
from .parsing import parse_file

__all__ = [
    "NKIError",
    "NKITypeError",
    "NKIShapeError",
    "NKIIndexError",
    "NKIMemoryError",
    "NKIControlFlowError",
    "NKIScopeError",
    "NKIDependencyError",
    "NKIRuntimeError",
    "NKIUnsupportedError",
    "NKIAttributeError",
    "NKIWarning",
    "AccumulateUninitializedWarning",
    "RawEnumWarning",
    "UnreturnedOutputWarning",
    "SrcLoc",
]

# Directories whose frames are "ours": a user's source location is the first frame outside them.
_PKG_DIRS = tuple(
    os.path.dirname(os.path.abspath(p)) + os.sep
    for p in (
        __file__,  # nki/
        os.path.join(os.path.dirname(__file__), "..", "simulator", "__init__.py"),
        os.path.join(os.path.dirname(__file__), "..", "frontends", "__init__.py"),
    )
)
_INTERNAL_PREFIXES = tuple(os.path.normpath(d) + os.sep for d in _PKG_DIRS)
# the kernel library is kernel source: its statements are the lines errors point at
_KERNEL_LIBRARY = os.path.normpath(os.path.join(os.path.dirname(__file__), "kernels")) + os.sep


@dataclass(frozen=True)
class SrcLoc:
    """A location in the user's kernel source."""

    file: str
    line: int
    col: int = 0
    func: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col + 1}"

    def source_line(self) -> str:
        return linecache.getline(self.file, self.line).rstrip("\n")


# the standard library (not site-packages) and code it generates (a dataclass's __init__ is
# "<string>") sit between our frames but are never the kernel author's statement
_STDLIB = os.path.normpath(sysconfig.get_paths()["stdlib"]) + os.sep
_SITE = tuple(os.path.normpath(sysconfig.get_paths()[k]) + os.sep for k in ("purelib", "platlib"))


@functools.lru_cache(maxsize=4096)
@functools.lru_cache(maxsize=4096)
def _is_internal(filename: str) -> bool:
    path = os.path.normpath(os.path.abspath(filename))
    if path.startswith(_KERNEL_LIBRARY):
        return False
    if path.startswith(_STDLIB) and not path.startswith(_SITE):
        return True
    return path.startswith(_INTERNAL_PREFIXES) or "<frozen" in filename or filename == "<string>"


def user_stacklevel() -> int:
    """``stacklevel`` for ``warnings.warn`` called from nki-sim code: the warning points at the
    first frame outside nki-sim (the user's call), not at simulator internals."""
    frame, level = sys._getframe(1), 1
    while frame is not None and _is_internal(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level


def is_internal_frame(depth: int = 1) -> bool:
    """Whether the caller of the function calling this one (``depth`` frames up) is nki-sim's
    own code rather than the kernel author's."""
    return _is_internal(sys._getframe(depth + 1).f_code.co_filename)


def user_frame(depth: int = 1) -> types.FrameType | None:
    """The first stack frame outside nki-sim's own packages (None if there is none)."""
    frame = sys._getframe(depth + 1)
    while frame is not None and _is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def user_loc(depth: int = 1) -> SrcLoc:
    """The first stack frame outside nki-sim's own packages (the kernel author's statement)."""
    frame = sys._getframe(depth)
    while frame is not None and _is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:  # called from inside our own package only (tests of internals)
        return SrcLoc("<unknown>", 0, 0, "")
    col = column(frame.f_code, frame.f_lasti)
    return SrcLoc(frame.f_code.co_filename, frame.f_lineno, col, frame.f_code.co_name)


def source_tree(file: str) -> ast.Module | None:
    """The parsed text of ``file`` (None when it is not available or not Python), parsed once
    per version of its text, under the parse lock (``nki.parsing``)."""
    return parse_file(file)


@functools.lru_cache(maxsize=256)
def _positions(code: types.CodeType) -> tuple[Any, ...]:
    return tuple(code.co_positions())


def column(code: types.CodeType, lasti: int) -> int:
    """The source column of the instruction at byte offset ``lasti`` of ``code`` (0 when the
    interpreter does not record columns)."""
    try:  # Python 3.11+: one (line, end, col, end_col) entry per 2-byte instruction
        return _positions(code)[lasti // 2][2] or 0
    except (AttributeError, IndexError, TypeError):
        return 0


def raise_loc(tb: types.TracebackType | None) -> SrcLoc | None:
    """The user's statement a traceback went through last (the innermost frame outside nki-sim):
    for an error raised below a kernel statement, that statement."""
    hit = None
    while tb is not None:
        if not _is_internal(tb.tb_frame.f_code.co_filename):
            hit = tb
        tb = tb.tb_next
    if hit is None:
        return None
    code = hit.tb_frame.f_code
    return SrcLoc(code.co_filename, hit.tb_lineno, column(code, hit.tb_lasti), code.co_name)


def return_loc(code: types.CodeType, run: Any) -> SrcLoc:
    """The ``return`` statement of the function ``code`` that ``run()`` (which calls it) ends at,
    found with a profile hook: for an error about a returned value, on that error path only.
    ``run`` may raise an NKIError; the function's first line when it never returns."""
    lines: list[int] = []

    def hook(frame: Any, event: str, _arg: Any) -> None:
        if event == "return" and frame.f_code is code:
            lines.append(frame.f_lineno)

    old = sys.getprofile()
    sys.setprofile(hook)
    try:
        run()
    except NKIError:
        pass
    finally:
        sys.setprofile(old)
    line = lines[-1] if lines else code.co_firstlineno
    src = linecache.getline(code.co_filename, line)
    return SrcLoc(code.co_filename, line, len(src) - len(src.lstrip()), code.co_name)


def kernel_def_loc(code: Any) -> SrcLoc:
    """Where the ``def`` of ``code`` is: its own line, past any decorators above it (Python's
    ``co_firstlineno`` is the first decorator's line)."""
    line = code.co_firstlineno
    for n in range(line, line + 64):
        text = linecache.getline(code.co_filename, n).lstrip()
        if not text:
            break
        if text.startswith(("def ", "async def ")):
            line = n
            break
    return SrcLoc(code.co_filename, line, 0, code.co_name)


def binding_failed(e: TypeError) -> bool:
    """Whether ``e``, caught right around a call, was raised because the call's arguments do not
    bind to the callee's parameters (no frame of the callee was entered)."""
    return e.__traceback__ is not None and e.__traceback__.tb_next is None


def arguments_checked(api: str) -> Any:
    """Decorator: a call of the decorated function whose arguments do not bind (a missing,
    extra or unknown one) is a located ``NKITypeError`` naming ``api`` and its parameters."""

    def deco(fn: Any) -> Any:
        empty = inspect.Parameter.empty
        params = [p.replace(annotation=empty) for p in inspect.signature(fn).parameters.values()]
        if params and params[0].name == "self":  # a method: callers do not pass self
            params = params[1:]
        sig = inspect.Signature(params)

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except TypeError as e:
                if not binding_failed(e):
                    raise
                text = str(e).replace(f"{fn.__name__}()", f"{api}()")
                raise NKITypeError(
                    f"{text} (signature: {api}{sig})", code="err_invalid_argument", loc=user_loc()
                ) from None

        return call

    return deco


class NKIError(Exception):
    """Base class of every error a kernel can raise in nki-sim."""

    default_code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        loc: SrcLoc | None = None,
        instance: tuple[int, ...] | None = None,
        core: int | None = None,
        related: tuple[tuple[str, SrcLoc], ...] = (),
    ) -> None:
        self.message = message
        self.code = code if code is not None else self.default_code
        self.loc = loc
        self.instance = instance
        self.core = core
        self.related = tuple(related)
        super().__init__(self._format())

    @property
    def meaning(self) -> str:
        """The code's one-line meaning from the error-code catalogue ('' without a code)."""
        return meaning(self.code) if self.code else ""

    @property
    def fix(self) -> str:
        """How to fix a kernel that raised this code, from the catalogue ('' without a code)."""
        return fix(self.code) if self.code else ""

    def with_context(self, *, loc: SrcLoc | None = None, instance=None, core=None) -> NKIError:
        """Fill in missing location / instance information (keeps what is already set)."""
        if self.loc is None and loc is not None:
            self.loc = loc
        if self.instance is None and instance is not None:
            self.instance = tuple(instance)
        if self.core is None and core is not None:
            self.core = core
        self.args = (self._format(),)
        return self

    def _format(self) -> str:
        head = f"[{self.code}] " if self.code else ""
        parts = []
        if self.loc is not None:
            parts.append(f"{self.loc}: {head}{self.message}")
            src = self.loc.source_line()
            if src:
                parts.append("    " + src)
                parts.append("    " + " " * self.loc.col + "^")
        else:
            parts.append(f"{head}{self.message}")
        for what, rloc in self.related:
            parts.append(f"  {what} at {rloc}")
            rsrc = rloc.source_line()
            if rsrc:
                parts.append("    " + rsrc.strip())
        if self.instance is not None:
            where = f"  in grid instance {tuple(self.instance)}"
            if self.core is not None:
                where += f" on physical core {self.core}"
            parts.append(where)
        return "\n".join(parts)

    def __str__(self) -> str:
        return self._format()


class NKITypeError(NKIError, TypeError):
    """Wrong dtype, wrong argument type or an op/engine that does not accept a dtype. Also a
    ``TypeError`` (``except TypeError`` keeps working, as with the classic simulator)."""


class NKIShapeError(NKIError, ValueError):
    """Partition / free size limits and shape mismatches. Also a ``ValueError``."""


class NKIIndexError(NKIError, IndexError):
    """Illegal index expressions and out-of-bounds accesses. Also an ``IndexError``, so
    ``except IndexError`` around an out-of-bounds indirect DMA works as it did classically."""

    default_code = "err_tensor_access_out_of_bound"


class NKIMemoryError(NKIError):
    """Operand in the wrong memory, or SBUF / PSUM capacity exceeded."""

    @classmethod
    def host_exhausted(cls, e: MemoryError, what: str, loc: SrcLoc | None) -> NKIMemoryError:
        """The ``err_host_memory_exhausted`` error for a ``MemoryError`` met while ``what``."""
        detail = str(e) or "no detail"
        return cls(
            f"the host ran out of memory while {what} ({type(e).__name__}: {detail}); use "
            "smaller shapes or a smaller launch grid",
            code="err_host_memory_exhausted",
            loc=loc,
        )


class NKIControlFlowError(NKIError):
    """Python control flow that depends on a traced (symbolic) value."""

    default_code = "err_control_flow_condition_depending_on_arange"


class NKIScopeError(NKIError):
    """A tile used outside the loop body that defined it."""

    default_code = "err_local_variable_used_out_of_scope"


class NKIDependencyError(NKIError):
    """Loop-carried dependencies in affine_range and races between SPMD instances."""

    default_code = "err_unexpected_output_dependencies"


class NKIRuntimeError(NKIError):
    """Errors found while executing a kernel (dynamic out-of-bounds, uninitialised reads)."""


class NKIUnsupportedError(NKIError):
    """A feature of the real NKI this simulator does not provide (yet)."""


class NKIWarning(UserWarning):
    """Base class of the warnings nki-sim gives about a kernel (something that runs but is
    probably wrong, such as output elements no instruction writes). Turn them into errors with
    ``warnings.simplefilter("error", nki.errors.NKIWarning)`` (pytest:
    ``-W error::nki.errors.NKIWarning``)."""


def warn_at(message: str, category: type[Warning], loc: SrcLoc | None) -> None:
    """Give a warning located at the kernel line ``loc`` (``<kernel>`` when it has none)."""
    warnings.warn_explicit(
        message,
        category,
        loc.file if loc is not None else "<kernel>",
        loc.line if loc is not None else 0,
    )


class AccumulateUninitializedWarning(NKIWarning):
    """``nc_matmul(..., accumulate=True)`` into PSUM that nothing wrote before (undefined
    behaviour on hardware; AWS's simulator warns too)."""


class UnreturnedOutputWarning(NKIWarning):
    """A kernel writes a ``shared_hbm`` tensor it created but never returns it (a forgotten
    ``return``): the caller never sees what it wrote."""


class CoreRaceWarning(NKIWarning):
    """The two cores of an LNC=2 launch reach the same shared-HBM elements through a dynamic
    (run-time) offset, one of them writing, with no meeting between them: what the kernel
    computes depends on the cores' timing. The simulator ran one order (core 0's accesses
    between two meetings before core 1's); a device may run another. A warning, not an
    error: AWS's own kernels rely on such timing (an output zeroed at the start of one core
    and written late by the other)."""


class SpillWarning(NKIWarning):
    """The blocks of a blocked on-chip tensor (``nl.ndarray((n, nl.par_dim(P), F))``) do not
    all fit in SBUF (or PSUM) beside the other live tiles. The Neuron compiler then saves
    blocks to the next memory down (HBM, or SBUF for PSUM) and reloads them (AWS's performance
    guide and memory hierarchy page): the kernel is correct but slower. Tiles that do not fit
    even with one block of each blocked tensor resident are an ``err_sbuf_capacity_exceeded``
    / ``err_psum_capacity_exceeded`` error."""


class DtypeRuleWarning(NKIWarning):
    """A call breaks a dtype rule of AWS's documentation in a way the hardware still computes
    exactly (a float tile transposed by the Tensor engine into an fp32 PSUM tile, which is a
    matmul with an identity): the kernel runs, and is told the documented rule."""


class DiscardedResultWarning(NKIWarning):
    """A call that returns a changed copy (``kernel.configure(checks="full")``) made as a
    statement of its own: the copy is dropped and the kernel itself is unchanged."""


def result_discarded() -> bool:
    """Whether the kernel author's statement that called the function calling this one drops
    its result (CPython's next instruction after the call is ``POP_TOP``:
    ``kernel.configure(...)`` alone on a line); False when nki-sim's own code called it."""
    frame = sys._getframe(2)
    if _is_internal(frame.f_code.co_filename):
        return False
    offsets, names = _ops(frame.f_code)
    i = bisect.bisect_right(offsets, frame.f_lasti)  # (f_lasti may be in the call's caches)
    return i < len(names) and names[i] == "POP_TOP"


@functools.lru_cache(maxsize=256)
def _ops(code: types.CodeType) -> tuple[list[int], list[str]]:
    ops = list(dis.get_instructions(code))
    return [o.offset for o in ops], [o.opname for o in ops]


class RawEnumWarning(NKIWarning):
    """A current-API kernel passes an enum argument as its raw integer (``dge_mode=3``). The
    NKI 0.3 release notes say raw integers are no longer accepted, while AWS's own NKI library
    still passes some (``dge_mode=3``): the kernel runs, and is told to name the member."""


class RemovedFormWarning(NKIWarning):
    """A form NKI 0.4-0.6 runs and NKI 0.7 removed (``while reg:`` on a register,
    ``nl.dynamic_range``): the kernel runs as on 0.6, and is told the 0.7 replacement."""


class NKIAttributeError(NKITypeError, AttributeError):
    """A tile or tensor attribute NKI does not have (``t.as_tile()``). Also an AttributeError,
    so ``hasattr`` / ``getattr(x, name, default)`` keep working on tiles."""

    default_code = "err_unsupported_attribute"


# --------------------------------------------------------------------------------------------
# User-facing tracebacks
# --------------------------------------------------------------------------------------------


def _raise_at(exc: BaseException, loc: SrcLoc) -> types.TracebackType | None:
    """A traceback entry that points at ``loc`` (the trick Jinja2 uses for template lines)."""
    if loc.line <= 0:
        return None
    code = compile("\n" * (loc.line - 1) + "raise __nki_exc__", loc.file, "exec")
    if loc.func:
        try:
            code = code.replace(co_name=loc.func)
        except (AttributeError, ValueError):
            pass
    exc.__traceback__ = None  # so the synthesised frame is the whole chain
    try:
        exec(code, {"__nki_exc__": exc, "__name__": "__nki_kernel__"})
    except BaseException as e:  # noqa: BLE001 - we want exactly this traceback
        tb = e.__traceback__
        return tb.tb_next if tb is not None else None
    return None


def locate_in_traceback(exc: NKIError) -> NKIError:
    """Give an error raised without a location the innermost kernel-author statement of its
    traceback (an error from a helper that does not know the call site)."""
    if exc.loc is not None:
        return exc
    tb, last = exc.__traceback__, None
    while tb is not None:
        if not _is_internal(tb.tb_frame.f_code.co_filename):
            last = tb
        tb = tb.tb_next
    if last is not None:
        code = last.tb_frame.f_code
        col = column(code, last.tb_lasti)
        exc.with_context(loc=SrcLoc(code.co_filename, last.tb_lineno, col, code.co_name))
    return exc


def user_facing(exc: BaseException) -> BaseException:
    """Rewrite ``exc``'s traceback: drop nki-sim frames and end at the kernel's statement. An
    NKIError that still has no location gets the caller's line (a launch or setting error)."""
    if isinstance(exc, NKIError) and exc.loc is None:
        exc.with_context(loc=raise_loc(exc.__traceback__) or user_loc())
    frames = []
    tb = exc.__traceback__
    exc.__traceback__ = None
    while tb is not None:
        if not _is_internal(tb.tb_frame.f_code.co_filename):
            frames.append(tb)
        tb = tb.tb_next
    tail = None
    loc = getattr(exc, "loc", None)
    if isinstance(exc, NKIError) and loc is not None:
        in_user = any(
            f.tb_frame.f_code.co_filename == loc.file and f.tb_lineno == loc.line for f in frames
        )
        if not in_user:  # run-time error: the kernel frame is gone, synthesise one
            tail = _raise_at(exc, loc)
    new_tb = tail
    for f in reversed(frames):
        new_tb = types.TracebackType(new_tb, f.tb_frame, f.tb_lasti, f.tb_lineno)
    exc.__traceback__ = new_tb
    return exc


def recursion_error(name: str, code: types.CodeType, exc: RecursionError) -> NKIError:
    """``err_kernel_recursion`` for kernel ``name`` (its ``code``) that called itself without
    end, located at the kernel's own line that calls it again."""
    tb, line = exc.__traceback__, code.co_firstlineno
    while tb is not None:
        if tb.tb_frame.f_code is code:
            line = tb.tb_lineno
            break
        tb = tb.tb_next
    return NKIError(
        f"kernel '{name}' calls itself (directly or through another kernel) without "
        "end: NKI kernels cannot recurse; unroll with nl.static_range or call a helper function "
        "instead",
        code="err_kernel_recursion",
        loc=SrcLoc(code.co_filename, line, 0, name),
    )
