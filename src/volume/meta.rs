//! A volume's `volume.json`: what it is, written once when it is made.

use crate::error::{Error, Result};
use std::path::Path;

const FILE: &str = "volume.json";
/// The format of `volume.json`; a newer one is refused, not misread.
const VERSION: u32 = 1;

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    pub version: u32,
    pub name: String,
    pub size_mb: Option<u64>,
    pub created_at: u64,
}

pub(super) enum ReadError {
    Missing,
    Bad(String),
}

impl Meta {
    pub(super) fn new(name: &str, size_mb: Option<u64>) -> Meta {
        let created_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Meta {
            version: VERSION,
            name: name.to_string(),
            size_mb,
            created_at,
        }
    }

    /// Into a directory nobody else sees yet (`create`'s), so a plain write is whole or absent.
    pub(super) fn write(&self, dir: &Path) -> Result<()> {
        let body = serde_json::to_vec_pretty(self)
            .map_err(|e| Error::Invalid(format!("volumes: writing {FILE}: {e}")))?;
        std::fs::write(dir.join(FILE), body)
            .map_err(|e| Error::Invalid(format!("volumes: writing {FILE}: {e}")))
    }

    /// `dir`'s, read without following a symlink; the name in it must be the directory's.
    pub(super) fn read(dir: &Path) -> std::result::Result<Meta, ReadError> {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let mut f = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(dir.join(FILE))
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return match std::fs::symlink_metadata(dir) {
                    Ok(_) => Err(ReadError::Bad(format!("it has no {FILE}"))),
                    Err(_) => Err(ReadError::Missing),
                }
            }
            Err(e) => return Err(ReadError::Bad(format!("{FILE}: {e}"))),
        };
        let mut body = Vec::new();
        (&mut f)
            .take(64 * 1024)
            .read_to_end(&mut body)
            .map_err(|e| ReadError::Bad(format!("{FILE}: {e}")))?;
        let meta: Meta =
            serde_json::from_slice(&body).map_err(|e| ReadError::Bad(format!("{FILE}: {e}")))?;
        if meta.version != VERSION {
            return Err(ReadError::Bad(format!(
                "{FILE} has version {}, this kern reads {VERSION}",
                meta.version
            )));
        }
        if meta.name != name {
            return Err(ReadError::Bad(format!("{FILE} names {:?}", meta.name)));
        }
        Ok(meta)
    }
}
