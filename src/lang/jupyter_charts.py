# Chart data for a Jupyter python kernel (ipykernel): run at the kernel's start as its
# PYTHONSTARTUP (src/session/kernel/jupyter/start.rs sets it when the caller has not), in the
# user's namespace, so everything happens in one function, deleted afterwards. It adds a display
# formatter that gives each matplotlib Figure shown the MIME type CHART_MIME: the chart data of
# charts.py, which the host moves into the result's `chart` (src/lang/jupyter/cell.rs).
# src/lang/driver.rs appends charts.py as the string _KERN_CHARTS and the call.


def _kern_charts(source):
    import sys

    try:
        from IPython import get_ipython
        from IPython.core.formatters import JSONFormatter
        from traitlets import Unicode
    except Exception:
        return  # not IPython (a plain interactive python): nothing to add
    ip = get_ipython()
    if ip is None or not hasattr(ip, "display_formatter"):
        return
    mime = "application/vnd.kern.chart+json"

    def safe_str(v):
        try:
            return str(v)
        except Exception:
            return "<unprintable>"

    def report(e, what):
        sys.stderr.write("kern-sandbox: %s %s\n" % (what, safe_str(e)))

    ns = {"modules": sys.modules, "safe_str": safe_str, "report": report}
    exec(compile(source, "<kern-charts>", "exec"), ns)

    chart_of = ns["chart_of"]

    def is_figure(obj):
        return any(c.__module__ == "matplotlib.figure" and c.__name__ == "Figure" for c in type(obj).__mro__)

    # Figures are told apart here, not registered with for_type: IPython's inline backend takes
    # every formatter's Figure printer away when it starts (select_figure_formats).
    class KernChartFormatter(JSONFormatter):
        format_type = Unicode(mime)

        def __call__(self, obj):
            try:
                return chart_of(obj) if self.enabled and is_figure(obj) else None
            except Exception as e:
                report(e, "reading the chart data of a figure failed:")
                return None

    ip.display_formatter.formatters[mime] = KernChartFormatter(parent=ip.display_formatter)
