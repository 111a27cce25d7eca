# kern's pycCache hook, imported as `sitecustomize` through PYTHONPATH (see pyc.rs). It makes
# python read the bytecode of the image's own modules from the read-only cache next to this
# file, and changes nothing else: sys.pycache_prefix stays unset, so the bytecode of everything
# else (the workspace, /tmp, py_compile, compileall, zipfile) goes where it goes without the
# cache. Then it runs the sitecustomize python would have imported without it (the image's, or
# one on the caller's PYTHONPATH), and leaves sys.path and sys.modules as they would be.
# It runs at every python start, so it imports nothing new: the import system's own classes come
# from the frozen modules python has already loaded (`importlib.util` alone pulled in contextlib
# and collections: 3.7 ms a start), and the builder compiled this file next to itself.
import os
import sys

_bootstrap = sys.modules['_frozen_importlib']
_external = sys.modules['_frozen_importlib_external']

_here = os.path.dirname(os.path.abspath(__file__))
while _here in sys.path:
    sys.path.remove(_here)


def _kern_pyc_install(here):
    import _imp

    machinery = _external
    lib = os.path.join(os.path.dirname(here), 'lib')

    def in_cache(bytecode_path):
        # <dir>/__pycache__/<name> -> <lib><dir>/<name>, where the builder put it; None for
        # anything not laid out like that.
        head, name = os.path.split(bytecode_path)
        d, pycache = os.path.split(head)
        return lib + d + '/' + name if pycache == '__pycache__' and d.startswith('/') else None

    class Loader(machinery.SourceFileLoader):
        def get_data(self, path):
            if path.endswith('.pyc'):
                cached = in_cache(path)
                if cached is not None:
                    try:
                        with open(cached, 'rb') as f:
                            return f.read()
                    except OSError:
                        pass
            return super().get_data(path)

    class Finder(machinery.FileFinder):
        def _get_spec(self, loader_class, fullname, path, *rest):
            spec = super()._get_spec(loader_class, fullname, path, *rest)
            # __cached__ names the file the bytecode really comes from.
            if loader_class is Loader and spec.cached:
                cached = in_cache(spec.cached)
                if cached is not None and os.path.isfile(cached):
                    spec.cached = cached
            return spec

    ours = Finder.path_hook(
        (machinery.ExtensionFileLoader, _imp.extension_suffixes()),
        (Loader, machinery.SOURCE_SUFFIXES),
        (machinery.SourcelessFileLoader, machinery.BYTECODE_SUFFIXES),
    )
    for i, default in enumerate(sys.path_hooks):  # noqa: B007 (i is used after the break)
        if getattr(default, '__qualname__', '').startswith('FileFinder.path_hook'):
            break
    else:
        return

    def image_dir(path):
        # Only directories the cache was built for (the image's own sys.path) qualify.
        return isinstance(path, str) and path.startswith('/') and os.path.isdir(lib + path)

    def hook(path):
        return ours(path) if image_dir(path) else default(path)

    sys.path_hooks[i] = hook
    for path in list(sys.path_importer_cache):
        if image_dir(path):
            del sys.path_importer_cache[path]


def _kern_pyc_chain():
    spec = _external.PathFinder.find_spec('sitecustomize', sys.path)
    if spec is None:
        del sys.modules['sitecustomize']
        return
    module = _bootstrap.module_from_spec(spec)
    sys.modules['sitecustomize'] = module
    spec.loader.exec_module(module)


try:
    _kern_pyc_install(_here)
finally:
    _kern_pyc_chain()
