"""Host tables: host memory for a large table the GPU reads over UVA
(``ingot_host_table_*``, ingot.h "Host tables", docs/ple.md "Host tables").

    with ingot.HostTable.create(R * 160, "auto") as host:    # huge pages if the system has them
        table, scale = ingot.ngram_table_load("ckpt/", R, 160, out=host)
        print(host.strategy, host.huge_page_bytes)
        out = ingot.ngram_embed(cfg, ids, cu, context, ingot.reinterpret(table, "f8_e4m3"),
                                scale=scale)

The memory is host memory: on a CUDA context it is registered with the GPU
(page-locked, mapped) so kernels read it at its host address, row by row
over the bus; it is never copied to the device. Its views (``numpy()``,
``torch()``) are CPU arrays of that memory. Each view holds a reference to
the table: the memory is freed once the table is closed (or collected) and
no view of it is left. Wait for the GPU work that reads it before that.
"""

import ctypes

from ._core import Context, backend_available, check, default_context
from ._lib import lib
from ._tensor import int64_arg as _int64

HOST_TABLE_AUTO = 0
HOST_TABLE_HUGETLB_1G = 1 << 0
HOST_TABLE_HUGETLB_2M = 1 << 1
HOST_TABLE_THP = 1 << 2
HOST_TABLE_PINNED = 1 << 3

# name -> bit, in the order ingot_host_table_create tries them
HOST_TABLE_STRATEGIES = {
    "auto": HOST_TABLE_AUTO,
    "hugetlb-1g": HOST_TABLE_HUGETLB_1G,
    "hugetlb-2m": HOST_TABLE_HUGETLB_2M,
    "thp": HOST_TABLE_THP,
    "pinned": HOST_TABLE_PINNED,
}


def _strategies_arg(strategies):
    """A name ("thp"), a list of names, or the OR of HOST_TABLE_* bits -> bits."""
    if isinstance(strategies, int) and not isinstance(strategies, bool):
        if not 0 <= strategies < 1 << 32:
            raise ValueError(f"strategies: {strategies}, not a uint32 of HOST_TABLE_* bits")
        return strategies  # the library names bits that are no strategy
    try:
        names = [strategies] if isinstance(strategies, str) else list(strategies)
    except TypeError:
        raise TypeError(f"strategies: {strategies!r}, expected a name, a list of names or "
                        "HOST_TABLE_* bits") from None
    bits = 0
    for name in names:
        if not isinstance(name, str) or name.lower() not in HOST_TABLE_STRATEGIES:
            raise ValueError(f"strategies: {name!r} is not a host-table strategy "
                             f"({', '.join(HOST_TABLE_STRATEGIES)})")
        bits |= HOST_TABLE_STRATEGIES[name.lower()]
    if not names:
        raise ValueError("strategies: empty (pass 'auto' to allow every strategy)")
    return bits


class _Memory:
    """Owns the ``ingot_host_table_t``: destroyed when the last reference
    (the HostTable while open, each view) goes."""

    def __init__(self, handle):
        self.handle = handle

    def __del__(self):
        handle, self.handle = getattr(self, "handle", None), None
        if handle is not None:
            try:
                lib.ingot_host_table_destroy(handle)
            except Exception:  # interpreter shutdown
                pass


class _View:
    """Exposes bytes of the table through the array interface; numpy keeps
    it as the base of the arrays made from it, so every view (and every
    slice or torch tensor of a view) keeps the memory alive."""

    def __init__(self, memory, address, shape):
        self._memory = memory
        self.__array_interface__ = {"data": (address, False), "shape": shape,
                                    "typestr": "|u1", "version": 3}


class HostTable:
    """Host memory for a table (``ingot_host_table_t``), mapped with huge
    pages where the system allows and readable by the context's GPU.

    Make one with :meth:`create`; use it as a context manager or call
    :meth:`close`. Attributes: ``strategy`` (the name of the strategy used),
    ``nbytes`` (as asked), ``mapped_bytes`` (rounded up to the page),
    ``page_bytes``, ``huge_page_bytes`` (what the kernel backs with huge
    pages now), ``data_ptr`` (the address the ops take).
    """

    def __init__(self, memory, ctx):
        self._memory = memory
        self.ctx = ctx

    @classmethod
    def create(cls, nbytes, strategies="auto", ctx=None):
        """``ingot_host_table_create``: ``nbytes`` (>= 1) of host memory by
        the first allowed strategy that works, tried in the order
        hugetlb-1g, hugetlb-2m, thp, pinned.

        strategies: "auto" (all four), one name, a list of names, or the OR
            of HOST_TABLE_* bits. AUTO rounds a small table up to 1 GiB
            (its first try); name the strategies for small tables.
        ctx: an ingot.Context, or a device ("cpu", "cuda:1") for its
            default context; None: the CUDA default context when a GPU is
            available (the memory is registered with it), else the CPU one
            (the memory only).

        IngotError with the library's text: with one strategy, its failure
        by name (ALLOC_FAILED "no 2 MiB huge pages reserved ...",
        NOT_SUPPORTED for THP off, CUDA_ERROR for a refused registration);
        with several, each one's reason. The contents are unspecified."""
        nbytes = _int64("nbytes", nbytes)
        bits = _strategies_arg(strategies)
        if ctx is None:
            ctx = default_context("cuda" if backend_available("cuda") else "cpu")
        elif not isinstance(ctx, Context):
            ctx = default_context(ctx)
        handle = ctypes.c_void_p()
        with ctx._lock:
            status = lib.ingot_host_table_create(ctx.handle, nbytes, bits, ctypes.byref(handle))
            check(status, ctx.handle)
        return cls(_Memory(handle.value), ctx)

    # ---- state ---------------------------------------------------------------------------

    @property
    def closed(self):
        return self._memory is None

    @property
    def handle(self):
        """The ``ingot_host_table_t`` pointer (an int). ValueError once closed."""
        if self._memory is None:
            raise ValueError("ingot.HostTable is closed")
        return self._memory.handle

    def close(self):
        """Gives the memory up (idempotent): it is freed now, or when the
        last view of it goes. The GPU must be done reading it."""
        self._memory = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- what was obtained -------------------------------------------------------------------

    @property
    def strategy(self):
        """The strategy used: "hugetlb-1g", "hugetlb-2m", "thp" or "pinned"."""
        return lib.ingot_host_table_strategy_name(lib.ingot_host_table_strategy(self.handle)).decode()

    @property
    def nbytes(self):
        """The bytes asked for."""
        return lib.ingot_host_table_bytes(self.handle)

    @property
    def mapped_bytes(self):
        """nbytes rounded up to the page size: what is mapped (and registered)."""
        return lib.ingot_host_table_mapped_bytes(self.handle)

    @property
    def page_bytes(self):
        """The page size the strategy maps with (THP: asked for, not promised)."""
        return lib.ingot_host_table_page_bytes(self.handle)

    @property
    def huge_page_bytes(self):
        """How many bytes of the table huge pages back now (/proc/self/smaps).
        Only pages touched so far count: on a CPU context write the table
        first; cudaHostAlloc memory (pinned on CUDA) reports 0."""
        value = ctypes.c_int64()
        check(lib.ingot_host_table_huge_page_bytes(self.handle, ctypes.byref(value)))
        return value.value

    @property
    def data_ptr(self):
        """The table's first byte (aligned to its page), the pointer the ops take."""
        return lib.ingot_host_table_data(self.handle)

    # ---- views ---------------------------------------------------------------------------------

    def _shape(self, rows, row_bytes):
        nbytes = self.nbytes
        if row_bytes is None:
            if rows is not None:
                raise ValueError(f"rows: {rows}, given without row_bytes")
            return (nbytes,)
        row_bytes = _int64("row_bytes", row_bytes)
        if row_bytes < 1:
            raise ValueError(f"row_bytes: {row_bytes}, must be >= 1")
        if rows is None:
            if nbytes % row_bytes:
                raise ValueError(f"row_bytes: {row_bytes} does not divide the table's {nbytes} "
                                 "bytes (pass rows)")
            return (nbytes // row_bytes, row_bytes)
        rows = _int64("rows", rows)
        if rows < 0 or rows * row_bytes > nbytes:
            raise ValueError(f"rows, row_bytes: {rows} x {row_bytes} bytes do not fit the "
                             f"table's {nbytes} bytes")
        return (rows, row_bytes)

    def numpy(self, rows=None, row_bytes=None):
        """A writable uint8 numpy array of the table's memory: [nbytes], or
        [rows, row_bytes] (the first rows * row_bytes bytes; rows defaults to
        nbytes / row_bytes). ``.view(ml_dtypes.float8_e4m3fn)`` or
        ``ingot.reinterpret(a, "f8_e4m3")`` for the gather. The array keeps
        the memory alive."""
        import numpy

        shape = self._shape(rows, row_bytes)
        return numpy.asarray(_View(self._memory, self.data_ptr, shape))

    def torch(self, rows=None, row_bytes=None, dtype=None):
        """A CPU torch tensor of the table's memory, shaped as :meth:`numpy`,
        of ``dtype`` (a 1-byte torch dtype, default torch.uint8; e.g.
        torch.float8_e4m3fn for the gather). It is host memory, not device
        memory: the GPU reads it over the bus at this address (registered
        on a CUDA context), so pass it to the ops as it is, and do not
        ``.cuda()`` it (that copies the table). Registered memory is what
        torch calls pinned (``is_pinned()``, the check the ops make on a CPU
        tensor given to a CUDA context); on a CPU context it is not. The
        tensor keeps the memory alive."""
        import torch

        t = torch.from_numpy(self.numpy(rows, row_bytes))
        if dtype is not None and dtype != torch.uint8:
            if torch.empty((), dtype=dtype).element_size() != 1:
                raise TypeError(f"dtype: {dtype}, a view of the table needs a 1-byte dtype")
            t = t.view(dtype)
        return t

    def __repr__(self):
        if self.closed:
            return "ingot.HostTable(closed)"
        return (f"ingot.HostTable({self.strategy!r}, nbytes={self.nbytes}, "
                f"page_bytes={self.page_bytes}, ctx={self.ctx.backend}:{self.ctx.device})")


def host_table_strategy_name(strategy):
    """``ingot_host_table_strategy_name``: "thp" for HOST_TABLE_THP, ..."""
    return lib.ingot_host_table_strategy_name(int(strategy)).decode()


__all__ = [
    "HOST_TABLE_AUTO", "HOST_TABLE_HUGETLB_1G", "HOST_TABLE_HUGETLB_2M", "HOST_TABLE_PINNED",
    "HOST_TABLE_STRATEGIES", "HOST_TABLE_THP", "HostTable", "host_table_strategy_name",
]
