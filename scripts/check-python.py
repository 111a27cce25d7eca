#!/usr/bin/env python3
"""Checks the Python of this repo: every .py under src/ and scripts/ byte-compiles (py_compile)
and passes ruff (ruff.toml: its rules, and syntax no newer than the images' oldest python).

driver_rich.py is the driver's rich part, compiled in the box on first need with the globals
driver.py hands it (the keywords of the `dict(...)` in rich()) and the names charts.py defines
(compiled with it): ruff checks it with those names declared as builtins. charts.py itself gets
the three names both its hosts give it (the driver's rich part, jupyter_charts.py).
driver_state.py, the state part, gets the names state_part() in driver.py gives its module (the
keywords of its `.update(...)`). None may hold three single quotes in a row: driver.rs puts each
in a raw string.

    python3 scripts/check-python.py [RUFF]    # RUFF: default target/tools/ruff (setup-deps.sh)

Exit status 1 when anything fails; every failure is printed first.
"""
import ast
import json
import os
import py_compile
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRIVER = os.path.join("src", "lang", "driver.py")
RICH = os.path.join("src", "lang", "driver_rich.py")
CHARTS = os.path.join("src", "lang", "charts.py")
STATE = os.path.join("src", "lang", "driver_state.py")
CHARTS_GIVEN = ["modules", "report", "safe_str"]


def python_files():
    found = []
    for top in ("src", "scripts"):
        for root, dirs, files in os.walk(os.path.join(REPO, top)):
            dirs[:] = sorted(d for d in dirs if d not in ("node_modules", "__pycache__"))
            found += [os.path.relpath(os.path.join(root, f), REPO) for f in sorted(files) if f.endswith(".py")]
    return found


def given_names(path, function, callee):
    """The keywords of the calls to `callee` (a name, or an attribute such as `update`) in
    `function` of driver.py: the names it hands a part."""
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and callee in (getattr(call.func, "id", None), getattr(call.func, "attr", None)):
                    names.update(k.arg for k in call.keywords)
    if not names:
        raise SystemExit("check-python: %s has no %s(...) in %s(): update this script" % (path, callee, function))
    return sorted(names)


def top_level_names(path):
    """The names a file defines at its top level (functions, classes, assignments)."""
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return sorted(names)


def main():
    ruff = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "target", "tools", "ruff")
    files = python_files()
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for i, path in enumerate(files):
            try:
                py_compile.compile(os.path.join(REPO, path), cfile=os.path.join(tmp, "%d.pyc" % i), doraise=True)
            except py_compile.PyCompileError as e:
                print(e.msg, file=sys.stderr)
                failed = True
    names = sorted(set(given_names(DRIVER, "rich", "dict")) | set(top_level_names(CHARTS)))
    for path in (RICH, CHARTS, STATE):
        with open(os.path.join(REPO, path), encoding="utf-8") as f:
            if "\'\'\'" in f.read():
                print("%s: three single quotes in a row would end the string driver.rs makes of it" % path, file=sys.stderr)
                failed = True
    if not os.access(ruff, os.X_OK):
        print("check-python: no ruff at %s (bash scripts/setup-deps.sh installs it)" % ruff, file=sys.stderr)
        return 1
    base = [ruff, "check", "--no-cache", "--quiet", "--output-format", "concise"]
    runs = [
        base + [f for f in files if f not in (RICH, CHARTS, STATE)],
        base + ["--config", "builtins = %s" % json.dumps(names), RICH],
        base + ["--config", "builtins = %s" % json.dumps(given_names(DRIVER, "state_part", "update")), STATE],
        base + ["--config", "builtins = %s" % json.dumps(CHARTS_GIVEN), CHARTS],
    ]
    for argv in runs:
        if subprocess.run(argv, cwd=REPO).returncode != 0:
            failed = True
    if not failed:
        print("check-python: %d files compile and pass ruff (%s, %s and %s with the names they are given)" % (len(files), RICH, CHARTS, STATE))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
