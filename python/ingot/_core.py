"""Statuses, errors, dtypes, contexts and streams."""

import ctypes
import enum
import sys
import threading

from ._lib import lib


class Status(enum.IntEnum):
    """``ingot_status``: what every C function returns."""

    SUCCESS = 0
    INVALID_ARGUMENT = 1  # a shape, dtype, pointer or value is wrong
    NOT_SUPPORTED = 2  # valid, but not implemented here (backend, arch)
    INSUFFICIENT_WORKSPACE = 3
    ALLOC_FAILED = 4  # only context creation allocates
    CUDA_ERROR = 5  # the CUDA runtime reported an error
    INTERNAL = 6  # a bug in ingot: please report it


class DType(enum.IntEnum):
    """``ingot_dtype``. ``str(DType.BF16)`` is the C name, "bf16"."""

    F32 = 1
    F16 = 2
    BF16 = 3
    F8_E4M3 = 4  # OCP FP8 E4M3 (finite, NaN = S.1111.111)
    I32 = 5
    I64 = 6
    U8 = 7
    U32 = 8
    U64 = 9

    def __str__(self):
        return lib.ingot_dtype_name(self).decode()

    @property
    def itemsize(self):
        return lib.ingot_dtype_size(self)

    @classmethod
    def parse(cls, value):
        """A DType from a DType, its C value, or its name ("bf16", "F8_E4M3")."""
        if isinstance(value, str):
            for d in cls:
                if value.lower() in (str(d), d.name.lower()):
                    return d
            raise ValueError(f"unknown ingot dtype {value!r}")
        return cls(value)


class IngotError(Exception):
    """An ingot C function failed. ``status`` is a :class:`Status`;
    ``message`` is the library's text "<op>: <argument>: <what>"."""

    def __init__(self, status, message):
        try:
            status = Status(status)
        except ValueError:
            pass
        self.status = status
        self.message = message or status_string(status)
        super().__init__(f"{self.message} ({status_name(status)})")


def status_string(status):
    """One-line description of a status ("invalid argument")."""
    return lib.ingot_status_string(int(status)).decode()


def status_name(status):
    """Name of a status ("INGOT_STATUS_INVALID_ARGUMENT")."""
    return lib.ingot_status_name(int(status)).decode()


def last_error(handle=None):
    """``ingot_last_error``: the context's last error text, or with None the
    last error of a context-free call on this thread."""
    return lib.ingot_last_error(handle).decode(errors="replace")


def check(status, handle=None):
    """Raises IngotError with the library's text when ``status`` is not 0."""
    if status != Status.SUCCESS:
        raise IngotError(status, last_error(handle))


def version():
    """The C library's version, "MAJOR.MINOR.PATCH"."""
    return lib.ingot_version().decode()


def version_number():
    """The C library's INGOT_VERSION_NUMBER (MAJOR * 10000 + MINOR * 100 + PATCH)."""
    return lib.ingot_version_number()


_BACKENDS = {"cpu": 0, "cuda": 1}


def _backend_value(name):
    try:
        return _BACKENDS[name.lower()]
    except (AttributeError, KeyError):
        raise ValueError(f"backend: {name!r}, expected 'cpu' or 'cuda'") from None


def backend_available(name):
    """True if a context for ``name`` ("cpu" or "cuda") can be created here
    (CUDA: compiled in and at least one device)."""
    return bool(lib.ingot_backend_available(_backend_value(name)))


class Context:
    """An ingot context: one backend on one device.

    ``Context("cpu")`` runs the reference (host memory, no stream);
    ``Context("cuda", device)`` runs the kernels on that GPU, enqueued on the
    current torch stream of ``device`` (or an explicit ``stream=``). Use it as
    a context manager, or call :meth:`close`; it is also freed when collected.
    Ops take their context from their arrays' device when none is passed
    (:func:`default_context`). A context may be shared between threads: the
    binding lets one call at a time into it.
    """

    def __init__(self, backend="cpu", device=0):
        handle = ctypes.c_void_p()
        check(lib.ingot_context_create(_backend_value(backend), int(device), ctypes.byref(handle)))
        self._handle = handle.value
        self._lock = threading.Lock()  # the C library: one call at a time per context
        self._shared = False  # a default context: never closed
        self.backend = backend.lower()
        self.device = int(device)

    @property
    def handle(self):
        """The ``ingot_context_t`` pointer (an int). ValueError once closed."""
        if self._handle is None:
            raise ValueError("ingot.Context is closed")
        return self._handle

    @property
    def closed(self):
        return self._handle is None

    @property
    def flags(self):
        """Bitwise OR of INGOT_CONTEXT_FLAG_* (``ingot_context_flags``)."""
        return int(lib.ingot_context_flags(self.handle))

    @property
    def force_reference(self):
        """True if INGOT_FORCE_REFERENCE was set (non-empty, not "0") when the
        context was created: every op runs the plainest reference kernels."""
        return bool(self.flags & FLAG_FORCE_REFERENCE)

    def check_device_errors(self, stream=None):
        """Synchronises the stream and raises IngotError if a kernel found an
        input it could only check on the device (e.g. a bad cu_seqlens on the
        CUDA backend); clears the record. Not during CUDA-graph capture.
        A no-op on CPU contexts."""
        stream = self._stream(stream)
        with self._lock:
            check(lib.ingot_context_check_device_errors(self.handle, stream), self.handle)

    def close(self):
        """Frees the context (idempotent). Synchronise the streams first.
        Does nothing on a :func:`default_context`, which lives as long as
        the process (CUDA graphs may have captured it)."""
        if getattr(self, "_shared", False):
            return
        handle, self._handle = getattr(self, "_handle", None), None
        if handle is not None:
            lib.ingot_context_destroy(handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to free with
            pass

    def __repr__(self):
        state = "closed" if self.closed else f"flags={self.flags:#x}"
        shared = ", default" if self._shared else ""
        return f"ingot.Context({self.backend!r}, device={self.device}, {state}{shared})"

    def _stream(self, stream):
        """The ``cudaStream_t`` (int or None) for a call on this context.

        CPU: None (NULL). CUDA: ``stream`` as given (an int, or an object with
        ``.cuda_stream`` like torch.cuda.Stream, or ``.ptr`` like cupy's); by
        default the current torch stream of the context's device when torch is
        loaded, else NULL (the legacy default stream).
        """
        if stream is None:
            if self.backend != "cuda":
                return None
            torch = sys.modules.get("torch")
            if torch is not None and torch.cuda.is_available():
                return torch.cuda.current_stream(self.device).cuda_stream or None
            return None
        for attr in ("cuda_stream", "ptr"):
            if hasattr(stream, attr):
                stream = getattr(stream, attr)
                break
        if not isinstance(stream, int):
            raise TypeError(f"stream: {stream!r} is not a CUDA stream (int or torch.cuda.Stream)")
        return stream or None


FLAG_FORCE_REFERENCE = 1 << 0


# ---- default contexts ----------------------------------------------------------------------

_default_contexts = {}
_default_contexts_lock = threading.Lock()


def device_key(device):
    """("cpu", 0) or ("cuda", index) from "cpu", "cuda", "cuda:1", a
    torch.device or a (type, index) pair; "cuda" without an index is torch's
    current CUDA device (0 without torch)."""
    if isinstance(device, tuple) and len(device) == 2:
        kind, index = device
    elif isinstance(device, str):
        kind, _, index = device.partition(":")
        index = int(index) if index else None
    elif hasattr(device, "type") and hasattr(device, "index"):  # torch.device
        kind, index = device.type, device.index
    else:
        raise TypeError(f"device: {device!r}, expected 'cpu', 'cuda', 'cuda:N' or a torch.device")
    kind = str(kind).lower()
    if kind not in _BACKENDS:
        raise ValueError(f"device: {device!r}, ingot runs on 'cpu' and 'cuda' devices")
    if kind == "cpu":
        return ("cpu", 0)
    if index is None:
        torch = sys.modules.get("torch")
        cuda = torch is not None and torch.cuda.is_available()
        index = torch.cuda.current_device() if cuda else 0
    return ("cuda", int(index))


def default_context(device="cpu"):
    """The context ops use when they are given none: one per device
    ("cpu", "cuda", "cuda:1", a torch.device), created on first use
    (thread-safe) and kept for the life of the process (``close()`` does
    nothing on it). Pass it to the workspace queries, or call its
    ``check_device_errors()``."""
    key = device_key(device)
    ctx = _default_contexts.get(key)
    if ctx is None:
        with _default_contexts_lock:
            ctx = _default_contexts.get(key)
            if ctx is None:
                ctx = Context(*key)
                ctx._shared = True
                _default_contexts[key] = ctx
    return ctx
