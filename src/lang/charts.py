# Chart data of a matplotlib figure, as E2B reports it (src/lang/driver.rs puts this file in two
# places): the python driver's rich part reads it from each figure it shows, and a Jupyter
# python kernel's display formatter does (jupyter_charts.py). Its globals are given by both:
# `modules` (sys.modules), `safe_str` and `report(e, what)`. Stdlib only; matplotlib is never
# imported for it. It may not hold three single quotes in a row: it goes into a raw string.

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
