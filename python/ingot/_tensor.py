"""Array objects -> ``ingot_tensor`` descriptors, and output allocation.

Accepted: torch tensors (CPU and CUDA), numpy arrays, and any object with
``__cuda_array_interface__``, ``__array_interface__`` or ``__dlpack__``.
Nothing here imports torch, numpy or ml_dtypes unless an object of theirs
is passed (or an output must be allocated).

dtypes: int32, int64, float32, float16, bfloat16, float8_e4m3fn, uint8
(and uint32, uint64). numpy has no bfloat16 / float8 of its own: use
ml_dtypes.bfloat16 / ml_dtypes.float8_e4m3fn arrays, or a uint16 array for
bf16 (uint16 always means bf16: ingot has no u16) and
``reinterpret(uint8_array, "f8_e4m3")`` for fp8 (uint8 otherwise means u8).

Strides go to the library in elements; it needs a contiguous last dimension
and non-negative strides (it reports the argument otherwise). Streams: torch
tensors are used on the op's stream (the current torch stream by default);
a CUDA DLPack producer is asked to make its data ready on that stream; a
``__cuda_array_interface__`` producer's own stream is not waited on:
synchronise it first.
"""

import contextlib
import ctypes
import functools
import operator
import sys

from ._core import Context, DType, IngotError, Status, default_context, last_error
from ._lib import TENSOR_MAX_DIMS, ingot_tensor


class reinterpret:
    """Passes ``array`` to ingot as ``dtype`` (a DType or a name such as
    "f8_e4m3" or "bf16"), which must have the same element size as the
    array's own dtype: e.g. ``reinterpret(u8_table, "f8_e4m3")``."""

    def __init__(self, array, dtype):
        self.array = array
        self.dtype = DType.parse(dtype)

    def __repr__(self):
        return f"ingot.reinterpret({self.array!r}, {str(self.dtype)!r})"


class Described:
    """A descriptor with what is needed to use it: the source object, its
    framework ("torch", "numpy" or "other"), its device ("cpu"/"cuda", index),
    and objects to keep alive until the C call returns (DLPack capsules)."""

    __slots__ = ("obj", "tensor", "framework", "device", "keepalive")

    def __init__(self, obj, tensor, framework, device, keepalive=None):
        self.obj, self.tensor, self.framework = obj, tensor, framework
        self.device, self.keepalive = device, keepalive

    @property
    def shape(self):
        return tuple(self.tensor.shape[: self.tensor.ndim])

    def ref(self):
        return ctypes.byref(self.tensor)


# ---- dtype tables -------------------------------------------------------------

# numpy dtype names (ml_dtypes' types report "bfloat16" / "float8_e4m3fn").
_NUMPY_DTYPES = {
    "float32": DType.F32, "float16": DType.F16, "bfloat16": DType.BF16,
    "float8_e4m3fn": DType.F8_E4M3, "int32": DType.I32, "int64": DType.I64,
    "uint8": DType.U8, "uint16": DType.BF16, "uint32": DType.U32, "uint64": DType.U64,
}
# array-interface typestr without the byte-order character
_TYPESTRS = {
    "f4": DType.F32, "f2": DType.F16, "i4": DType.I32, "i8": DType.I64,
    "u1": DType.U8, "u2": DType.BF16, "u4": DType.U32, "u8": DType.U64,
}
# DLPack (type code, bits): kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4,
# kDLFloat8_e4m3fn 10.
_DLPACK_DTYPES = {
    (2, 32): DType.F32, (2, 16): DType.F16, (4, 16): DType.BF16, (10, 8): DType.F8_E4M3,
    (0, 32): DType.I32, (0, 64): DType.I64, (1, 8): DType.U8, (1, 16): DType.BF16,
    (1, 32): DType.U32, (1, 64): DType.U64,
}
_torch_dtypes = None


def _torch_dtype_table(torch):
    global _torch_dtypes
    if _torch_dtypes is None:
        table = {
            torch.float32: DType.F32, torch.float16: DType.F16, torch.bfloat16: DType.BF16,
            torch.int32: DType.I32, torch.int64: DType.I64, torch.uint8: DType.U8,
        }
        for name, d in (("float8_e4m3fn", DType.F8_E4M3), ("uint16", DType.BF16),
                        ("uint32", DType.U32), ("uint64", DType.U64)):
            if hasattr(torch, name):
                table[getattr(torch, name)] = d
        _torch_dtypes = table
    return _torch_dtypes


# ---- descriptors ----------------------------------------------------------------

def _fill(name, data, dtype, shape, strides):
    ndim = len(shape)
    if ndim > TENSOR_MAX_DIMS:
        raise ValueError(f"{name}: {ndim} dimensions, ingot takes at most {TENSOR_MAX_DIMS}")
    t = ingot_tensor()
    t.data = data or None
    t.dtype = int(dtype)
    t.ndim = ndim
    t.shape[:ndim] = [int(n) for n in shape]  # one slice assignment each: the hot path
    t.stride[:ndim] = [int(s) for s in strides]
    return t


def _contiguous_strides(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


def _element_strides(name, byte_strides, itemsize):
    if any(s % itemsize for s in byte_strides):
        raise ValueError(f"{name}: byte strides {tuple(byte_strides)} are not multiples of "
                         f"the element size {itemsize}")
    return [s // itemsize for s in byte_strides]


def _unknown_dtype(name, what):
    return TypeError(f"{name}: dtype {what} has no ingot equivalent (int32, int64, float32, "
                     "float16, bfloat16, float8_e4m3fn, uint8, uint32, uint64; uint16 = bf16)")


def _from_torch(name, x, torch):
    dtype = _torch_dtype_table(torch).get(x.dtype)
    if dtype is None:
        raise _unknown_dtype(name, x.dtype)
    device = (x.device.type, x.device.index or 0)
    t = _fill(name, x.data_ptr(), dtype, x.shape, x.stride())
    return Described(x, t, "torch", device)


# numpy dtype object -> DType (None: no equivalent, or not native byte order);
# dtype.name is slow Python code in numpy, so each dtype is looked up once.
_numpy_dtype_cache = {}


def _numpy_dtype(np_dtype):
    try:
        return _numpy_dtype_cache[np_dtype]
    except KeyError:
        d = _NUMPY_DTYPES.get(np_dtype.name) if np_dtype.isnative else None
        _numpy_dtype_cache[np_dtype] = d
        return d


def _from_numpy(name, x, writable):
    dtype = _numpy_dtype(x.dtype)
    if dtype is None:
        raise _unknown_dtype(name, x.dtype.str)
    if writable and not x.flags.writeable:
        raise ValueError(f"{name}: the array is read-only")
    strides = _element_strides(name, x.strides, x.itemsize)
    t = _fill(name, x.__array_interface__["data"][0], dtype, x.shape, strides)
    return Described(x, t, "numpy", ("cpu", 0))


def _from_interface(name, obj, iface, device, writable):
    if iface.get("mask") is not None:
        raise ValueError(f"{name}: masked arrays are not supported")
    data = iface.get("data")
    if not isinstance(data, tuple):
        raise TypeError(f"{name}: the array interface gives no data pointer")
    ptr, readonly = data
    if writable and readonly:
        raise ValueError(f"{name}: the array is read-only")
    typestr = iface["typestr"]
    dtype = _TYPESTRS.get(typestr[1:])
    if dtype is None or typestr[0] == ">":
        raise _unknown_dtype(name, typestr)
    shape = tuple(iface["shape"])
    strides = iface.get("strides")
    strides = (_contiguous_strides(shape) if strides is None
               else _element_strides(name, strides, dtype.itemsize))
    ptr += iface.get("offset", 0)
    return Described(obj, _fill(name, ptr, dtype, shape, strides), "other", device)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

# DLPack device types: kDLCPU 1, kDLCUDA 2, kDLCUDAHost 3, kDLCUDAManaged 13.
_DLPACK_DEVICES = {1: "cpu", 2: "cuda", 3: "cpu", 13: "cuda"}


def _from_dlpack(name, obj, stream):
    device_type, device_id = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else (1, 0)
    kind = _DLPACK_DEVICES.get(int(device_type))
    if kind is None:
        raise TypeError(f"{name}: DLPack device type {device_type} is neither CPU nor CUDA")
    if kind == "cuda":
        # The producer makes the data ready on our stream (1: legacy default).
        capsule = obj.__dlpack__(stream=stream or 1)
    else:
        capsule = obj.__dlpack__()
    # A legacy "dltensor" capsule still named so is freed by its own
    # destructor: keep it alive for the call and let it go.
    managed = _DLManagedTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    dl = managed.dl_tensor
    dtype = _DLPACK_DTYPES.get((dl.dtype.code, dl.dtype.bits))
    if dtype is None or dl.dtype.lanes != 1:
        raise _unknown_dtype(name, f"DLPack (code {dl.dtype.code}, bits {dl.dtype.bits}, "
                                   f"lanes {dl.dtype.lanes})")
    shape = tuple(dl.shape[i] for i in range(dl.ndim))
    strides = (tuple(dl.strides[i] for i in range(dl.ndim)) if dl.strides
               else _contiguous_strides(shape))
    ptr = (dl.data or 0) + dl.byte_offset
    t = _fill(name, ptr, dtype, shape, strides)
    return Described(obj, t, "other", (kind, int(dl.device.device_id)), keepalive=capsule)


def _not_an_array(name, obj):
    return TypeError(f"{name}: {type(obj).__name__} is not an array (pass a torch tensor, "
                     "a numpy array, or an object with __dlpack__ or an array interface)")


def describe(obj, name, stream=None, writable=False):
    """An ``ingot_tensor`` for ``obj`` (see the module docstring). ``name``
    is the argument's name for error texts; ``stream`` is the consumer stream
    a CUDA DLPack producer must make the data ready on; ``writable`` rejects
    read-only arrays (outputs)."""
    override = None
    if isinstance(obj, reinterpret):
        obj, override = obj.array, obj.dtype
    torch = sys.modules.get("torch")
    numpy = sys.modules.get("numpy")
    if torch is not None and isinstance(obj, torch.Tensor):
        d = _from_torch(name, obj, torch)
    elif numpy is not None and isinstance(obj, numpy.ndarray):
        d = _from_numpy(name, obj, writable)
    elif hasattr(obj, "__cuda_array_interface__"):
        iface = obj.__cuda_array_interface__
        d = _from_interface(name, obj, iface, ("cuda", None), writable)
    elif hasattr(obj, "__array_interface__"):
        d = _from_interface(name, obj, obj.__array_interface__, ("cpu", 0), writable)
    elif hasattr(obj, "__dlpack__"):
        d = _from_dlpack(name, obj, stream)
    else:
        raise _not_an_array(name, obj)
    if override is not None:
        own = DType(d.tensor.dtype)
        if own.itemsize != override.itemsize:
            raise ValueError(f"{name}: cannot reinterpret {own} ({own.itemsize} bytes) "
                             f"as {override} ({override.itemsize} bytes)")
        d.tensor.dtype = int(override)
    return d


def allocate(like, name, shape, dtype):
    """A new, uninitialised array of ``shape`` and ``dtype`` (DType) from the
    library of ``like`` (a Described): a torch tensor on the same device, or
    a numpy array (bf16: ml_dtypes.bfloat16 if installed, else uint16)."""
    if like.framework == "torch":
        torch = sys.modules["torch"]
        torch_dtype = {DType.I64: torch.int64, DType.I32: torch.int32, DType.U8: torch.uint8,
                       DType.F32: torch.float32, DType.BF16: torch.bfloat16}[dtype]
        return torch.empty(shape, dtype=torch_dtype, device=like.obj.device)
    if like.device[0] != "cpu":
        raise TypeError(f"{name}: pass {name}= explicitly for CUDA arrays that are not torch tensors "
                        "(the wrapper only allocates torch tensors and numpy arrays)")
    import numpy

    if dtype == DType.BF16:
        try:
            import ml_dtypes

            np_dtype = ml_dtypes.bfloat16
        except ImportError:
            np_dtype = numpy.uint16
    else:
        np_dtype = {DType.I64: numpy.int64, DType.I32: numpy.int32, DType.U8: numpy.uint8,
                    DType.F32: numpy.float32}[dtype]
    return numpy.empty(shape, dtype=np_dtype)


# ---- shared by the op modules --------------------------------------------------------------


def int64_arg(name, value):
    """``value`` as a Python int that fits int64, else OverflowError (or
    TypeError for a non-integer) naming ``name``."""
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: {value!r} is not an integer") from None
    if not -(1 << 63) <= v < 1 << 63:
        raise OverflowError(f"{name}: {v} does not fit in int64")
    return v


def float_arg(name, value):
    """``value`` as a Python float, else TypeError naming ``name``."""
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: {value!r} is not a number") from None


def dtype_arg(name, value):
    """A DType from a DType, its C value or its name, else ValueError naming ``name``."""
    try:
        return DType.parse(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {value!r} is not an ingot dtype (e.g. 'f32', 'bf16', "
                         "'f16')") from None


# ---- the context argument ---------------------------------------------------------------------


def _describe_value(value):
    """What a wrong argument is, for error texts: "None", "an int",
    "a numpy.ndarray of shape (2, 8)"."""
    if value is None:
        return "None"
    cls = type(value)
    name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    article = "an" if name[0] in "aeiouAEIOU" else "a"
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple):  # numpy, torch.Size
        return f"{article} {name} of shape {tuple(shape)}"
    return f"{article} {name}"


def optional_context(legacy_defaults=None):
    """Decorator of the ops and queries, whose ``ctx=None`` is keyword-only:
    callers may also put an ingot.Context first, the older form (its calls
    then also get ``legacy_defaults``, keywords that keep what such calls
    returned before, unless given). A None first argument, or a Context in
    another position, is a TypeError that names the parameters."""

    def wrap(fn):
        code = fn.__code__
        first = code.co_varnames[0]
        signature = f"{fn.__name__}({first}, ...)"

        @functools.wraps(fn)
        def call(*args, **kwargs):
            if args:
                head = args[0]
                if isinstance(head, Context):
                    if "ctx" in kwargs:
                        raise TypeError(f"{signature}: ctx given twice (first and as ctx=)")
                    kwargs["ctx"] = head
                    args = args[1:]
                    if legacy_defaults:
                        for key, value in legacy_defaults.items():
                            kwargs.setdefault(key, value)
                elif head is None:
                    raise TypeError(f"{signature}: the first argument is None, expected {first} "
                                    "(an ingot.Context may come before it, or pass ctx=)")
                for i, value in enumerate(args[1:], 2):
                    if isinstance(value, Context):
                        raise TypeError(f"{signature}: argument {i} is an ingot.Context: pass it "
                                        "first or as ctx=")
            return fn(*args, **kwargs)

        return call

    return wrap


def device_of(obj, name):
    """("cpu", 0) or ("cuda", index) of an array, read without describing it
    (index None: a CUDA array that does not say its device). TypeError
    naming ``name`` for None or a non-array."""
    if isinstance(obj, reinterpret):
        obj = obj.array
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        kind, index = obj.device.type, obj.device.index
        if kind not in ("cpu", "cuda"):
            raise ValueError(f"{name}: a tensor on {obj.device}, ingot runs on cpu and cuda")
        return (kind, index or 0)
    if hasattr(obj, "__dlpack_device__"):
        device_type, index = obj.__dlpack_device__()
        kind = _DLPACK_DEVICES.get(int(device_type))
        if kind is None:
            raise TypeError(f"{name}: DLPack device type {device_type} is neither CPU nor CUDA")
        return (kind, 0 if kind == "cpu" else int(index))
    if hasattr(obj, "__cuda_array_interface__"):
        return ("cuda", None)
    if hasattr(obj, "__array_interface__"):
        return ("cpu", 0)
    if obj is None:
        raise TypeError(f"{name}: None, expected an array")
    raise _not_an_array(name, obj)


def context_for(ctx, array, name):
    """``ctx`` when given (an ingot.Context), else the default context of
    the device of ``array`` (the argument ``name``)."""
    if ctx is None:
        return default_context(device_of(array, name))
    if not isinstance(ctx, Context):
        raise TypeError(f"ctx: must be an ingot.Context; got {_describe_value(ctx)}")
    return ctx


def query_context(ctx, device):
    """The context of a workspace query: ``ctx``, or the default context of
    ``device`` (which has no arrays to take it from)."""
    if ctx is not None:
        if device is not None:
            raise TypeError("pass ctx or device, not both")
        return context_for(ctx, None, "ctx")
    if device is None:
        raise TypeError("pass device= ('cpu', 'cuda', 'cuda:N', a torch.device) or ctx= (the "
                        "size depends on the backend and the GPU)")
    return default_context(device)


def op_arg(ctx, obj, name, stream, writable=False):
    """The descriptor of ``obj`` (None stays None), checked to be memory the
    context can reach: a CUDA pointer handed to the CPU, or a pageable torch
    CPU tensor handed to a CUDA context, would crash the process."""
    if obj is None:
        return None
    d = describe(obj, name, stream, writable)
    kind, index = d.device
    if kind == "cuda" and ctx.backend == "cpu":
        raise ValueError(f"{name}: CUDA memory given to a CPU context")
    if (kind == "cpu" and ctx.backend == "cuda" and d.framework == "torch"
            and not d.obj.is_pinned()):
        raise ValueError(f"{name}: a (pageable) CPU tensor given to a CUDA context")
    if kind == "cuda" and index is not None and index != ctx.device:
        raise ValueError(f"{name}: on cuda:{index}, but the context is on device {ctx.device}")
    return d


def required_arg(ctx, obj, name, stream, writable=False):
    """op_arg for an argument that may not be None (TypeError naming it)."""
    if obj is None:
        raise TypeError(f"{name}: None, expected an array")
    return op_arg(ctx, obj, name, stream, writable)


def ref(d):
    """A pointer to ``d``'s C descriptor, or NULL for None."""
    return d.ref() if d is not None else None


def run(ctx, fn, *args, names=None):
    """Calls the library function ``fn`` on ``ctx``; raises IngotError on
    failure. ``names`` maps the library's name of an argument to the Python
    parameter that carries it where they differ (e.g. {"d": "out"}): the
    error text then names the parameter the caller knows, "out (d): ..."."""
    handle = ctx.handle
    with ctx._lock:
        status = fn(handle, *args)
        message = last_error(handle) if status != Status.SUCCESS else None
    if message is not None:
        if names:
            message = rename_arguments(message, names)
        raise IngotError(status, message)


def rename_arguments(message, names):
    """The library's text "<op>: <argument>: <what>" with each argument of
    ``names`` (library name -> Python name) shown as "python (library)",
    where it is the argument blamed or the one an output overlaps."""
    op, sep, rest = message.partition(": ")
    if not sep:
        return message
    for c_name, py_name in names.items():
        shown = f"{py_name} ({c_name})"
        if rest.startswith(c_name + ":"):
            rest = shown + rest[len(c_name):]
        rest = rest.replace(f"overlaps {c_name} ", f"overlaps {shown} ")
        if rest.endswith(f"overlaps {c_name}"):
            rest = rest[: -len(c_name)] + shown
    return op + sep + rest


def describe_parameter(value):
    """What a parameter is, for error texts: "a torch.int64 tensor on cpu",
    "a numpy float64 array", "a Python float (0.7)"."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor on {value.device}"
    cls = type(value)
    if cls.__module__ == "numpy" and hasattr(value, "dtype"):
        return f"a numpy {value.dtype} {'array' if value.ndim else 'scalar'}"
    if cls in (bool, int, float):
        return f"a Python {cls.__name__} ({value!r})"
    return _describe_value(value)


def refuse_new_tensor_while_capturing(name, value, expected, device):
    """TypeError naming the parameter ``name`` (``value``, which needs a
    conversion into a new tensor) and ``expected`` (what to pass instead)
    when the current stream of ``device`` (a torch.device) is capturing a
    CUDA graph. ingot converts nothing there: a host value would be frozen
    into the graph, a copy from host memory cannot be captured, and a
    parameter of the exact dtype is what a replay reads anew."""
    if device.type != "cuda":
        return
    torch = sys.modules["torch"]
    if torch.compiler.is_compiling() or not torch.cuda.is_current_stream_capturing():
        return
    raise TypeError(f"{name}: {describe_parameter(value)} needs a conversion into a new tensor, "
                    f"which ingot does not make while a CUDA graph is being captured; pass "
                    f"{expected}")


def torch_on_stream(device, stream):
    """A context in which torch allocates and enqueues on the op's ``stream``
    (a ``cudaStream_t`` int or None): a buffer the wrapper makes for an op,
    and freed right after the launch, is then filled before the op runs and
    not handed out again until the op's stream is past it (torch's caching
    allocator reuses a block freely on the stream it was allocated on)."""
    torch = sys.modules["torch"]
    if torch.device(device).type != "cuda":
        return contextlib.nullcontext()
    if (stream or 0) == (torch.cuda.current_stream(device).cuda_stream or 0):
        return contextlib.nullcontext()
    target = (torch.cuda.ExternalStream(stream, device=device) if stream
              else torch.cuda.default_stream(device))
    return torch.cuda.stream(target)


def workspace(ctx, like, need, ws, stream):
    """(pointer, bytes, keepalive) of an op's workspace: ``ws`` as given (a
    contiguous 1-D array of any dtype, in the context's memory), or, when
    None, a new uint8 buffer of ``need`` bytes allocated like ``like`` (a
    Described; torch: same device; numpy: 64-byte aligned). (None, 0, None)
    when nothing is needed."""
    if ws is not None:
        d = op_arg(ctx, ws, "workspace", stream, writable=True)
        t = d.tensor
        if t.ndim != 1 or (t.shape[0] > 1 and t.stride[0] != 1):
            raise ValueError("workspace: pass a contiguous 1-D array (e.g. uint8 of the "
                             "*_workspace_size bytes)")
        return t.data, t.shape[0] * DType(t.dtype).itemsize, d
    if need == 0:
        return None, 0, None
    if like.framework == "torch":
        torch = sys.modules["torch"]
        with torch_on_stream(like.obj.device, stream):
            buf = torch.empty(need, dtype=torch.uint8, device=like.obj.device)
        return buf.data_ptr(), need, buf
    if like.device[0] != "cpu":
        raise TypeError("workspace: pass it explicitly for CUDA arrays that are not torch tensors")
    import numpy

    raw = numpy.empty(need + 64, dtype=numpy.uint8)
    off = (-raw.ctypes.data) % 64
    buf = raw[off:off + need]
    return buf.ctypes.data, need, raw
