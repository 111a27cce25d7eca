#!/usr/bin/env python3
"""Checks the Python of this repo: every .py under src/ and scripts/ byte-compiles (py_compile)
and passes ruff (ruff.toml: its rules, and syntax no newer than the images' oldest python).

driver.py carries half its code in a string (_RICH, compiled in the box on first need), which
neither check would see as code: it is checked too, at its own lines of driver.py, with the
globals the driver hands it (the keywords of the `dict(...)` in rich()) declared as builtins.

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


def python_files():
    found = []
    for top in ("src", "scripts"):
        for root, dirs, files in os.walk(os.path.join(REPO, top)):
            dirs[:] = sorted(d for d in dirs if d not in ("node_modules", "__pycache__"))
            found += [os.path.relpath(os.path.join(root, f), REPO) for f in sorted(files) if f.endswith(".py")]
    return found


def embedded_rich(path):
    """driver.py's _RICH string, padded so that its lines keep their numbers in driver.py, and the
    names rich() hands it."""
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    source = line = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["_RICH"]:
            source, line = node.value.value, node.value.lineno
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "rich":
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "dict":
                    names.update(k.arg for k in call.keywords)
    if not isinstance(source, str) or not names:
        raise SystemExit("check-python: %s has no _RICH string or no dict(...) in rich(): update this script" % path)
    return "\n" * (line - 1) + source, sorted(names)


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
    rich, names = embedded_rich(DRIVER)
    try:
        compile(rich, DRIVER + " (_RICH)", "exec", dont_inherit=True)
    except SyntaxError as e:
        print("%s (_RICH):%s: %s" % (DRIVER, e.lineno, e.msg), file=sys.stderr)
        failed = True
    if not os.access(ruff, os.X_OK):
        print("check-python: no ruff at %s (bash scripts/setup-deps.sh installs it)" % ruff, file=sys.stderr)
        return 1
    base = [ruff, "check", "--no-cache", "--quiet", "--output-format", "concise"]
    runs = [
        (base + files, None),
        (base + ["--config", "builtins = %s" % json.dumps(names), "--stdin-filename", DRIVER, "-"], rich),
    ]
    for argv, stdin in runs:
        if subprocess.run(argv, cwd=REPO, input=stdin, text=True).returncode != 0:
            failed = True
    if not failed:
        print("check-python: %d files (and driver.py's _RICH) compile and pass ruff" % len(files))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
