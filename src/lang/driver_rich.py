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


# ---- chart data: what a matplotlib figure plots, as plain numbers and strings (the frame's
# "chart"), so a caller can read a chart without looking at its image. Read from the Figure
# the driver is about to send; matplotlib is never imported for it (a Figure exists only if the
# cell imported it). At most MAX_CHART_POINTS values are read per figure: a chart cut there
# says "truncated": true.
MAX_CHART_POINTS = 10000
MAX_CHART_TEXT = 1000


class Budget:
    def __init__(self):
        self.left = MAX_CHART_POINTS
        self.cut = False

    def take(self, n):
        """How many of n values may still be read."""
        k = min(n, self.left)
        self.left -= k
        if k < n:
            self.cut = True
        return k


def chart_text(v):
    try:
        s = v if isinstance(v, str) else v.get_text() if hasattr(v, "get_text") else safe_str(v)
    except Exception:
        s = ""
    return s[:MAX_CHART_TEXT] if isinstance(s, str) else ""


def chart_value(v):
    """A number (None for NaN and infinities), a string, or an ISO date."""
    try:
        if hasattr(v, "item") and not isinstance(v, (str, bytes)):
            v = v.item()  # a numpy scalar
        if isinstance(v, bool):
            return v
        if isinstance(v, (int, float)):
            f = float(v)
            if f != f or f in (float("inf"), float("-inf")):
                return None
            return v if isinstance(v, int) and abs(v) < (1 << 53) else f
        if isinstance(v, str):
            return v[:MAX_CHART_TEXT]
        if hasattr(v, "isoformat"):
            return v.isoformat()
    except Exception:
        pass
    return chart_text(v)


def chart_values(seq, budget):
    try:
        n = len(seq)
        return [chart_value(v) for v in list(seq[: budget.take(n)])]
    except Exception:
        return []


def legend_label(artist):
    label = chart_text(artist.get_label())
    return "" if label.startswith("_") else label


def axes_labels(ax):
    x, y = chart_text(ax.get_xlabel()), chart_text(ax.get_ylabel())
    return {"title": chart_text(ax.get_title()), "xLabel": x, "yLabel": y,
            "xUnit": label_unit(x), "yUnit": label_unit(y)}


def label_unit(label):
    """The unit an axis label names, as charts write it: "Time (s)" or "Time [s]" -> "s"."""
    import re

    match = re.search(r"\s\((.*?)\)|\[(.*?)\]", label)
    return (match.group(1) or match.group(2)) if match else None


def axis_scale(ax, which):
    """"datetime" for dates, "categorical" for strings, else matplotlib's scale name."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    try:
        get = getattr(axis, "get_converter", None)
        conv = get() if get is not None else getattr(axis, "converter", None)
        dates, category = modules.get("matplotlib.dates"), modules.get("matplotlib.category")
        kinds = tuple(getattr(dates, n, None) for n in ("DateConverter", "_SwitchableDateConverter"))
        if conv is not None and isinstance(conv, tuple(k for k in kinds if isinstance(k, type))):
            return "datetime"
        cat = getattr(category, "StrCategoryConverter", None)
        if conv is not None and isinstance(cat, type) and isinstance(conv, cat):
            return "categorical"
        return ax.get_xscale() if which == "x" else ax.get_yscale()
    except Exception:
        return None


def axis_ticks(ax, which, scale):
    """The axis's tick positions (ISO dates on a datetime axis) and their labels as drawn."""
    try:
        ticks = list(ax.get_xticks() if which == "x" else ax.get_yticks())
        labels = [chart_text(t) for t in (ax.get_xticklabels() if which == "x" else ax.get_yticklabels())]
        if scale == "datetime":
            num2date = modules["matplotlib.dates"].num2date
            return [num2date(t).isoformat() for t in ticks], labels
        return [chart_value(t) for t in ticks], labels
    except Exception:
        return [], []


def significant(x):
    """`x` rounded as E2B's charts round a pie's angles: to 8 - e significant digits, where e is
    its decimal exponent (323.99999999999994 -> 324.0, 0.123456789123 -> 0.123456789)."""
    try:
        from decimal import Decimal

        d = Decimal(repr(float(x)))
        digits = max(1, 8 - d.adjusted())
        return float(round(d, digits - 1 - d.adjusted()))
    except Exception:
        return chart_value(x)


def tick_labels(ax, axis):
    """Tick position -> its label, for the bars' names."""
    out = {}
    try:
        get = ax.get_xticklabels if axis == "x" else ax.get_yticklabels
        for t in get():
            x, y = t.get_position()
            out[round(float(x if axis == "x" else y), 6)] = chart_text(t)
    except Exception:
        pass
    return out


def box_chart(ax, stats, budget):
    elements = []
    for s in stats:
        outliers = s.get("fliers", [])
        elements.append({
            "label": chart_text(s.get("label", "")),
            "min": chart_value(s.get("whislo")), "firstQuartile": chart_value(s.get("q1")),
            "median": chart_value(s.get("med")), "thirdQuartile": chart_value(s.get("q3")),
            "max": chart_value(s.get("whishi")), "outliers": chart_values(outliers, budget)})
    if not any(e["label"] for e in elements):
        names = list(tick_labels(ax, "x").values())
        if len(names) == len(elements):
            for e, name in zip(elements, names):
                e["label"] = name
    return dict(type="box_and_whisker", elements=elements, **axes_labels(ax))


def bar_chart(ax, containers, budget):
    elements = []
    for c in containers:
        horizontal = getattr(c, "orientation", "vertical") == "horizontal"
        ticks = tick_labels(ax, "y" if horizontal else "x")
        group = legend_label(c)
        for rect in list(c.patches)[: budget.take(len(c.patches))]:
            x, y, w, h = rect.get_x(), rect.get_y(), rect.get_width(), rect.get_height()
            at = round(float(y + h / 2 if horizontal else x + w / 2), 6)
            elements.append({"label": ticks.get(at, chart_text(chart_value(at))), "group": group,
                             "value": chart_value(w if horizontal else h)})
    return dict(type="bar", elements=elements, **axes_labels(ax))


def pie_chart(ax, wedges, budget):
    elements = []
    for w in wedges[: budget.take(len(wedges))]:
        elements.append({"label": legend_label(w), "angle": significant(abs(w.theta2 - w.theta1)),
                         "radius": chart_value(w.r)})
    return dict(type="pie", elements=elements, **axes_labels(ax))


def point_chart(kind, ax, series):
    """series: (label, xs, ys) each."""
    elements = [{"label": label, "points": [[x, y] for x, y in zip(xs, ys)]} for label, xs, ys in series]
    c = dict(type=kind, elements=elements, **axes_labels(ax))
    for which in ("x", "y"):
        scale = axis_scale(ax, which)
        c[which + "Scale"] = scale
        c[which + "Ticks"], c[which + "TickLabels"] = axis_ticks(ax, which, scale)
    return c


def axes_chart(ax, budget):
    stats = getattr(ax, "_kern_box_stats", None)
    if stats:
        return box_chart(ax, stats, budget)
    patches = modules.get("matplotlib.patches")
    containers = modules.get("matplotlib.container")
    collections = modules.get("matplotlib.collections")
    wedge = getattr(patches, "Wedge", ())
    wedges = [p for p in ax.patches if isinstance(p, wedge)] if wedge else []
    if wedges and len(wedges) == len(ax.patches):
        return pie_chart(ax, wedges, budget)
    bar_type = getattr(containers, "BarContainer", None)
    bars = [c for c in ax.containers if bar_type is not None and isinstance(c, bar_type)]
    lines = [line for line in ax.lines if line.get_visible()]
    path_type = getattr(collections, "PathCollection", None)
    dots = [c for c in ax.collections if path_type is not None and isinstance(c, path_type)]
    if bars and not lines and not dots:
        return bar_chart(ax, bars, budget)
    if lines and not bars and not dots:
        series = []
        for line in lines:
            xs, ys = line.get_xdata(), line.get_ydata()
            n = budget.take(min(len(xs), len(ys)))
            series.append((legend_label(line), [chart_value(v) for v in list(xs[:n])],
                           [chart_value(v) for v in list(ys[:n])]))
        return point_chart("line", ax, series)
    if dots and not bars and not lines:
        series = []
        for c in dots:
            offsets = c.get_offsets()
            n = budget.take(len(offsets))
            pts = list(offsets[:n])
            series.append((legend_label(c), [chart_value(p[0]) for p in pts], [chart_value(p[1]) for p in pts]))
        return point_chart("scatter", ax, series)
    return dict(type="unknown", elements=[], **axes_labels(ax))


def chart_of(fig):
    """The chart data of a Figure, or None when it has no axes with data or reading it fails."""
    try:
        budget = Budget()
        axes = [ax for ax in fig.axes if ax.get_visible() and ax.has_data()]
        if not axes:
            return None
        charts = [axes_chart(ax, budget) for ax in axes]
        sup = getattr(fig, "_suptitle", None)
        title = chart_text(sup) if sup is not None else ""
        if len(charts) == 1:
            chart = charts[0]
            if not chart["title"]:
                chart["title"] = title
        else:
            chart = {"type": "superchart", "title": title, "elements": charts}
        if budget.cut:
            chart["truncated"] = True
        return chart
    except Exception as e:
        report(e, "reading the chart data of a figure raised %s, so its result has no chart:" % type(e).__name__)
        return None


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
