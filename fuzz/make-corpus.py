#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora, fuzz/corpus/<target>/, from real examples.

Each seed is a small input in the form its target reads (the comment at the top of each
fuzz/fuzz_targets/<target>.rs): honest examples and the hostile shapes the unit tests use.
Deterministic: run it again and nothing changes (the seeds are committed).

    python3 fuzz/make-corpus.py
"""

import base64
import gzip
import io
import json
import os
import shutil
import struct
import subprocess
import tarfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")
MTIME = 1_600_000_000
SEP_LAYER = b"KERN-FUZZ-NEXT-LAYER"
SEP_FRAME = b"KERN-FUZZ-FRAME"
SEP_MESSAGE = b"KERN-FUZZ-NEXT-MESSAGE"


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# --- tar streams ---------------------------------------------------------------------------


def tar_of(entries, fmt=tarfile.GNU_FORMAT):
    """entries: (name, kind, data_or_linkname, mode); kind in file/dir/sym/link/fifo/chr."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for name, kind, payload, mode in entries:
            info = tarfile.TarInfo(name)
            info.mtime = MTIME
            info.mode = mode
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            data = None
            if kind == "file":
                data = payload
                info.size = len(payload)
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
            elif kind == "sym":
                info.type = tarfile.SYMTYPE
                info.linkname = payload
            elif kind == "link":
                info.type = tarfile.LNKTYPE
                info.linkname = payload
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            elif kind == "chr":
                info.type = tarfile.CHRTYPE
                info.devmajor, info.devminor = 1, 3
            t.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


BASE = [
    ("etc", "dir", None, 0o755),
    ("etc/passwd", "file", b"root:x:0:0:root:/root:/bin/sh\n", 0o644),
    ("bin", "dir", None, 0o755),
    ("bin/sh", "file", b"#!fake\n", 0o755),
    ("bin/ash", "link", "bin/sh", 0o755),
    ("usr/lib/libx.so", "file", b"\x7fELF", 0o644),
    ("lib", "sym", "usr/lib", 0o777),
    ("tmp", "dir", None, 0o1777),
    ("dev/null", "chr", None, 0o666),
    ("run/fifo", "fifo", None, 0o644),
    ("usr/bin/su", "file", b"x", 0o4755),
]

UPPER = [
    ("etc/.wh.passwd", "file", b"", 0o644),
    ("usr/.wh..wh..opq", "file", b"", 0o644),
    ("usr/new", "file", b"new\n", 0o644),
    ("bin/sh", "file", b"#!newer\n", 0o755),
    ("lib", "dir", None, 0o755),
]

HOSTILE = [
    [("../escape", "file", b"x", 0o644)],
    [("/abs/file", "file", b"x", 0o644)],
    [("a/../../b", "file", b"x", 0o644)],
    [("link", "sym", "/etc", 0o777), ("link/passwd", "file", b"x", 0o644)],
    [("up", "sym", "..", 0o777), ("up/x", "file", b"x", 0o644)],
    [("hard", "link", "/etc/passwd", 0o644)],
    [("hard", "link", "../outside", 0o644)],
    [("d", "sym", "/", 0o777), ("d/.wh.etc", "file", b"", 0o644)],
    [("ro", "dir", None, 0o500), ("ro/inner", "file", b"x", 0o644)],
]


def layer_seeds():
    t = "layer_unpack"
    base, upper = tar_of(BASE), tar_of(UPPER)
    put(t, "one-layer", b"\x00" + base)
    put(t, "two-layers", b"\x00" + base + SEP_LAYER + upper)
    put(t, "pax", b"\x00" + tar_of([("p/" + "long" * 40, "file", b"pax", 0o644)], tarfile.PAX_FORMAT))
    put(t, "gnu-longname", b"\x00" + tar_of([("g/" + "name" * 40, "file", b"gnu", 0o644)]))
    put(t, "gzip", b"\x01" + gzip.compress(base, mtime=0))
    zstd = shutil.which("zstd")
    if zstd:
        z = subprocess.run([zstd, "-q", "-c", "-3"], input=base, capture_output=True, check=True).stdout
        put(t, "zstd", b"\x02" + z)
    for i, entries in enumerate(HOSTILE):
        put(t, f"hostile-{i}", b"\x00" + base + SEP_LAYER + tar_of(entries))


def restore_seeds():
    t = "snapshot_restore"
    ws = [
        ("a.txt", "file", b"hello\n", 0o644),
        ("dir", "dir", None, 0o755),
        ("dir/file", "file", b"new", 0o600),
        ("dir/sub", "dir", None, 0o700),
        ("dir/sub/deep.py", "file", b"print(1)\n", 0o644),
    ]
    put(t, "workspace", b"\x00" + tar_of(ws))
    put(t, "workspace-pax", b"\x00" + tar_of(ws, tarfile.PAX_FORMAT))
    put(t, "workspace-gz", b"\x01" + gzip.compress(tar_of(ws), mtime=0))
    put(t, "long-name", b"\x00" + tar_of([("n/" + "x" * 300, "file", b"x", 0o644)], tarfile.PAX_FORMAT))
    put(t, "deps", b"\x00" + tar_of([(".deps/x", "file", b"x", 0o644)]))
    put(t, "file-over-dir", b"\x00" + tar_of([("dir", "file", b"x", 0o644)]))
    put(t, "duplicate", b"\x00" + tar_of([("a", "file", b"1", 0o644), ("a", "file", b"2", 0o644)]))
    for i, entries in enumerate(HOSTILE[:6]):
        put(t, f"hostile-{i}", b"\x00" + tar_of(entries))


def archive_seeds():
    """A `docker save` tarball and an OCI archive of one small image, digests all correct."""
    import hashlib

    t = "image_archive"
    layer = tar_of(BASE)
    sha = lambda b: hashlib.sha256(b).hexdigest()  # noqa: E731
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Cmd": ["/bin/sh"]},
                         "rootfs": {"type": "layers", "diff_ids": ["sha256:" + sha(layer)]}}).encode()
    manifest = json.dumps([{"Config": sha(config) + ".json", "RepoTags": ["fuzz:latest"],
                            "Layers": [sha(layer) + "/layer.tar"]}]).encode()
    docker = [
        (sha(layer), "dir", None, 0o755),
        (sha(layer) + "/layer.tar", "file", layer, 0o644),
        (sha(config) + ".json", "file", config, 0o644),
        ("manifest.json", "file", manifest, 0o644),
    ]
    put(t, "docker-save", b"\x00" + tar_of(docker))
    gz_layer = gzip.compress(layer, mtime=0)
    oci_manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": "sha256:" + sha(config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": "sha256:" + sha(gz_layer), "size": len(gz_layer)}],
    }).encode()
    index = json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + sha(oci_manifest),
         "size": len(oci_manifest), "platform": {"architecture": "amd64", "os": "linux"}}]}).encode()
    oci = [
        ("oci-layout", "file", b'{"imageLayoutVersion":"1.0.0"}', 0o644),
        ("index.json", "file", index, 0o644),
        ("blobs/sha256/" + sha(oci_manifest), "file", oci_manifest, 0o644),
        ("blobs/sha256/" + sha(config), "file", config, 0o644),
        ("blobs/sha256/" + sha(gz_layer), "file", gz_layer, 0o644),
    ]
    put(t, "oci-archive", b"\x00" + tar_of(oci))
    put(t, "oci-archive-gz", b"\x01" + gzip.compress(tar_of(oci), mtime=0))


# --- registries --------------------------------------------------------------------------


def registry_seeds():
    t = "registry"
    d = lambda c: "sha256:" + c * 64  # noqa: E731
    oci_manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": d("a"), "size": 100},
        "layers": [
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": d("b"), "size": 1000},
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd", "digest": d("c"), "size": 2000},
        ],
    }
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d("1"), "size": 500,
             "platform": {"architecture": "amd64", "os": "linux"}},
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d("2"), "size": 500,
             "platform": {"architecture": "arm64", "os": "linux", "variant": "v8"}},
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d("3"), "size": 500,
             "platform": {"architecture": "unknown", "os": "unknown"},
             "annotations": {"vnd.docker.reference.type": "attestation-manifest"}},
        ],
    }
    docker_list = dict(index, mediaType="application/vnd.docker.distribution.manifest.list.v2+json")
    docker_manifest = dict(oci_manifest, mediaType="application/vnd.docker.distribution.manifest.v2+json")
    put(t, "oci-manifest", b"\x00\n" + json.dumps(oci_manifest).encode())
    put(t, "oci-index", b"\x00\n" + json.dumps(index).encode())
    put(t, "docker-list", b"\x00application/vnd.docker.distribution.manifest.list.v2+json\n" + json.dumps(docker_list).encode())
    put(t, "docker-manifest", b"\x00\n" + json.dumps(docker_manifest).encode())
    put(t, "schema1", b"\x00\n" + b'{"schemaVersion":1,"name":"x","tag":"latest","fsLayers":[]}')
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": ["PATH=/usr/bin"], "User": "1000:1000", "WorkingDir": "/app",
                   "Entrypoint": ["/bin/sh"], "Cmd": ["-c", "true"]},
        "rootfs": {"type": "layers", "diff_ids": [d("d"), d("e")]},
    }
    put(t, "config", b"\x01" + json.dumps(config).encode())
    put(t, "challenge-bearer",
        b'\x02Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/python:pull"')
    put(t, "challenge-basic", b'\x02Basic realm="Registry Realm"')
    put(t, "reference", b"\x02ghcr.io/org/app:1.2@" + d("f").encode())
    put(t, "reference-short", b"\x02python:3.12-slim")
    put(t, "token", b'\x03{"token":"abc","access_token":"def","expires_in":300}')


# --- the proxy ---------------------------------------------------------------------------


def proxy_seeds():
    t = "proxy_head"
    put(t, "connect", "CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n")
    put(t, "connect-v6", "CONNECT [::1]:8443 HTTP/1.0\r\n\r\n")
    put(t, "get", "GET http://a.test/x?y=1 HTTP/1.1\r\nHost: a.test\r\nConnection: keep-alive, X-Drop\r\nX-Drop: 1\r\n\r\n")
    put(t, "post", "POST http://a.test:8080/api HTTP/1.1\r\nHost: a.test:8080\r\nContent-Length: 4\r\n\r\nbody")
    put(t, "chunked", "POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    put(t, "idna", "GET http://B\u00fccher.example/ HTTP/1.1\r\nHost: xn--bcher-kva.example\r\n\r\n")
    put(t, "ipv4-number", "GET http://0x7f.1/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    put(t, "origin", "GET /v1/models HTTP/1.1\r\nHost: a.test\r\nAuthorization: Bearer KERN_SECRET_X\r\n\r\n")
    put(t, "two-lengths", "POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")


def tls_record(body, record=16384):
    hs = bytes([1]) + len(body).to_bytes(3, "big") + body
    out = b""
    for i in range(0, len(hs), record):
        frag = hs[i:i + record]
        out += bytes([22, 3, 1]) + struct.pack(">H", len(frag)) + frag
    return out


def client_hello(sni, extra=b"", record=16384):
    body = b"\x03\x03" + bytes(range(32)) + b"\x20" + bytes(32)
    body += struct.pack(">H", 4) + b"\x13\x01\x13\x02" + b"\x01\x00"
    exts = b""
    if sni is not None:
        name = sni.encode()
        entry = b"\x00" + struct.pack(">H", len(name)) + name
        lst = struct.pack(">H", len(entry)) + entry
        exts += struct.pack(">HH", 0, len(lst)) + lst
    exts += struct.pack(">HH", 0x2B, 3) + b"\x02\x03\x04"  # supported_versions
    exts += extra
    body += struct.pack(">H", len(exts)) + exts
    return tls_record(body, record)


def tls_seeds():
    t = "tls_client_hello"
    put(t, "sni", b"\x01" + client_hello("a.test"))
    put(t, "sni-other", b"\x01" + client_hello("pypi.org"))
    put(t, "no-sni", b"\x00" + client_hello(None))
    put(t, "split-records", b"\x01" + client_hello("a.test", record=40))
    put(t, "ip-sni", b"\x01" + client_hello("127.0.0.1"))
    put(t, "plain", b"\x00GET / HTTP/1.1\r\n\r\n")


# --- kernels and drivers -----------------------------------------------------------------


def zmtp_frame(body, more=False, command=False):
    flags = (1 if more else 0) | (4 if command else 0)
    if len(body) > 255:
        return bytes([flags | 2]) + struct.pack(">Q", len(body)) + body
    return bytes([flags, len(body)]) + body


def zmtp_seeds():
    t = "zmtp"
    greeting = b"\xff" + bytes(8) + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" + bytes(31)
    ready = b"\x05READY" + b"\x0bSocket-Type" + struct.pack(">I", 6) + b"DEALER"
    msg = [b"<IDS|MSG>", b"0" * 64, b'{"msg_type":"status"}', b"{}", b"{}", b'{"execution_state":"idle"}']
    stream = greeting + zmtp_frame(ready, command=True)
    for i, part in enumerate(msg):
        stream += zmtp_frame(part, more=i < len(msg) - 1)
    put(t, "handshake-and-message", b"\x07" + stream)
    put(t, "long-frame", b"\x00" + greeting + zmtp_frame(b"x" * 5000) + zmtp_frame(b"after"))
    put(t, "ping", b"\x3f" + greeting + zmtp_frame(b"\x04PING\x00\x00", command=True))


def jupyter_msg(flags, msg_type, content, parent="req-1", buffers=()):
    header = {"msg_id": "k-1", "msg_type": msg_type, "session": "s", "username": "u",
              "date": "2026-01-01T00:00:00Z", "version": "5.3"}
    parts = [json.dumps(header), json.dumps({"msg_id": parent}), "{}", json.dumps(content)]
    parts = [p.encode() for p in parts] + list(buffers)
    return bytes([flags]) + SEP_FRAME.join(parts)


def png_1x1():
    raw = b"\x00\xff\x00\x00\xff"
    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0)

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


PNG = base64.b64encode(png_1x1()).decode()


def jupyter_seeds():
    t = "jupyter_message"
    cell = [
        jupyter_msg(1, "status", {"execution_state": "busy"}),
        jupyter_msg(1, "execute_input", {"code": "1+1", "execution_count": 1}),
        jupyter_msg(1, "stream", {"name": "stdout", "text": "hi\n"}),
        jupyter_msg(1, "stream", {"name": "stderr", "text": "\x1b[31mred\x1b[0m\n"}),
        jupyter_msg(1, "display_data", {"data": {"text/plain": "x", "image/png": PNG},
                                        "metadata": {}, "transient": {"display_id": "d1"}}),
        jupyter_msg(1, "update_display_data", {"data": {"text/plain": "y"}, "metadata": {},
                                               "transient": {"display_id": "d1"}}),
        jupyter_msg(1, "execute_result", {"data": {"text/plain": "2", "application/json": {"a": [1]}},
                                          "metadata": {}, "execution_count": 1}),
        jupyter_msg(3, "execute_reply", {"status": "ok", "execution_count": 1}),
        jupyter_msg(1, "status", {"execution_state": "idle"}),
    ]
    put(t, "cell-ok", SEP_MESSAGE.join(cell))
    error = [
        jupyter_msg(1, "error", {"ename": "ValueError", "evalue": "bad",
                                 "traceback": ["\x1b[0;31mValueError\x1b[0m: bad"]}),
        jupyter_msg(3, "execute_reply", {"status": "error", "ename": "ValueError", "evalue": "bad",
                                         "traceback": []}),
        jupyter_msg(1, "status", {"execution_state": "idle"}),
    ]
    put(t, "cell-error", SEP_MESSAGE.join(error))
    put(t, "aborted", jupyter_msg(3, "execute_reply", {"status": "aborted"}))
    put(t, "buffers", jupyter_msg(1, "display_data", {"data": {"text/html": "<b>x</b>"}}, buffers=[b"\x00raw"]))
    put(t, "unsigned", b"\x00" + SEP_FRAME.join([b"id", b"<IDS|MSG>", b"deadbeef", b"{}", b"{}", b"{}", b"{}"]))
    put(t, "other-parent", jupyter_msg(1, "stream", {"name": "stdout", "text": "x"}, parent="req-2"))


def driver_frame(obj):
    body = json.dumps(obj).encode()
    return struct.pack(">I", len(body)) + body


def driver_seeds():
    t = "driver_frames"
    py = [
        {"type": "display", "data": {"text/plain": "<Figure>", "image/png": PNG}, "metadata": {},
         "chart": {"type": "superchart", "title": "t", "elements": []}},
        {"type": "result", "data": {"text/plain": "2"}, "metadata": {}},
        {"type": "error", "ename": "ZeroDivisionError", "evalue": "division by zero",
         "traceback": "Traceback (most recent call last):\n  ...\n"},
        {"type": "done", "id": 1, "status": "error", "exit": None},
    ]
    put(t, "python", b"\x07" + b"".join(driver_frame(f) for f in py))
    node = [
        {"type": "display", "data": {"text/html": "<p>x</p>", "application/json": {"k": [1, 2]}}},
        {"type": "result", "data": {"text/plain": "[ 1, 2 ]"}},
        {"type": "error", "ename": "TypeError", "evalue": "x is not a function", "traceback": "TypeError: ..."},
        {"type": "done", "id": 1, "status": "ok", "exit": None},
    ]
    put(t, "node", b"\x3f" + b"".join(driver_frame(f) for f in node))
    put(t, "bad-mime", b"\x00" + driver_frame({"type": "display", "data": {"__proto__": "x", "image/jpeg": "AAAA"}}))
    put(t, "oversized-length", b"\x03" + struct.pack(">I", 0xFFFFFFF0) + b"{}")


# --- kern's protocol ---------------------------------------------------------------------

LIMITS = {"memory_bytes": 536870912, "pids": 256, "cpus": 1.5, "enforce": True, "require": False}
SPEC = {
    "root": {"kind": "dir", "path": "/var/lib/kern/rootfs"},
    "workspace": "/tmp/ws",
    "workspace_target": "/workspace",
    "tmpfs": [{"target": "/tmp", "size_bytes": 67108864}],
    "limits": LIMITS,
    "timeout_ms": 30000,
    "argv": ["python3", "-c", "print(1)"],
    "env": [["PATH", "/usr/bin:/bin"], ["HOME", "/workspace"]],
    "hostname": "kern",
    "user": {"uid": 1000, "gid": 1000, "groups": [27]},
    "channel": True,
    "stdin": True,
    "binds": [],
    "host_network": False,
    "etc": [],
    "readonly_in_workspace": [".deps"],
    "egress": {"port": 3128},
    "keep_caps": [],
    "devices": [],
    "resident": {"mode": "start", "name": "r1", "ttl_ms": 60000, "posture": {"network": "none"}},
    "tty": {"cols": 80, "rows": 24},
    "connector": True,
}


def kern_seeds():
    t = "kern_protocol"
    target = {"name": "r1", "pid1": {"pid": 42, "start": 123}}
    put(t, "limits-spec", b"\x00" + json.dumps({"ask": "box", "limits": LIMITS}).encode() + b"\n" + json.dumps(SPEC).encode())
    put(t, "call-spec", b"\x00" + json.dumps({"ask": "call", "target": target}).encode()
        + b"\n" + json.dumps(dict(SPEC, resident={"mode": "exec", "name": "r1", "pid1": {"pid": 42, "start": 123}})).encode())
    put(t, "zygote-spec", b"\x00" + json.dumps({"ask": "zygote", "limits": LIMITS, "inputs": {
        "tmpfs": [{"target": "/tmp", "size_bytes": 67108864}], "hostname": "box"}}).encode() + b"\n" + json.dumps(SPEC).encode())
    put(t, "commands", b'\x01{"command":"signal","signal":15}\n{"command":"signal","signal":2}\n{"signal":1}\n{"command":"swept"}\n{"command":')
    report = {"exit_code": 137, "fault": {"type": "timeout", "message": "30 s"}, "signal": "SIGKILL",
              "started": {"pid": 1, "start": 5}, "notes": ["note: x"]}
    put(t, "status", b"\x02\x07" + json.dumps({"said": "prepared", "notes": ["note: a"]}).encode() + b"\n"
        + json.dumps({"said": "started", "pid": 7}).encode() + b"\n"
        + json.dumps({"said": "report", "report": report}).encode() + b"\n")
    put(t, "init-messages", b"\x03R\nW 7\nP 4242\nB ptrace\nS mount /proc: EPERM\nC no such dir\n"
        b"E 2 python3\nK 9\nX 137 1048576 0\nZ 256\nw\n")


# --- kern.toml ---------------------------------------------------------------------------

TOML = """\
[[vcpu]]
name = "heavy"
cpus = 1.5
memory = "2G"

[[vcpu]]
name = "light"
memory = 536870912

[[vgpio]]
name = "null"
devices = ["/dev/null"]

[[vdisk]]
name = "scratch"
size = "256M"
path = "/scratch"
"""


def toml_seeds():
    t = "kern_toml"
    put(t, "profiles", "vcpu:heavy,vdisk:scratch,vgpio:null\n" + TOML)
    put(t, "one", "vcpu:light\n" + TOML)
    put(t, "unknown-key", 'vcpu:x\n[[vcpu]]\nname = "x"\nmemory_mb = 5\n')
    put(t, "bad-size", 'vdisk:d\n[[vdisk]]\nname = "d"\nsize = "1.5q"\npath = "/proc/x"\n')
    put(t, "duplicate", 'vcpu:a\n[[vcpu]]\nname = "a"\n[[vcpu]]\nname = "a"\n')


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    for make in (layer_seeds, restore_seeds, archive_seeds, registry_seeds, proxy_seeds, tls_seeds, zmtp_seeds,
                 jupyter_seeds, driver_seeds, kern_seeds, toml_seeds):
        make()


if __name__ == "__main__":
    main()
