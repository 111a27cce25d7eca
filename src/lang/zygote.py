# kern-sandbox zygote: the python driver, started once, forking a box per call (issue 21).
#
# Put before the driver's source (`python3 -c <this file + driver.py>`); the driver calls
# `_kern_zygote(channel)` once it is set up, before its first cell. Its channel then carries no
# cells: each message on it is one byte and one fd, a socket to a spare kern. For each, the
# zygote forks C, which becomes a call's box by the plans kern sends it (see
# src/engine/monitor/zygote/mod.rs for who does what, and src/engine/plan/ for the steps) and forks P (PID 1 of
# the call) which forks W. W takes the call's posture and waits; when the call comes, kern sends
# W the call's channel, and only W returns from here, into the driver, which runs the call's one
# cell as in any fresh box. The zygote itself never runs a cell.
#
# On the socket to kern (SOCK_SEQPACKET: one message each):
#   "c"  + SCM_CREDENTIALS   from C, first: kern moves C into the call's cgroup
#   kern -> C                the plans (JSON), with the box's stdout and stderr (SCM_RIGHTS)
#   "p"  + SCM_CREDENTIALS   from P, once it is PID 1 of the call: kern opens a pidfd on it
#   "w\n"                    from W, in its posture, waiting for the call
#   kern -> W                "go", with the call's channel (SCM_RIGHTS)
#   "S <what>: <error>\n"    a step failed (the call's box never started)
#   "K <sig>\n", "X <code> <tmpfs use>...\n"   from P: W's end, as a fresh box's PID 1 says it
#   "Z <wait status>\n"      from C: how P ended
# Those text lines are kern's `Pid1Msg`s (src/engine/shared/protocol/pid1.rs): `_kern_pid1_msg` writes them.
# The others are the fork server's own (src/engine/shared/protocol/fork.rs, tested against these):
_KERN_FORK_FORKED = b"c"
_KERN_FORK_PID1 = b"p"
_KERN_FORK_GO = b"go"
#
# Nothing a box could have written runs here (a template every later call is forked from). kern
# starts this python with no path of the caller's or of a box in its environment (PYTHONPATH,
# PYTHONUSERBASE, HOME, PATH and any other PYTHON* that names a place are kept aside in
# KERN_ZYGOTE_ENV; src/session/zygote.rs); before any import, the guard below leaves the workspace
# (cwd and '' on sys.path) and every sys.path entry on a writable mount, and refuses to serve if
# a module python loaded at start came from one. Only W, in the call's own box, puts back what a
# fresh box's python has (`as_fresh`): its cwd, sys.path, user site, sitecustomize, environment.



def _kern_pid1_msg(tag, *fields):
    """One message for kern as a box's PID 1 writes it (`Pid1Msg::encode`, tested against this):
    the tag letter and its fields, space-separated, on one line of at most 3800 bytes."""
    text = " ".join([tag] + [str(f) for f in fields]).replace("\n", " ")
    return text.encode("utf-8", "replace")[:3800].decode("utf-8", "ignore").encode() + b"\n"

def _kern_zygote_guard():
    # Both loaded at start (frozen, or by site): found in sys.modules, not on a path.
    import os, sys

    def writable(path):
        """Whether `path`, or the nearest of its parents that exists, is on a writable mount."""
        while True:
            try:
                return not os.statvfs(path).f_flag & os.ST_RDONLY
            except (FileNotFoundError, NotADirectoryError):
                parent = os.path.dirname(path)
                if parent == path:
                    return True
                path = parent
            except OSError:
                return True

    def refuse(what):
        os.write(2, ("kern zygote: %s; the zygote runs only what the image holds read-only\n" % what).encode("utf-8", "replace"))
        os._exit(78)

    def check_loaded():
        for name, m in list(sys.modules.items()):
            d = getattr(m, "__dict__", None) or {}
            for f in (d.get("__file__"), d.get("__cached__")):
                if isinstance(f, str) and writable(f):
                    refuse("module %s was loaded from %s, a writable place" % (name, f))

    info = os.environ.pop("KERN_ZYGOTE_ENV", None)
    if info is None:
        refuse("started without KERN_ZYGOTE_ENV")
    os.chdir("/")
    sys.path[:] = [p for p in sys.path if p and os.path.isabs(p) and not writable(p)]
    sys.path_importer_cache.clear()
    check_loaded()
    return info, check_loaded


_kern_zygote_info, _kern_zygote_check = _kern_zygote_guard()


def _kern_zygote(channel):
    import base64, ctypes, gc, json, os, signal, socket, struct, sys

    libc = ctypes.CDLL(None, use_errno=True)
    syscall = libc.syscall
    syscall.restype = ctypes.c_long

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    class Failed(Exception):
        pass

    def _fd_named(a):
        """The saved fd an argument names (a `var`, a `beneath` rule's directory), if any."""
        if isinstance(a, dict):
            if "var" in a:
                return a["var"]
            if "beneath" in a:
                return a["beneath"]["fd"]
        return None

    def run(ops):
        saved = {}
        for op in ops:
            what = op["what"]
            if op["op"] == "write":
                try:
                    fd = os.open(op["path"], os.O_WRONLY | os.O_CLOEXEC)
                    try:
                        os.write(fd, op["data"].encode())
                    finally:
                        os.close(fd)
                except OSError as e:
                    raise Failed("%s: %s" % (what, e.strerror)) from None
                continue
            # A step on an fd an earlier, tolerated step did not make (no Landlock in this
            # kernel) has nothing to act on.
            if any(_fd_named(a) is not None and _fd_named(a) not in saved for a in op["args"]):
                continue
            args, keep = [], []
            for a in op["args"]:
                if a == "null":
                    args.append(None)
                    continue
                ((kind, v),) = a.items()
                if kind == "int":
                    args.append(ctypes.c_long(v))
                elif kind == "str":
                    b = ctypes.create_string_buffer(v.encode())
                    keep.append(b)
                    args.append(b)
                elif kind == "bytes":
                    raw = base64.b64decode(v)
                    b = ctypes.create_string_buffer(raw, len(raw))
                    keep.append(b)
                    args.append(b)
                elif kind == "fprog":
                    raw = base64.b64decode(v)
                    b = ctypes.create_string_buffer(raw, len(raw))
                    f = Fprog(len(raw) // 8, ctypes.addressof(b))
                    keep += [b, f]
                    args.append(ctypes.byref(f))
                elif kind == "var":
                    args.append(ctypes.c_long(saved[v]))
                elif kind == "beneath":
                    # struct landlock_path_beneath_attr, packed: u64 allowed_access, s32 parent_fd.
                    raw = struct.pack("=Qi", v["allowed"], saved[v["fd"]])
                    b = ctypes.create_string_buffer(raw, len(raw))
                    keep.append(b)
                    args.append(b)
                else:
                    raise Failed("%s: an argument of unknown kind %r" % (what, kind))
            ret = syscall(ctypes.c_long(op["nr"]), *args)
            if ret < 0:
                err = ctypes.get_errno()
                if err in op.get("tolerate", ()):
                    continue
                raise Failed("%s: %s" % (what, os.strerror(err)))
            if "save" in op:
                saved[op["save"]] = ret

    def creds(sock, tag):
        cred = struct.pack("iII", os.getpid(), os.getuid(), os.getgid())
        sock.sendmsg([tag], [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, cred)])

    def say(sock, tag, *fields):
        try:
            sock.sendall(_kern_pid1_msg(tag, *fields))
        except OSError:
            pass

    def call(sock):
        """C: the call's fork. Returns only in W, with the call's channel; C and P end here,
        saying why if anything unexpected stops them."""
        try:
            return become(sock)
        except SystemExit:
            raise
        except BaseException as e:
            say(sock, "S", "the zygote's fork (pid %d): %s: %s" % (os.getpid(), type(e).__name__, e))
            os._exit(1)

    def become(sock):
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        creds(sock, _KERN_FORK_FORKED)
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 2)
        if not msg or len(fds) != 2:
            os._exit(1)
        plans = json.loads(msg)
        out, err = fds
        try:
            run(plans["call"])
        except Failed as e:
            say(sock, "S", e)
            os._exit(1)
        p = os.fork()
        if p:
            # C: how P ended, for kern; nothing else.
            for fd in (out, err):
                os.close(fd)
            while True:
                try:
                    _, status = os.waitpid(p, 0)
                    break
                except ChildProcessError:
                    status = 0
                    break
                except InterruptedError:
                    continue
            say(sock, "Z", status)
            os._exit(0)
        # P: PID 1 of the call. Python's SIGINT handler would let the workload interrupt it (a
        # PID namespace's init gets only the signals it handles); the default drops them. W
        # takes the driver's handler back (a cell's SIGINT is its KeyboardInterrupt).
        sigint = signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        creds(sock, _KERN_FORK_PID1)
        try:
            run(plans["pid1"])
        except Failed as e:
            say(sock, "S", e)
            os._exit(1)
        w = os.fork()
        if w:
            for fd in (out, err):
                os.close(fd)
            os.closerange(3, sock.fileno())
            os.closerange(sock.fileno() + 1, 1 << 20)
            while True:
                try:
                    pid, status = os.wait()
                except ChildProcessError:
                    os._exit(0)
                except InterruptedError:
                    continue
                if pid == w:
                    # The call ends with W, as a fresh box ends with its workload: P's exit
                    # ends every process left in the call's PID namespace.
                    if os.WIFSIGNALED(status):
                        sig = os.WTERMSIG(status)
                        say(sock, "K", sig)
                        code = 128 + sig
                    else:
                        code = os.WEXITSTATUS(status)
                    used = []
                    for target in plans.get("tmpfs", ()):
                        try:
                            v = os.statvfs(target)
                            used.append((v.f_blocks - v.f_bfree) * v.f_frsize)
                        except OSError:
                            used.append(0)
                    say(sock, "X", code, *used)
                    os._exit(0)
        # W: the call's posture; then it waits for the call, whose channel kern sends when the
        # call comes; then nothing of the zygote's is left but the call's stdio and channel.
        try:
            signal.signal(signal.SIGINT, sigint)
            null = os.open("/dev/null", os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out, 1)
            os.dup2(err, 2)
            run(plans["workload"])
            if libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE)")
            say(sock, "w")
        except (Failed, OSError) as e:
            say(sock, "S", e)
            os._exit(127)
        msg, fds, _, _ = socket.recv_fds(sock, 16, 1)
        if msg != _KERN_FORK_GO or len(fds) != 1:
            # No call came (the Sandbox closed): nothing ran here.
            os._exit(0)
        keep = fds[0]
        for fd in range(3, keep):
            try:
                os.close(fd)
            except OSError:
                pass
        os.closerange(keep + 1, 1 << 20)
        sock.detach()
        # The channel where a fresh box's driver keeps it: taken from fd 3 to the lowest fd
        # free after it. Every signal is as the zygote's python had it (C put SIGCHLD back, W
        # SIGINT).
        if keep != 3:
            os.dup2(keep, 3)
            os.close(keep)
        keep = os.dup(3)
        os.close(3)
        # The channel holds the driver first, for a fresh box's loader (driver.rs, PY_LOADER):
        # read past it, so a call's channel is the same whichever box takes it.
        skip_driver(keep)
        try:
            as_fresh()
        except Exception as e:
            os.write(2, ("kern zygote: the call's interpreter: %s: %s\n" % (type(e).__name__, e)).encode("utf-8", "replace"))
            os._exit(70)
        return keep

    def skip_driver(fd):
        def take(n):
            b = bytearray()
            while len(b) < n:
                c = os.read(fd, min(n - len(b), 1 << 20))
                if not c:
                    os.write(2, b"kern zygote: the call's channel closed before its first frame\n")
                    os._exit(70)
                b += c
            return b
        head = take(8)
        take(int.from_bytes(head[:4], "big") + int.from_bytes(head[4:], "big"))

    def as_fresh():
        """W, in the call's box, with nothing of the zygote's left but its memory: what a fresh
        box's python has at this point and the zygote's did not take (see the top): the
        environment, the workspace as cwd, PYTHONPATH, the user site and what it runs, the
        sitecustomize found first, '' first on sys.path."""
        import site

        env = info["env"]
        os.environ.update(env)
        os.chdir(info["cwd"])
        hook = info.get("hook")
        value = env.get("PYTHONPATH")
        given = [os.path.abspath(p) for p in value.split(":")] if value else []
        seen, path = set(), []
        for p in given + sys.path:
            if p != hook and p not in seen:
                seen.add(p)
                path.append(p)
        sys.path[:] = path
        prefix = env.get("PYTHONPYCACHEPREFIX")
        if prefix:
            sys.pycache_prefix = prefix
        if site.ENABLE_USER_SITE:
            site.USER_BASE = site.USER_SITE = None
            user = site.getusersitepackages()
            if os.path.isdir(user):
                system = set(site.getsitepackages())
                at = next((i for i, p in enumerate(sys.path) if p in system), len(sys.path))
                tail = sys.path[at:]
                del sys.path[at:]
                site.addsitedir(user)
                sys.path.extend(p for p in tail if p not in sys.path)
        external = sys.modules["_frozen_importlib_external"]
        bootstrap = sys.modules["_frozen_importlib"]
        for name, wanted in (("sitecustomize", True), ("usercustomize", site.ENABLE_USER_SITE)):
            spec = external.PathFinder.find_spec(name, sys.path) if wanted else None
            ran = getattr(sys.modules.get(name), "__spec__", None)
            if spec is None or (ran is not None and ran.origin == spec.origin):
                continue
            try:
                module = bootstrap.module_from_spec(spec)
                sys.modules[name] = module
                spec.loader.exec_module(module)
            except Exception as err:
                sys.modules.pop(name, None)
                if sys.flags.verbose:
                    sys.excepthook(*sys.exc_info())
                else:
                    sys.stderr.write("Error in %s; set PYTHONVERBOSE for traceback:\n%s: %s\n" % (name, type(err).__name__, err))
        if not sys.flags.safe_path:
            sys.path.insert(0, "")

    # Non-dumpable, as a fresh box's PID 1: the zygote, and C and P after it (they hold
    # capabilities, in the zygote's box and in the call's namespaces), can't be traced or have
    # their memory read by a process of their uid. Only W turns dumpable again, as a workload
    # a fresh box execs is.
    PR_SET_DUMPABLE = 4
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE)")
    info = json.loads(_kern_zygote_info)
    # Everything the zygote and the driver imported came from read-only places too.
    _kern_zygote_check()
    ctl = socket.socket(fileno=channel)
    # Forks are reaped by the kernel: a call's C reports to kern, not to us.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    ctl.sendall(b"r")
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(ctl, 16, 1)
        except InterruptedError:
            continue
        if not msg:
            os._exit(0)
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            continue
        # What the zygote made so far is left out of every later collection: a fork's GC then
        # never writes to the pages it shares with the zygote (copied on write), and its end
        # (the driver's the_end) collects and scans only what the call made.
        gc.freeze()
        try:
            forked = os.fork()
        except OSError:
            # No fork now (a cap of the zygote's box): that spare's kern sees its socket close
            # and says so; the zygote, and every call it forked, live on.
            os.close(fds[0])
            continue
        if forked == 0:
            # The driver's at-fork hook closed its copy of the channel; ctl is the same fd.
            sock = socket.socket(fileno=fds[0])
            ctl.detach()
            return call(sock)
        os.close(fds[0])
