//! Where kern keeps its own files on the host: one directory, `$KERN_HOME`, else
//! `$XDG_CACHE_HOME/kern-sandbox`, else `~/.cache/kern-sandbox`. A leaf, so the image store
//! (`image::store`, under it) and the resident boxes' state (`engine::monitor::resident`, under
//! it when there is no `$XDG_RUNTIME_DIR`) agree on it without either importing the other.

use std::path::PathBuf;

/// Why there is no home directory for kern.
#[derive(Debug, thiserror::Error)]
pub enum HomeError {
    #[error("KERN_HOME={} is relative; set it to an absolute path", .0.display())]
    Relative(PathBuf),
    #[error("no place for the image store: set KERN_HOME (or HOME or XDG_CACHE_HOME)")]
    Unset,
}

/// kern's directory on the host, from the environment (not created here).
pub fn root() -> Result<PathBuf, HomeError> {
    if let Some(h) = std::env::var_os("KERN_HOME").filter(|h| !h.is_empty()) {
        let p = PathBuf::from(h);
        if !p.is_absolute() {
            return Err(HomeError::Relative(p));
        }
        return Ok(p);
    }
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|x| !x.is_empty()) {
        let p = PathBuf::from(x);
        if p.is_absolute() {
            return Ok(p.join("kern-sandbox"));
        }
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".cache/kern-sandbox")),
        None => Err(HomeError::Unset),
    }
}
