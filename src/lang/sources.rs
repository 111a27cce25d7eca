//! The drivers' sources as the addon ships them, and how a box starts each: the python driver
//! (and its loader, and the zygote in front of it), the node driver and its parser, the Jupyter
//! chart formatter. Their frames are `driver`'s.

use super::driver::frame;

/// The driver, run as `python3 -c DRIVER`: stdlib only, it reads cells from fd 3.
pub const DRIVER: &str = concat!(
    include_str!("driver.py"),
    "\n_RICH = r'''\n",
    include_str!("charts.py"),
    "\n",
    include_str!("driver_rich.py"),
    "'''\n_STATE = r'''\n",
    include_str!("driver_state.py"),
    "'''\n\n_kern_driver(_RICH, globals().get(\"_kern_zygote\"), _STATE)\n",
);

/// How a box starts the python driver: `python3 -c PY_LOADER`, which reads the driver from the
/// channel (`python_start`) before its first frame and runs it as `python3 -c DRIVER` would. The
/// driver arrives compiled when the image's own python has compiled it (`session::pyc`, once per
/// image and driver): compiling its source cost 7 ms of every cold start here (0.25 ms per KB of
/// source). Its source comes too, and is compiled where the code can't be used (not built yet,
/// or another python's bytecode). A small argv also keeps the spec small (it was 44 KB).
pub const PY_LOADER: &str = r#"def _kern_driver_load():
    import marshal, os, sys
    def take(n):
        b = bytearray()
        while len(b) < n:
            try:
                c = os.read(3, min(n - len(b), 1 << 20))
            except OSError as e:
                c, why = b"", e.strerror
            else:
                why = "closed"
            if not c:
                os.write(2, ("kern driver: fd 3 (the channel) %s before the driver came\n" % why).encode())
                os._exit(70)
            b += c
        return bytes(b)
    head = take(8)
    code, source = take(int.from_bytes(head[:4], "big")), take(int.from_bytes(head[4:], "big"))
    if code[:4] == sys.modules["_frozen_importlib_external"].MAGIC_NUMBER:
        try:
            return marshal.loads(code[4:])
        except Exception:
            pass
    return compile(source.decode(), "<string>", "exec", dont_inherit=True)
exec(_kern_driver_load())
"#;

/// What the box's channel carries first for `PY_LOADER`: the driver as the image's python
/// compiled it (its magic number and marshalled code, or nothing), then its source; each a
/// 4-byte big-endian length and the bytes.
pub fn python_start(code: Option<&[u8]>) -> Vec<u8> {
    let code = code.unwrap_or_default();
    let mut b = Vec::with_capacity(8 + code.len() + DRIVER.len());
    b.extend((code.len() as u32).to_be_bytes());
    b.extend((DRIVER.len() as u32).to_be_bytes());
    b.extend(code);
    b.extend(DRIVER.as_bytes());
    b
}

/// Names this build's driver source: its compiled form is kept under this name.
pub fn driver_id() -> String {
    use sha2::Digest as _;
    hex::encode(&sha2::Sha256::digest(DRIVER.as_bytes())[..12])
}

/// A Jupyter python kernel's PYTHONSTARTUP (`session::kernel::jupyter::start`): a display
/// formatter giving each matplotlib figure its chart data, read by `charts.py` as the driver's
/// are, under `CHART_MIME`.
pub const JUPYTER_CHARTS: &str = concat!(
    include_str!("jupyter_charts.py"),
    "\n_KERN_CHARTS = r'''\n",
    include_str!("charts.py"),
    "'''\n\n_kern_charts(_KERN_CHARTS)\ndel _kern_charts, _KERN_CHARTS\n",
);

/// The MIME type a Jupyter kernel's figure carries its chart data under (`JUPYTER_CHARTS`);
/// the host moves it into the result's `chart`.
pub const CHART_MIME: &str = "application/vnd.kern.chart+json";

/// The zygote (issue 21), run in front of the driver (`session::zygote`): it forks a box per
/// call, and only a call's workload goes on into the driver.
pub const ZYGOTE: &str = include_str!("zygote.py");

/// The node driver, run as `node -e NODE_DRIVER`: it reads cells from fd 3 as the python driver
/// does, after a setup frame (`node_setup_frame`).
pub const NODE_DRIVER: &str = include_str!("driver.js");

/// acorn (npm `acorn`, MIT, `dist/acorn.js` as published: `vendor/acorn`, with its version and
/// checksums), the parser Node itself vendors: the node driver finds a cell's `import`
/// declarations and last statement with it. It travels in the setup frame, since it is too large
/// for an argv string (128 KiB).
const ACORN: &str = include_str!("../../vendor/acorn/acorn.js");

/// The node driver's first frame: its parser, and whether its cells are TypeScript.
pub fn node_setup_frame(typescript: bool) -> Vec<u8> {
    frame(&serde_json::json!({"type": "setup", "acorn": ACORN, "typescript": typescript}))
}

/// A kernel's setup frame: the driver answers it with a `ready` frame naming its Node
/// (`process.version`) and whether that Node strips types, so `kernel()` can refuse a Node that
/// cannot run its cells before it resolves.
pub fn node_greeting_frame(typescript: bool) -> Vec<u8> {
    frame(
        &serde_json::json!({"type": "setup", "acorn": ACORN, "typescript": typescript, "ack": true}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_driver_is_its_core_then_its_rich_part_as_a_string_then_the_start() {
        // charts.py and driver_rich.py become one r'''...''' string: three quotes in either
        // would end it early.
        assert!(!include_str!("driver_rich.py").contains("'''"));
        assert!(!include_str!("charts.py").contains("'''"));
        assert!(DRIVER.starts_with(include_str!("driver.py")));
        assert!(!include_str!("driver_state.py").contains("'''"));
        assert_eq!(DRIVER.matches("'''").count(), 4);
        assert_eq!(JUPYTER_CHARTS.matches("'''").count(), 2);
        assert!(include_str!("jupyter_charts.py").contains(CHART_MIME));
        assert!(DRIVER.ends_with("_kern_driver(_RICH, globals().get(\"_kern_zygote\"), _STATE)\n"));
    }
}
