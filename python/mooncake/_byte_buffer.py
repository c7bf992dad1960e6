"""`ByteExporter`: a base class whose instances export raw memory through
the buffer protocol as plain bytes (1-D, format ``"B"``, writable).

ctypes arrays export format ``"<B"``, which `memoryview` cannot index or
iterate (``NotImplementedError: memoryview: unsupported format <B``); NumPy
and `bytes()` accept it, but ``memoryview(h)[0]`` and ``list(memoryview(h))``
do not. Python before 3.12 cannot define the buffer protocol in Python
(``__buffer__``), so this module builds one C-level base type at import
with ``PyType_FromSpec`` whose ``bf_getbuffer`` slot fills the view with
``PyBuffer_FillInfo`` over the instance's ``_ptr`` and ``_size``.

Each view holds a reference to its exporter, so an instance (and whatever
frees its memory when it is collected) outlives every view of it.
"""

from __future__ import annotations

import ctypes

# Slot ids and flags from CPython's typeslots.h and object.h (stable ABI).
_PY_BF_GETBUFFER = 1
_PY_TPFLAGS_BASETYPE = 1 << 10
_PY_TPFLAGS_DEFAULT = 1 << 18  # Py_TPFLAGS_HAVE_VERSION_TAG


class _TypeSlot(ctypes.Structure):
    _fields_ = [("slot", ctypes.c_int), ("pfunc", ctypes.c_void_p)]


class _TypeSpec(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("basicsize", ctypes.c_int),
        ("itemsize", ctypes.c_int),
        ("flags", ctypes.c_uint),
        ("slots", ctypes.POINTER(_TypeSlot)),
    ]


_fill_info = ctypes.pythonapi.PyBuffer_FillInfo
_fill_info.argtypes = [
    ctypes.c_void_p,  # Py_buffer *view
    ctypes.py_object,  # exporter (the view holds a new reference to it)
    ctypes.c_void_p,  # buf
    ctypes.c_ssize_t,  # len
    ctypes.c_int,  # readonly
    ctypes.c_int,  # flags
]
_fill_info.restype = ctypes.c_int

_GETBUFFER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p, ctypes.c_int)


def _getbuffer(exporter: object, view: int, flags: int) -> int:
    # Never raises: an instance whose fields were never set exports no
    # bytes, and a writable export (readonly=0) always fits the flags.
    try:
        ptr, size = int(exporter._ptr), int(exporter._size)  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        ptr, size = 0, 0
    if ptr == 0 or size < 0:
        ptr, size = 0, 0
    return _fill_info(view, exporter, ptr or None, size, 0, flags)


# Kept for the life of the process: the type points at them.
_callback = _GETBUFFER(_getbuffer)
_slots = (_TypeSlot * 2)(
    _TypeSlot(_PY_BF_GETBUFFER, ctypes.cast(_callback, ctypes.c_void_p)),
    _TypeSlot(0, None),
)
_name = b"mooncake.ByteExporter"
_spec = _TypeSpec(
    _name, object.__basicsize__, 0, _PY_TPFLAGS_DEFAULT | _PY_TPFLAGS_BASETYPE, _slots
)
_from_spec = ctypes.pythonapi.PyType_FromSpec
_from_spec.argtypes = [ctypes.POINTER(_TypeSpec)]
_from_spec.restype = ctypes.py_object

ByteExporter: type = _from_spec(ctypes.byref(_spec))
"""Base type: a subclass sets ``_ptr`` (address) and ``_size`` (bytes) and
its instances export those bytes as a writable 1-D ``"B"`` buffer."""
