# kern-sandbox Python driver: runs notebook cells with IPython's display rules.
#
# Started in the box as `python3 -c <this file>` with a UNIX stream socket on fd 3, its only
# channel to the host (stdout and stderr belong to the user's code). Stdlib only, Python 3.8+.
#
# Frames, both ways: a 4-byte big-endian length, then that many bytes of UTF-8 JSON (one object).
#   host -> driver  {"type": "cell", "id": N, "code": "...", "once": false}
#                   optional: "marker": "..." (written raw to fds 1 and 2 after the cell's output,
#                   before done: the host splits a kernel's output streams there), "single": true
#                   (a prewarmed box's only cell: named <cell> like a once-cell, not <cell-N>),
#                   "env": {name: value} (a kernel cell's own variables: set in os.environ for the
#                   cell, restored after it unless the cell changed them itself; see cell_env)
#   driver -> host  {"type": "display", "data": {mime: value}, "metadata": {...}}   display(), figures
#                   (a matplotlib figure's also has "chart": its plotted data, see chart_of)
#                   {"type": "result", "data": {...}, "metadata": {...}}     the last bare expression
#                   {"type": "error", "ename": ..., "evalue": ..., "traceback": "..."}
#                   {"type": "done", "id": N, "status": "ok" | "error", "exit": int | null}   last
# "status" is "error" when the cell raised (or exited non-zero); "exit" is set when it raised
# SystemExit. A kernel's state (kernel.fork(), checkpoints; driver_state.py, the string _STATE):
#   host -> driver  {"type": "save", "id": N, "marker": "..."}
#   driver -> host  {"type": "state", "python", "parts": [sizes], "left", "cwd", ...}, then raw
#                   frames holding the parts, then done (or an error frame, then done)
#   host -> driver  {"type": "load", "id": N, "marker": "...", <a state frame's fields>}, then raw
#                   frames holding its parts; the driver answers as to a cell
# A raw frame is a length, the byte 0 (no JSON object starts with it), then up to 64 MiB of data. The driver answers cells until fd 3 reaches EOF, or exits after one cell that says
# "once": true or "single": true (exit code 0, 1 if the cell raised, or the SystemExit code; what
# python's exit does that a program sees runs before the done frame, see the_end). A broken channel or a
# malformed frame ends it with exit code 70 and a line on stderr.
#
# Start-up cost is paid by every cold runCode, and Python compiles a -c program on every start
# (about 0.25 ms per KB of code), so the driver comes in two parts: the core below, compiled at
# start, imports only modules that are built in or already loaded (the C halves of json and ast);
# the rich-display part (driver_rich.py, appended as the string _RICH by driver.rs) is compiled on
# first need: the first value that is not a plain builtin, the first error, display(), matplotlib,
# or a moment when the driver is idle. json, traceback, linecache and asyncio are never imported by the driver before they are
# needed. Everything the driver relies on is captured at start, so a cell that rebinds json.dumps,
# os.write, sys.stdout or builtins.display cannot break the delivery of results.


def _kern_driver(rich_source, zygote=None, state_source=None):
    import builtins, gc, io, os, sys, _thread, binascii

    CHANNEL_FD = 3
    MAX_FRAME = 256 << 20
    CO_COROUTINE = 0x80
    write, read, close, getpid, _exit = os.write, os.read, os.close, os.getpid, os._exit
    gc_freeze = gc.freeze
    environ = os.environ  # its methods too: a cell may patch os.environ's class
    env_get, env_set, env_del = (getattr(type(environ), m) for m in ("get", "__setitem__", "__delitem__"))
    b2a, BytesIO = binascii.b2a_base64, io.BytesIO
    modules = sys.modules
    allocate_lock, get_ident = _thread.allocate_lock, _thread.get_ident
    DRIVER_FILE = (lambda: 0).__code__.co_filename

    class _M:
        def m(self):
            pass

    MethodType = type(_M().m)

    class State:
        fd = -1  # the channel; -1 in a forked child
        pid = getpid()
        main_thread = get_ident()
        in_cell = False  # SIGINT raises KeyboardInterrupt only while user code runs...
        writing = False  # ...and never while the main thread is writing a frame
        pending = False
        future = 0  # __future__ flags set by earlier cells
        loop = None  # asyncio loop for top-level await, made on first need
        format_exception = None  # traceback.format_exception, captured on first use
        single = False  # this cell is the box's only one (a prewarmed box)
        state_mod = None  # the state part (driver_state.py), once compiled
        cells = 0  # the highest cell id run (a saved state carries it)

    st = State()
    lock = allocate_lock()

    def flush_std():
        for name in ("stdout", "stderr", "__stdout__", "__stderr__"):
            try:
                getattr(sys, name).flush()
            except BaseException:
                pass

    def die(msg):
        flush_std()
        try:
            write(2, ("kern driver: %s\n" % msg).encode("utf-8", "replace"))
        except OSError:
            pass
        _exit(70)

    def safe_str(obj):
        try:
            return str(obj)
        except BaseException:
            return "<str() of %s failed>" % type(obj).__name__

    def err(text):
        """Write to the user's stderr (sys.stderr as it is now, else fd 2)."""
        try:
            sys.stderr.write(text)
            sys.stderr.flush()
            return
        except BaseException:
            pass
        try:
            write(2, text.encode("utf-8", "replace"))
        except OSError:
            pass

    # ---- the channel: off fd 3, so children never inherit it and nothing else writes to it
    try:
        st.fd = os.dup(CHANNEL_FD)
    except OSError:
        die("fd 3 (the result channel) is not open")
    os.set_inheritable(st.fd, False)
    close(CHANNEL_FD)

    def after_fork_in_child():
        # A forked child (os.fork, multiprocessing) must never write into the parent's stream.
        if st.fd >= 0:
            try:
                close(st.fd)
            except OSError:
                pass
            st.fd = -1

    os.register_at_fork(after_in_child=after_fork_in_child)

    # ---- JSON: the C scanner and encoder behind the json package, which would import re and
    # enum at start-up; the json package is the fallback when the private API is not there.
    def no_default(o):
        raise TypeError("Object of type %s is not JSON serializable" % type(o).__name__)

    try:
        import _json

        make_encoder, encode_str = _json.make_encoder, _json.encode_basestring

        def dumps(obj):
            return "".join(make_encoder({}, no_default, encode_str, None, ":", ",", False, False, False)(obj, 0))

        def bad_constant(name):
            raise ValueError("%s is not valid JSON" % name)

        class ScanContext:
            strict = True
            object_hook = None
            object_pairs_hook = None
            parse_float = float
            parse_int = int
            parse_constant = bad_constant
            memo = {}

        scan = _json.make_scanner(ScanContext())

        def loads(s):
            s = s.strip(" \t\r\n")
            try:
                obj, end = scan(s, 0)
            except StopIteration:
                raise ValueError("not JSON") from None
            if end != len(s):
                raise ValueError("extra data after the JSON value")
            return obj

        if dumps({"a": [1, "\xe9", None, True, 1.5]}) != '{"a":[1,"\xe9",null,true,1.5]}' or loads(
            '{"a": [1, "\\u00e9"]}'
        ) != {"a": [1, "\xe9"]}:
            raise ImportError("_json behaves unlike this driver expects")
    except Exception:
        import json

        dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
        loads = json.JSONDecoder().decode

    def utf8(text):
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: pair what pairs, U+FFFD for the rest
            return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")

    # ---- frames
    def write_frames(views):
        """Writes whole frames (memoryviews) to the channel, under the lock. A SIGINT that came
        while the main thread wrote is raised after, if a cell runs."""
        if st.fd < 0:
            return
        flush_std()
        main = get_ident() == st.main_thread
        with lock:
            if main:
                st.writing = True
            try:
                for view in views:
                    while view:
                        view = view[write(st.fd, view):]
            except OSError as e:
                die("the result channel broke: %s" % e)
            finally:
                if main:
                    st.writing = False
        if main and st.pending and st.in_cell:
            st.pending = False
            raise KeyboardInterrupt

    def send_raw(payload):
        write_frames((memoryview(len(payload).to_bytes(4, "big") + payload),))

    def send(obj):
        send_raw(utf8(dumps(obj)))

    RAW_PIECE = 64 << 20

    def raw_frames(parts):
        for p in parts:
            for at in range(0, p.nbytes, RAW_PIECE):
                piece = p[at:at + RAW_PIECE]
                yield memoryview((piece.nbytes + 1).to_bytes(4, "big") + b"\0")
                yield piece

    def send_blob(parts):
        """Sends buffers (memoryviews of bytes) as raw frames: a length, the tag byte 0, then up to
        RAW_PIECE bytes of them, written from the buffers themselves (a kernel's state)."""
        write_frames(raw_frames(parts))

    def recv_blob(total):
        """Reads raw frames (send_blob's) holding `total` bytes, into one bytearray."""
        blob = bytearray(total)
        view, at = memoryview(blob), 0
        while at < total:
            size = int.from_bytes(read_exact(4, False), "big")
            if size < 2 or size - 1 > total - at or read_exact(1, False) != b"\0":
                die("expected a raw frame of at most %d bytes" % (total - at))
            end = at + size - 1
            while at < end:
                try:
                    n = os.readv(st.fd, [view[at:end]])
                except OSError as e:
                    die("reading the channel failed: %s" % e)
                if not n:
                    die("the channel closed in the middle of a frame")
                at += n
        return blob

    def read_exact(n, at_boundary):
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = read(st.fd, min(n - len(buf), 1 << 20))
            except OSError as e:
                die("reading the channel failed: %s" % e)
            if not chunk:
                if at_boundary and not buf:
                    return None
                die("the channel closed in the middle of a frame")
            buf += chunk
        return bytes(buf)

    def recv():
        head = read_exact(4, True)
        if head is None:
            return None
        size = int.from_bytes(head, "big")
        if size > MAX_FRAME:
            die("a frame of %d bytes is over the %d-byte limit" % (size, MAX_FRAME))
        body = read_exact(size, False) if size else b""
        try:
            return loads(body.decode("utf-8"))
        except Exception as e:
            die("a frame is not a UTF-8 JSON object: %s" % e)

    # ---- SIGINT: KeyboardInterrupt in user code as usual, but never in the middle of a frame
    # and never in the driver's own code between cells (there it is dropped).
    def on_sigint(signum, frame):
        if st.in_cell and not st.writing:
            raise KeyboardInterrupt
        st.pending = True

    try:
        import _signal

        if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
            _signal.signal(_signal.SIGINT, on_sigint)
    except Exception:
        pass

    # ---- cell sources, for tracebacks, warnings and inspect.getsource (linecache loads lazily)
    sources = {}

    def register(fname, code):
        text = code.replace("\r\n", "\n").replace("\r", "\n")
        lines = [line + "\n" for line in text.split("\n")]
        if text.endswith("\n"):
            lines.pop()
        sources[fname] = (len(code), None, lines, fname)  # mtime None: checkcache leaves it be
        linecache = modules.get("linecache")
        if linecache is not None:
            try:
                linecache.cache[fname] = sources[fname]
            except Exception:
                pass

    def sync_linecache(linecache):
        try:
            linecache.cache.update(sources)
        except Exception:
            pass

    # ---- the rich-display part, compiled on first need
    rich_env = {}
    _exec, _compile = exec, compile

    def rich():
        if not rich_env:
            env = dict(st=st, sys=sys, modules=modules, err=err, send=send, send_raw=send_raw, dumps=dumps,
                       loads=loads, utf8=utf8, safe_str=safe_str, sync_linecache=sync_linecache,
                       MAX_FRAME=MAX_FRAME, DRIVER_FILE=DRIVER_FILE, MethodType=MethodType, BytesIO=BytesIO,
                       b2a=b2a)
            env["__builtins__"] = builtins
            _exec(_compile(rich_source, DRIVER_FILE, "exec", dont_inherit=True), env)
            rich_env.update(env)
        return rich_env

    def display(*objs, include=None, exclude=None, metadata=None, raw=False, **kwargs):
        """Show each object as a rich output below the cell, in order (IPython's display()).
        raw=True sends dicts of {mime: data} as they are; display_id and the like are ignored."""
        rich()["display"](objs, include, exclude, metadata, raw)

    builtins.display = display

    # ---- matplotlib: Agg; every open figure is shown after the cell, and plt.show() shows them now
    if "MPLBACKEND" not in os.environ:
        os.environ["MPLBACKEND"] = "Agg"

    def on_pyplot(plt):
        rich()["patch_show"](plt)

    def on_pil_image(mod):
        # An image shown (there is no screen) or saved to a path is displayed below the cell,
        # as E2B's code interpreter does.
        rich()["patch_pil"](mod, display)

    def on_ipython_display(mod):
        # Outside an IPython shell, IPython's display() prints a repr: a cell that imports it
        # (`from IPython.display import display, HTML`) gets ours, as in a notebook.
        mod.display = display

    class AfterImport:
        """First on sys.meta_path: runs a callback right after linecache, matplotlib.pyplot or
        IPython's display functions (IPython >= 7.23) are first imported (see wrap_spec in the rich
        part), so the driver never imports them itself."""

        callbacks = {"linecache": sync_linecache, "matplotlib.pyplot": on_pyplot,
                     "IPython.core.display_functions": on_ipython_display, "PIL.Image": on_pil_image}
        busy = set()

        def find_spec(self, name, path=None, target=None):
            callback = self.callbacks.get(name)
            if callback is None or name in self.busy:
                return None
            try:
                return rich()["wrap_spec"](self, name, path, target, callback)
            except Exception:
                return None  # the usual import, without the callback

    sys.meta_path.insert(0, AfterImport())
    if "linecache" in modules:
        sync_linecache(modules["linecache"])

    # ---- the user's namespace: a fresh __main__ module, shared by every cell
    user_module = type(sys)("__main__")
    ns = user_module.__dict__
    ns["__builtins__"] = builtins
    st.driver_main = modules.get("__main__")  # kept alive: the driver's own globals live there
    ns["__loader__"] = getattr(st.driver_main, "__loader__", None)
    modules["__main__"] = user_module

    # ---- running a cell
    import _ast

    ONLY_AST, TOP_LEVEL_AWAIT = _ast.PyCF_ONLY_AST, _ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    Expr, Module, Expression = _ast.Expr, _ast.Module, _ast.Expression

    def quiet(code, last):
        """IPython's rule: a cell whose last line ends with ';' shows no value. The text after
        the last statement can only hold ';', blanks, comments and line continuations."""
        lines = code.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        try:
            row, col = last.end_lineno, last.end_col_offset
            tail = [lines[row - 1].encode("utf-8")[col:].decode("utf-8", "replace")] + lines[row:]
        except Exception:
            tail = [line for line in lines if line.strip() and not line.lstrip().startswith("#")][-1:]
        return any(";" in line.split("#", 1)[0] for line in tail)

    def run(code_obj):
        if code_obj.co_flags & CO_COROUTINE:  # top-level await
            return rich()["run_async"](eval(code_obj, ns))
        return eval(code_obj, ns)

    PLAIN = {int, float, complex, bool, str, bytes, list, tuple, dict, set, frozenset, range}

    def show_result(value):
        """Sends the value of the cell's last expression; returns it when it is a figure (which
        the end-of-cell flush then leaves out). A plain builtin value needs only its repr()."""
        if type(value) in PLAIN:
            try:
                text = repr(value)
            except Exception:
                text = None
            if text is not None and len(text) < (1 << 20):
                send({"type": "result", "data": {"text/plain": text}, "metadata": {}})
                return None
        return rich()["show_result"](value)

    def exit_status(e):
        code = e.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code & 0xFF
        err(safe_str(code) + "\n")
        return 1

    def ipython_cell(code):
        """IPython's cell rules, for a cell Python refuses as written (valid Python is never
        changed): an indented cell is dedented, and a line `!cmd` runs cmd in the shell, or
        `name = !cmd` gives name its output's lines. Line numbers stay; None: no change."""
        import re, textwrap
        out = []
        for line in textwrap.dedent(code).split("\n"):
            m = re.match(r"^(\s*)(?:([A-Za-z_]\w*)\s*=\s*)?!(.*)$", line)
            if m:
                indent, name, cmd = m.groups()
                line = "%s%s__kern_shell__(%r, %r)" % (indent, name + " = " if name else "", cmd, bool(name))
            out.append(line)
        alt = "\n".join(out)
        if alt == code:
            return None
        if "__kern_shell__" in alt and getattr(builtins, "__kern_shell__", None) is None:
            builtins.__kern_shell__ = shell_line
        return alt

    def shell_line(cmd, capture):
        import subprocess
        flush_std()
        if capture:
            r = subprocess.run(cmd, shell=True, stdout=subprocess.PIPE, text=True, errors="replace")
            return r.stdout.splitlines()
        subprocess.run(cmd, shell=True)
        return None

    def compile_cell(code, fname):
        """(code before the last expression, the last expression or None, show its value?)"""
        flags = st.future
        if "await" in code or "async" in code:
            flags |= TOP_LEVEL_AWAIT
        try:
            tree = compile(code, fname, "exec", ONLY_AST | flags, dont_inherit=True)
        except SyntaxError as e:
            alt = ipython_cell(code)
            if alt is None:
                raise
            try:
                tree = compile(alt, fname, "exec", ONLY_AST | flags, dont_inherit=True)
            except SyntaxError:
                raise e from None
            code = alt
        body = tree.body
        if not body or not isinstance(body[-1], Expr):
            head = compile(tree, fname, "exec", flags, dont_inherit=True)
            if "__future__" in code:
                st.future |= rich()["future_flags"](head)
            return head, None, False
        head = compile(Module(body=body[:-1], type_ignores=[]), fname, "exec", flags, dont_inherit=True)
        if "__future__" in code:
            st.future |= rich()["future_flags"](head)
        flags |= st.future
        tail = compile(Expression(body=body[-1].value), fname, "eval", flags, dont_inherit=True)
        return head, tail, not quiet(code, body[-1])

    def run_cell(cell_id, code, once):
        """Runs one cell and sends its frames; returns (status, exit code or None)."""
        fname = "<cell>" if once or st.single else "<cell-%d>" % cell_id
        st.cells = max(st.cells, cell_id)
        register(fname, code)
        if getattr(builtins, "display", None) is None:
            builtins.display = display
        failed, exit_code, shown = False, None, None
        st.pending = False
        st.in_cell = True
        try:
            try:
                head, tail, show = compile_cell(code, fname)
            except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError) as e:
                st.in_cell = False
                rich()["show_error"](e, None)
                return "error", None
            run(head)
            if tail is not None:
                value = run(tail)
                if show and value is not None and st.fd >= 0:
                    shown = show_result(value)
        except SystemExit as e:
            st.in_cell = False
            exit_code = exit_status(e)
        except BaseException as e:
            st.in_cell = False
            failed = True
            rich()["show_error"](e, fname)
        finally:
            st.in_cell = False
        if getpid() != st.pid:  # a forked child came back from the cell: it ends here
            flush_std()
            _exit(exit_code if exit_code is not None else int(failed))
        if "matplotlib.pyplot" in modules:
            rich()["flush_figures"](shown)
        return ("error" if failed or exit_code else "ok"), exit_code

    # ---- the end of a one-cell box (a once-cell: a fresh box's, a zygote fork's; a prewarmed
    # box's cell). What python's own exit does that a program can see, in its order, runs before
    # the cell's done frame, so the result is whole when the host has it (output and files of
    # atexit handlers and threads included); then the driver _exits. The teardown of every
    # object that follows in Py_FinalizeEx is skipped: in a zygote's fork it writes to each page
    # shared with the zygote (9.6 ms of a 20 ms call, measured), and a box leaves nothing behind.
    def open_fds():
        try:
            return set(os.listdir("/proc/self/fd"))
        except OSError:
            return None

    def the_end(fds_before):
        threading = modules.get("threading")
        if threading is not None:  # non-daemon threads joined, as at exit
            try:
                threading._shutdown()
            except BaseException:
                pass
        try:
            import atexit

            atexit._run_exitfuncs()
        except BaseException:
            pass
        # __main__ is torn down as module teardown does it (_PyModule_ClearDict): names with
        # one leading underscore become None, then the rest, so __del__ methods and the
        # finalizers of files it held run, in the order python's own exit runs them.
        for rest in (False, True):
            for name in list(ns):
                if name != "__builtins__" and (rest or (name[:1] == "_" and name[1:2] != "_")):
                    try:
                        ns[name] = None
                    except BaseException:
                        pass
        try:
            gc.collect()
        except BaseException:
            pass
        # A file the cell left open elsewhere (a module's global, a cycle) is closed as its
        # finalizer would at exit, wrappers before the buffers under them; looked for only
        # when the cell left a descriptor open.
        now = open_fds()
        if now is None or fds_before is None or now - fds_before:
            import _io

            std = [getattr(sys, n, None) for n in ("stdin", "stdout", "stderr", "__stdin__", "__stdout__", "__stderr__")]
            found = [o for o in gc.get_objects() if isinstance(o, _io._IOBase) and not any(o is s for s in std)]
            layers = (_io.FileIO, _io.BufferedReader, _io.BufferedWriter, _io.BufferedRandom, _io.BufferedRWPair)
            for last in (False, True):
                for o in found:
                    if isinstance(o, layers) == last:
                        try:
                            if not o.closed:
                                o.close()
                        except BaseException:
                            pass
        flush_std()

    # ---- the kernel's state as data (kernel.fork(), checkpoints): the state part
    def state_part():
        if st.state_mod is None:
            m = type(sys)("_kern_state")
            m.__dict__.update(ns=ns, st=st, sources=sources, register=register, send=send, send_blob=send_blob,
                              safe_str=safe_str)
            _exec(_compile(state_source, DRIVER_FILE, "exec", dont_inherit=True), m.__dict__)
            st.state_mod = m
        modules["_kern_state"] = st.state_mod  # where the pickle finds its helpers
        return st.state_mod

    def state_op(kind, frame, blob):
        """A save (the state out, as a `state` frame and a blob) or a load; runs as a cell does
        (an interrupt stops it, an error is shown). Returns the status."""
        st.pending = False
        st.in_cell = True
        try:
            if kind == "save":
                state_part().save()
            else:
                state_part().load(frame, blob)
            return "ok"
        except BaseException as e:
            st.in_cell = False
            rich()["show_error"](e, None)
            return "error"
        finally:
            st.in_cell = False

    def cell_env(cell_vars):
        """Sets a cell's own variables (the host checked them); returns what restore_env needs."""
        saved = []
        for name, value in cell_vars.items():
            saved.append((name, env_get(environ, name), value))
            env_set(environ, name, value)
        return saved

    def restore_env(saved):
        # A variable still as the cell's env set it gets its old value back (or goes, if it was
        # not set before); one the cell changed or removed itself keeps the cell's change.
        for name, old, value in saved:
            try:
                if env_get(environ, name) != value:
                    continue
                if old is None:
                    env_del(environ, name)
                else:
                    env_set(environ, name, old)
            except Exception:
                pass

    # ---- the zygote (src/lang/zygote.py): it compiles the rich part once, then forks a box per
    # call; only a call's workload comes back from it, with the call's channel.
    if zygote is not None:
        try:
            rich()
        except Exception:
            pass
        st.fd = zygote(st.fd)
        st.pid = getpid()

    # ---- the loop: one cell frame in, its frames out, until EOF or a once-cell
    while True:
        if not rich_env:  # idle (a prewarmed box, a kernel between cells): compile the rest now
            try:
                import select

                if not select.select([st.fd], [], [], 0)[0]:
                    rich()
            except Exception:
                pass
        frame = recv()
        if frame is None:
            return
        if isinstance(frame, dict) and frame.get("type") in ("save", "load"):
            kind, cell_id, marker, parts = frame["type"], frame.get("id"), frame.get("marker"), frame.get("parts")
            if type(cell_id) is not int or not isinstance(marker, str) or (kind == "load" and not (
                    isinstance(parts, list) and all(type(n) is int and n >= 0 for n in parts))):
                die("a %s frame needs an int id, a str marker (and a load, its parts' sizes): %.200r" % (kind, frame))
            blob = recv_blob(sum(parts)) if kind == "load" else None
            status = state_op(kind, frame, blob)
            blob = None
            flush_std()
            for fd in (1, 2):
                try:
                    write(fd, marker.encode("utf-8"))
                except OSError:
                    pass
            send({"type": "done", "id": cell_id, "status": status, "exit": None})
            continue
        if not isinstance(frame, dict) or frame.get("type") != "cell":
            die("expected a cell frame, got %.200r" % (frame,))
        cell_id, code, once = frame.get("id"), frame.get("code"), frame.get("once", False)
        if type(cell_id) is not int or not isinstance(code, str) or not isinstance(once, bool):
            die("a cell frame needs an int id, a str code and a bool once: %.200r" % (frame,))
        marker = frame.get("marker")
        cell_vars = frame.get("env", {})
        if not isinstance(cell_vars, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in cell_vars.items()
        ):
            die("a cell frame's env must map str to str: %.200r" % (cell_vars,))
        # A prewarmed box runs one cell as a kernel would, named as a one-shot cell is.
        st.single = frame.get("single") is True
        last = once or st.single
        try:
            saved = cell_env(cell_vars)
            fds_before = open_fds() if last else None
            if last:
                # What exists before a box's only cell is the driver's and never garbage python's
                # exit would collect: frozen, so the_end's collection walks only what the cell
                # made (0.5-0.7 ms less per call here, as a zygote's fork already has it).
                gc_freeze()
            try:
                status, exit_code = run_cell(cell_id, code, once)
            finally:
                restore_env(saved)
            if last:
                the_end(fds_before)
            if isinstance(marker, str):
                # A kernel's output is one stream for every cell: the host splits it at this
                # marker, which it made up for this cell alone. Raw writes, after the flush.
                flush_std()
                for fd in (1, 2):
                    try:
                        write(fd, marker.encode("utf-8"))
                    except OSError:
                        pass
            send({"type": "done", "id": cell_id, "status": status, "exit": exit_code})
        except Exception as e:
            die("internal error: %s: %s" % (type(e).__name__, safe_str(e)))
        if last:
            if not once:
                # A prewarmed box's cell: the host ends the box once it has the cell's whole
                # result (its frames and output up to the marker); until then this process stays,
                # so its end is never taken for a kernel that died mid-cell.
                try:
                    while read(st.fd, 65536):
                        pass
                except OSError:
                    pass
            close(st.fd)
            _exit(exit_code if exit_code is not None else int(status != "ok"))


# The rich part (driver_rich.py) follows as the string _RICH, the state part as _STATE, then the call
# that starts the driver:
# src/lang/driver.rs puts the three together.
