# kern-sandbox Python driver, state part: a kernel's state as data, for kernel.fork() and
# checkpoints (issue 33). Compiled by the driver (driver.py) into a module of its own,
# `_kern_state`, the first time a save or load frame comes; the names the driver gives it
# (ns, st, sources, register, send, send_blob, safe_str) are globals here.
#
# What is carried: the namespace's values, pickled (protocol 5, large buffers such as numpy
# arrays' out of band: they go to the host as they are, with no copy into the pickle); the
# modules it names, by name (imported again in the new kernel); functions and classes defined in
# cells, by value (their code objects, marshalled, so the same Python is needed to load them);
# the current directory, sys.path, the cells' sources (tracebacks, inspect.getsource) and the
# cells' __future__ flags. What is not: running threads, child processes, open files and
# sockets, and the state of imported modules themselves (a module's globals, its random seed).
# A value that can't be pickled is left out, by name, with the reason.
#
# The new kernel is a fresh process in a fresh box: nothing of the old one's memory or
# randomness is in it, but what the values themselves hold (a random.Random() kept in a
# variable carries its state).

import io
import marshal
import os
import pickle
import sys
import types

# Names of the namespace that belong to the interpreter, not to the cells.
SKIP = {"__builtins__", "__loader__", "__name__", "__spec__", "__package__", "__doc__", "__file__", "__cached__"}

def module(name):
    """A module the parent's namespace named, imported again here."""
    if name == "__main__":
        return sys.modules["__main__"]
    import importlib

    return importlib.import_module(name)


def function(code, name, qualname, defaults, kwdefaults, cells, attrs):
    """A function defined in a cell, made again in this kernel's namespace."""
    closure = None
    if cells is not None:
        closure = tuple(types.CellType() if v is _EMPTY_MARK else types.CellType(v) for v in cells)
    f = types.FunctionType(marshal.loads(code), ns, name, defaults, closure)
    f.__qualname__ = qualname
    f.__kwdefaults__ = kwdefaults
    if attrs:
        f.__dict__.update(attrs)
    return f


class _EmptyMark:
    """Stands for an empty closure cell in the pickle."""

    def __reduce__(self):
        return (_empty_mark, ())


def _empty_mark():
    return _EMPTY_MARK


_EMPTY_MARK = _EmptyMark()


def skeleton(meta, name, bases, qualname, slots):
    """A class defined in a cell, made empty; `fill` gives it its members (after, so that its
    methods may refer to it)."""
    body = {"__module__": "__main__", "__qualname__": qualname}
    if slots is not None:
        body["__slots__"] = slots
    return meta(name, bases, body)


def fill(cls, members):
    for k, v in members.items():
        try:
            setattr(cls, k, v)
        except (AttributeError, TypeError):
            pass
    return cls


# Class members type() makes itself, or that can't be pickled and come back on their own.
CLASS_SKIP = {"__dict__", "__weakref__", "__slots__", "__module__", "__qualname__", "_abc_impl"}


class Pickler(pickle.Pickler):
    def reducer_override(self, obj):
        t = type(obj)
        if t is types.ModuleType:
            return module, (obj.__name__,)
        if t is types.FunctionType and obj.__module__ == "__main__":
            cells = None
            if obj.__closure__ is not None:
                cells = []
                for c in obj.__closure__:
                    try:
                        cells.append(c.cell_contents)
                    except ValueError:
                        cells.append(_EMPTY_MARK)
            return function, (marshal.dumps(obj.__code__), obj.__name__, obj.__qualname__, obj.__defaults__,
                              obj.__kwdefaults__, cells, obj.__dict__ or None)
        if isinstance(obj, type) and obj.__module__ == "__main__":
            slots = obj.__dict__.get("__slots__")
            if isinstance(slots, str):
                slots = (slots,)
            slot_names = set(slots or ())
            members = {k: v for k, v in obj.__dict__.items() if k not in CLASS_SKIP and k not in slot_names}
            return (skeleton, (type(obj), obj.__name__, obj.__bases__, obj.__qualname__, slots), members, None, None,
                    fill)
        if t is staticmethod or t is classmethod:
            return t, (obj.__func__,)
        if t is property:
            return property, (obj.fget, obj.fset, obj.fdel, obj.__doc__)
        return NotImplemented


class _Sink:
    def write(self, b):
        return len(b)


def _pickle(values):
    """(the pickle, its out-of-band buffers as memoryviews)."""
    buffers = []

    def take(b):
        try:
            buffers.append(b.raw())
            return False
        except BufferError:  # not contiguous: in band
            return True

    f = io.BytesIO()
    Pickler(f, protocol=5, buffer_callback=take).dump(values)
    return f.getbuffer(), buffers


def save():
    """Sends the state as a `state` frame and the blob after it."""
    values = {k: v for k, v in ns.items() if k not in SKIP}
    left = []
    try:
        data, buffers = _pickle(values)
    except Exception:
        # Some value can't be pickled: find which, by itself, and leave those out.
        keep = {}
        for k, v in values.items():
            try:
                Pickler(_Sink(), protocol=5, buffer_callback=lambda b: False).dump(v)
                keep[k] = v
            except BaseException as e:
                if isinstance(e, (KeyboardInterrupt, SystemExit)):
                    raise
                left.append([k, ("%s: %s" % (type(e).__name__, safe_str(e)))[:300]])
        data, buffers = _pickle(keep)
    parts = [data] + buffers
    head = {
        "type": "state",
        "python": sys.hexversion,
        "implementation": sys.implementation.cache_tag or sys.implementation.name,
        "parts": [p.nbytes for p in parts],
        "left": left,
        "cwd": os.getcwd(),
        "path": [p for p in sys.path if isinstance(p, str)],
        "future": st.future,
        "cells": st.cells,
        "sources": {k: "".join(v[2]) for k, v in sources.items()},
    }
    send(head)
    send_blob(parts)


def load(head, blob):
    """Loads a state (`head`, the `state` frame's fields; `blob`, its parts, one bytearray)."""
    if head.get("python") != sys.hexversion or head.get("implementation") != (
            sys.implementation.cache_tag or sys.implementation.name):
        raise RuntimeError(
            "this state was saved by another Python (hexversion %r, %r), and this kernel runs %r (%r): "
            "restore it into a box of the image it was taken in" % (
                head.get("python"), head.get("implementation"), sys.hexversion, sys.implementation.cache_tag))
    try:
        os.chdir(head["cwd"])
    except OSError as e:
        sys.stderr.write("kern: the kernel's directory %r is not here (%s); it stays in %r\n" % (
            head["cwd"], e.strerror, os.getcwd()))
    sys.path[:] = head["path"]
    for fname, text in head["sources"].items():
        register(fname, text)
    st.future |= head["future"]
    st.cells = max(st.cells, head.get("cells", 0))
    view = memoryview(blob)
    parts, at = [], 0
    for n in head["parts"]:
        parts.append(view[at:at + n])
        at += n
    values = pickle.loads(parts[0], buffers=parts[1:])
    ns.update(values)
