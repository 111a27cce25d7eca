//! The environment every box of a session (or `kern run`) starts from, before per-call
//! additions: the image's `Env` with kern's defaults where the image is silent. Here, not in
//! `image`, because it joins the image's config with the box's own defaults (`engine::shared::spec`).

use crate::engine::shared::spec::{DEFAULT_HOSTNAME, DEFAULT_PATH};
use crate::image::manifest::RunConfig;

/// The environment every call starts from: the image's `Env` (PATH and all), then ours where
/// the image is silent: HOME on the writable scratch (the image's root is read-only), a UTF-8
/// locale, and the box's hostname. The caller's `env` and the language's own go on top per call.
pub fn base_env(image: &RunConfig, home: &str) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = Vec::new();
    for kv in image.env.iter().flatten() {
        if let Some((k, v)) = kv.split_once('=') {
            if !k.is_empty() && !kv.contains('\0') {
                env.retain(|(ek, _)| ek != k);
                env.push((k.to_string(), v.to_string()));
            }
        }
    }
    for (k, v) in [("PATH", DEFAULT_PATH), ("HOME", home), ("LANG", "C.UTF-8")] {
        if !env.iter().any(|(ek, _)| ek == k) {
            env.push((k.into(), v.into()));
        }
    }
    env.retain(|(k, _)| k != "HOSTNAME");
    env.push(("HOSTNAME".into(), DEFAULT_HOSTNAME.into()));
    env
}
