# The rich-display part of the python driver (see the top of driver.py): compiled in the box on
# first need, from the string driver.rs makes of this file. Its globals are the names the core
# hands over in rich(), captured when the driver started (scripts/check-python.py checks it
# with them). It may not hold three single quotes in a row: they would end that string.

# ---- tracebacks
def exc_line(e):
    t = type(e)
    name = t.__qualname__ if t.__module__ in ("builtins", "__main__") else "%s.%s" % (t.__module__, t.__qualname__)
    msg = safe_str(e)
    return "%s: %s\n" % (name, msg) if msg else name + "\n"


def user_tb(tb, fname):
    """The traceback without the driver's frames: from the cell's first frame when there is
    one, else from the first frame that is not the driver's."""
    if fname is not None:
        t = tb
        while t is not None and t.tb_frame.f_code.co_filename != fname:
            t = t.tb_next
        if t is not None:
            return t
    while tb is not None and tb.tb_frame.f_code.co_filename == DRIVER_FILE:
        tb = tb.tb_next
    return tb


def format_exc(e, tb):
    fmt = st.format_exception
    if fmt is None:
        try:
            import traceback

            fmt = st.format_exception = traceback.format_exception
        except Exception:
            fmt = None
    linecache = modules.get("linecache")
    if linecache is not None:
        sync_linecache(linecache)
    try:
        text = "".join(fmt(type(e), e, tb))
        if isinstance(text, str) and text:
            return text
    except Exception:
        pass
    lines = ["Traceback (most recent call last):\n"] if tb is not None else []
    while tb is not None:
        co = tb.tb_frame.f_code
        lines.append('  File "%s", line %s, in %s\n' % (co.co_filename, tb.tb_lineno, co.co_name))
        tb = tb.tb_next
    return "".join(lines) + exc_line(e)


def report(e, what):
    """A problem that does not fail the cell (a raising repr method): said on stderr."""
    err("%s\n%s" % (what, format_exc(e, user_tb(e.__traceback__, None))))


# ---- rich display: IPython's formatter rules
TEXT_MIMES = ("text/plain", "text/html", "text/markdown", "text/latex", "image/svg+xml", "application/javascript")
BINARY_MIMES = ("image/png", "image/jpeg", "application/pdf")
REPR_METHODS = (
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
    ("_repr_pdf_", "application/pdf"),
    ("_repr_json_", "application/json"),
    ("_repr_latex_", "text/latex"),
    ("_repr_javascript_", "application/javascript"),
)
BYTES_TYPES = (bytes, bytearray, memoryview)


def type_name(obj):
    return obj.__name__ if isinstance(obj, type) else type(obj).__name__


def lookup(obj, name):
    """A display method the object really has: not one conjured by a __getattr__ that answers
    every name, and not a plain function found on a class object (display(SomeClass))."""
    try:
        if getattr(obj, "_kern_driver_no_such_method_", None) is not None:
            return None
        method = getattr(obj, name, None)
    except Exception:
        return None
    if method is None or (isinstance(obj, type) and not isinstance(method, MethodType)):
        return None
    return method if callable(method) else None


def call(obj, method, name, what, *args, **kwargs):
    try:
        return method(*args, **kwargs)
    except Exception as e:
        what = "%s.%s() raised %s, so %s is left out of the display:" % (type_name(obj), name, type(e).__name__, what)
        report(e, what)
        return None


def safe_repr(obj):
    try:
        return repr(obj)
    except Exception as e:
        report(e, "repr() of a %s object raised %s:" % (type_name(obj), type(e).__name__))
        return "<unrepresentable object: %s: %s>" % (type(e).__name__, safe_str(e))


def b64(data):
    return b2a(bytes(data), newline=False).decode("ascii")


def wire_value(mime, value, source):
    """The value as it goes on the wire for `mime`, or None (and a line on stderr)."""
    if mime in BINARY_MIMES:
        if isinstance(value, str):
            return value  # already base64
        if isinstance(value, BYTES_TYPES):
            return b64(value)
        want = "bytes or a base64 str"
    elif mime in TEXT_MIMES or mime.startswith("text/"):
        if isinstance(value, str):
            return value
        if isinstance(value, BYTES_TYPES):
            return bytes(value).decode("utf-8", "replace")
        want = "str"
    elif mime == "application/json":
        if isinstance(value, (dict, list)):
            return value
        if isinstance(value, str):
            try:
                parsed = loads(value)
                if isinstance(parsed, (dict, list)):
                    return parsed
            except Exception:
                pass
        want = "a dict or a list"
    elif isinstance(value, BYTES_TYPES):
        return b64(value)
    else:
        return value  # any JSON value; checked when the frame is encoded
    err("%s returned %s, not %s, so %s is left out of the display\n" % (source, type(value).__name__, want, mime))
    return None


def figure_class():
    figure = modules.get("matplotlib.figure")
    return getattr(figure, "Figure", None) if figure is not None else None


def figure_bundle(fig):
    data = {"text/plain": safe_repr(fig)}
    try:
        if fig.axes or getattr(fig, "lines", None):  # like IPython: an empty figure is text only
            buf = BytesIO()
            fig.savefig(buf, format="png", bbox_inches="tight")
            data["image/png"] = b64(buf.getvalue())
    except Exception as e:
        what = "rendering %s raised %s, so image/png is left out of the display:"
        report(e, what % (data["text/plain"], type(e).__name__))
    return data, {}


# ---- chart data: charts.py (its chart_of), compiled with this part


def patch_pil(mod, display):
    """Image.show() displays the image instead of looking for a viewer; Image.save(path) also
    displays it (a path as a str, before saving, as E2B does)."""
    image = getattr(mod, "Image", None)
    if not isinstance(image, type) or getattr(image.show, "_kern_wrapped", False):
        return
    save = image.save

    def show(self, title=None, **kwargs):
        display(self)

    def save_shown(self, fp, *args, **kwargs):
        if isinstance(fp, str):
            display(self)
        return save(self, fp, *args, **kwargs)

    show.__doc__, show._kern_wrapped = image.show.__doc__, True
    save_shown.__doc__, save_shown.__wrapped__ = save.__doc__, save
    image.show, image.save = show, save_shown


def patch_boxplot(plt):
    """Box plots are drawn as plain lines: their statistics are kept on the Axes when bxp()
    draws them, for chart_of."""
    axes_type = getattr(modules.get("matplotlib.axes"), "Axes", None)
    original = getattr(axes_type, "bxp", None)
    if original is None or getattr(original, "_kern_wrapped", False):
        return

    def bxp(self, bxpstats, *args, **kwargs):
        out = original(self, bxpstats, *args, **kwargs)
        try:
            stats = getattr(self, "_kern_box_stats", None) or []
            self._kern_box_stats = stats + [dict(s) for s in bxpstats]
        except Exception:
            pass
        return out

    bxp.__doc__, bxp.__wrapped__, bxp._kern_wrapped = original.__doc__, original, True
    axes_type.bxp = bxp


def bundle(obj, include=None, exclude=None):
    figure = figure_class()
    if figure is not None and isinstance(obj, figure):
        data, md = figure_bundle(obj)
    else:
        given, md = {}, {}
        method = lookup(obj, "_repr_mimebundle_")
        if method is not None:
            r = call(obj, method, "_repr_mimebundle_", "its bundle", include=include, exclude=exclude)
            if isinstance(r, tuple) and len(r) == 2:
                r, m = r
                if isinstance(m, dict):
                    md.update(m)
            if isinstance(r, dict):
                given = r
            elif r is not None:
                err("%s._repr_mimebundle_() returned %s, not a dict; ignored\n" % (type_name(obj), type(r).__name__))
        value = None
        if "text/plain" in given:
            value = wire_value("text/plain", given["text/plain"], "%s._repr_mimebundle_()" % type_name(obj))
        data = {"text/plain": safe_repr(obj) if value is None else value}  # text/plain, always
        for mime, value in given.items():
            if mime != "text/plain" and isinstance(mime, str):
                value = wire_value(mime, value, "%s._repr_mimebundle_()" % type_name(obj))
                if value is not None:
                    data[mime] = value
        for name, mime in REPR_METHODS:
            if mime in data or (include and mime not in include) or (exclude and mime in exclude):
                continue
            method = lookup(obj, name)
            if method is None:
                continue
            r = call(obj, method, name, mime)
            if isinstance(r, tuple) and len(r) == 2:
                r, m = r
                if m is not None:
                    md[mime] = m
            if r is not None:
                value = wire_value(mime, r, "%s.%s()" % (type_name(obj), name))
                if value is not None:
                    data[mime] = value
        table_data(obj, data, include, exclude)
    if include:
        data = {k: v for k, v in data.items() if k in include}
    if exclude:
        data = {k: v for k, v in data.items() if k not in exclude}
    return data, md


TABLE_MIME = "application/vnd.dataresource+json"
MAX_TABLE_CELLS = 100000


def table_data(obj, data, include, exclude):
    """A pandas DataFrame's rows as Table Schema JSON (pandas' own `to_json(orient="table")`),
    beside its text and HTML, so a caller gets the values and not only their rendering."""
    frame = getattr(modules.get("pandas"), "DataFrame", None)
    if not isinstance(frame, type) or not isinstance(obj, frame) or TABLE_MIME in data:
        return
    if (include and TABLE_MIME not in include) or (exclude and TABLE_MIME in exclude):
        return
    try:
        cells = obj.shape[0] * max(1, obj.shape[1])
    except Exception:
        return
    if cells > MAX_TABLE_CELLS:
        err("a DataFrame of %d cells is shown without its table data (%s): at most %d cells\n" % (cells, TABLE_MIME, MAX_TABLE_CELLS))
        return
    text = call(obj, obj.to_json, "to_json", TABLE_MIME, orient="table", date_format="iso")
    try:
        value = loads(text) if isinstance(text, str) else None
    except Exception:
        value = None
    if isinstance(value, dict):
        data[TABLE_MIME] = value


def send_bundle(kind, data, md, chart=None):
    frame = {"type": kind, "data": data, "metadata": md}
    if chart is not None:
        frame["chart"] = chart
    try:
        payload = utf8(dumps(frame))
    except Exception:
        for mime in list(data):
            try:
                dumps(data[mime])
            except Exception as e:
                err("%s cannot be sent (%s: %s); left out of the display\n" % (mime, type(e).__name__, e))
                del data[mime]
        try:
            dumps(md)
        except Exception as e:
            err("display metadata cannot be sent (%s: %s); dropped\n" % (type(e).__name__, e))
            frame["metadata"] = {}
        frame.pop("chart", None)
        try:
            payload = utf8(dumps(frame))
        except Exception as e:
            err("a %s could not be encoded (%s); dropped\n" % (kind, e))
            return
    if len(payload) + 4 > MAX_FRAME:
        what = "a %s of %d bytes is over the %d-byte frame limit; only its text/plain is sent\n"
        err(what % (kind, len(payload), MAX_FRAME))
        frame["data"] = {k: v for k, v in data.items() if k == "text/plain"}
        frame["metadata"] = {}
        frame.pop("chart", None)
        payload = utf8(dumps(frame))
        if len(payload) + 4 > MAX_FRAME:
            return
    send_raw(payload)


def publish(kind, obj, metadata=None, include=None, exclude=None):
    if st.fd < 0:
        return
    figure = figure_class()
    if figure is None or not isinstance(obj, figure):
        method = lookup(obj, "_ipython_display_")
        if method is not None:
            try:
                method()
                return
            except Exception as e:
                what = "%s._ipython_display_() raised %s; displaying it the usual way:"
                report(e, what % (type_name(obj), type(e).__name__))
    data, md = bundle(obj, include, exclude)
    if isinstance(metadata, dict):
        md.update(metadata)
    chart = chart_of(obj) if figure is not None and isinstance(obj, figure) else None
    send_bundle(kind, data, md, chart)


def display(objs, include, exclude, metadata, raw):
    for obj in objs:
        if raw and isinstance(obj, dict):
            data = {}
            for mime, value in obj.items():
                if isinstance(mime, str):
                    value = wire_value(mime, value, "display(raw=True)")
                    if value is not None:
                        data[mime] = value
            send_bundle("display", data, dict(metadata) if isinstance(metadata, dict) else {})
        else:
            publish("display", obj, metadata, include, exclude)


def show_result(value):
    publish("result", value)
    figure = figure_class()
    return value if figure is not None and isinstance(value, figure) else None


def flush_figures(skip=None):
    plt = modules.get("matplotlib.pyplot")
    if plt is None:
        return
    try:
        nums = list(plt.get_fignums())
    except Exception as e:
        report(e, "matplotlib.pyplot.get_fignums() raised %s:" % type(e).__name__)
        nums = []
    try:
        for num in nums:
            try:
                fig = plt.figure(num)
            except Exception as e:
                report(e, "matplotlib.pyplot.figure(%r) raised %s:" % (num, type(e).__name__))
                continue
            if fig is not skip:
                data, md = figure_bundle(fig)
                send_bundle("display", data, md, chart_of(fig))
    finally:
        try:
            plt.close("all")
        except Exception as e:
            report(e, "matplotlib.pyplot.close('all') raised %s:" % type(e).__name__)


def patch_show(plt):
    patch_boxplot(plt)
    original = plt.show

    def show(*args, **kwargs):
        try:
            backend = safe_str(modules["matplotlib"].get_backend()).lower()
        except Exception:
            backend = ""
        if backend != "agg":
            return original(*args, **kwargs)
        flush_figures()  # as matplotlib-inline does: display every open figure, close them

    show.__doc__ = original.__doc__
    show.__wrapped__ = original
    plt.show = show


# ---- the post-import hook's work (AfterImport in the core)
class Loader:
    """The real loader, plus a callback once the module has run."""

    def __init__(self, inner, callback):
        self._inner, self._callback = inner, callback

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_inner", "_callback"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    def create_module(self, spec):
        create = getattr(self._inner, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        self._inner.exec_module(module)
        try:
            self._callback(module)
        except Exception:
            pass


def wrap_spec(hook, name, path, target, callback):
    """The spec the finders after `hook` give, its loader wrapped; None (the usual import) if
    anything is unusual."""
    hook.busy.add(name)
    try:
        for finder in list(sys.meta_path):
            find = None if finder is hook else getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
    except Exception:
        return None
    finally:
        hook.busy.discard(name)
    if spec.loader is None or not hasattr(spec.loader, "exec_module"):
        return None
    spec.loader = Loader(spec.loader, callback)
    return spec


# ---- cells
def future_flags(code_obj):
    """The __future__ flags a compiled cell turned on, which later cells keep."""
    import __future__

    mask = 0
    for feature in __future__.all_feature_names:
        mask |= getattr(__future__, feature).compiler_flag
    return code_obj.co_flags & mask


def run_async(coroutine):
    """A cell with top-level await, on one event loop that lives as long as the driver."""
    import asyncio

    if st.loop is None or st.loop.is_closed():
        st.loop = asyncio.new_event_loop()
    asyncio.set_event_loop(st.loop)
    return st.loop.run_until_complete(coroutine)


def show_error(e, fname):
    tb = user_tb(e.__traceback__, fname) if fname is not None else None
    text = format_exc(e, tb)
    sys.last_type, sys.last_value, sys.last_traceback = type(e), e, tb
    if hasattr(sys, "last_exc"):
        sys.last_exc = e
    err(text)
    send({"type": "error", "ename": type(e).__name__, "evalue": safe_str(e), "traceback": text})
