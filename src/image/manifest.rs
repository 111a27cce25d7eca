//! Manifests, indexes and image configs (Docker v2 schema 2 and OCI), and choosing the entry of
//! an index that runs here.

use super::digest::Digest;
use serde::Deserialize;
use std::collections::BTreeMap;

pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";

/// What we ask a registry for, best first.
pub const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";

/// How a layer blob is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

/// The compression of a layer media type; None for a type that is not a layer we can apply.
pub fn layer_compression(media_type: &str) -> Option<Compression> {
    // Docker's "foreign" layers are the same gzip tar; OCI's nondistributable variants too.
    match media_type {
        "application/vnd.oci.image.layer.v1.tar"
        | "application/vnd.oci.image.layer.nondistributable.v1.tar" => Some(Compression::None),
        "application/vnd.oci.image.layer.v1.tar+gzip"
        | "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"
        | "application/vnd.docker.image.rootfs.diff.tar.gzip"
        | "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip" => Some(Compression::Gzip),
        "application/vnd.oci.image.layer.v1.tar+zstd"
        | "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd" => Some(Compression::Zstd),
        _ => None,
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    #[serde(default)]
    pub media_type: String,
    pub digest: String,
    #[serde(default)]
    pub size: u64,
    #[serde(default)]
    pub platform: Option<Platform>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

impl Descriptor {
    pub fn digest(&self) -> Result<Digest, String> {
        Digest::parse(&self.digest)
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Platform {
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
    #[serde(default)]
    pub variant: Option<String>,
}

/// A manifest or an index, told apart by media type (or by shape when the type is absent, as
/// in some OCI layouts).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Any {
    #[serde(default)]
    pub schema_version: Option<u32>,
    #[serde(default)]
    pub media_type: Option<String>,
    #[serde(default)]
    pub manifests: Option<Vec<Descriptor>>,
    #[serde(default)]
    pub config: Option<Descriptor>,
    #[serde(default)]
    pub layers: Option<Vec<Descriptor>>,
}

pub enum Parsed {
    Index(Vec<Descriptor>),
    Manifest {
        config: Descriptor,
        layers: Vec<Descriptor>,
    },
}

/// Parses manifest bytes; `content_type` is the registry's header, if any.
pub fn parse(bytes: &[u8], content_type: Option<&str>) -> Result<Parsed, String> {
    let any: Any = serde_json::from_slice(bytes)
        .map_err(|e| format!("the manifest is not valid JSON: {e}"))?;
    let media = any
        .media_type
        .clone()
        .or_else(|| content_type.map(|c| c.split(';').next().unwrap_or("").trim().to_string()))
        .unwrap_or_default();
    if any.schema_version == Some(1)
        || media.starts_with("application/vnd.docker.distribution.manifest.v1")
    {
        return Err("it is a Docker schema 1 manifest, which is deprecated and not supported; push the image again with a current docker or skopeo".into());
    }
    match (any.manifests, any.config, any.layers) {
        (Some(m), _, _) if media != OCI_MANIFEST && media != DOCKER_MANIFEST => {
            Ok(Parsed::Index(m))
        }
        (_, Some(config), Some(layers)) => Ok(Parsed::Manifest { config, layers }),
        _ => Err(format!(
            "media type {media:?} is neither an image manifest nor an index"
        )),
    }
}

/// The Go architecture name of this machine, as images label themselves.
pub fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        "riscv64" => "riscv64",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        "x86" => "386",
        other => other,
    }
}

/// The index entry for linux/`arch`: attestation manifests (buildx's `unknown/unknown`) are
/// skipped; for arm64 a `v8` or absent variant is preferred.
pub fn select<'a>(entries: &'a [Descriptor], arch: &str) -> Result<&'a Descriptor, String> {
    let candidates: Vec<&Descriptor> = entries
        .iter()
        .filter(|d| {
            d.annotations
                .get("vnd.docker.reference.type")
                .is_none_or(|t| t != "attestation-manifest")
        })
        .filter(|d| {
            d.platform
                .as_ref()
                .is_some_and(|p| p.os == "linux" && p.architecture == arch)
        })
        .collect();
    let preferred = candidates.iter().find(|d| {
        let v = d.platform.as_ref().and_then(|p| p.variant.as_deref());
        arch != "arm64" || matches!(v, None | Some("v8"))
    });
    if let Some(d) = preferred.or(candidates.first()) {
        return Ok(d);
    }
    let offered: Vec<String> = entries
        .iter()
        .filter_map(|d| d.platform.as_ref())
        .filter(|p| p.os != "unknown")
        .map(|p| match &p.variant {
            Some(v) => format!("{}/{}/{v}", p.os, p.architecture),
            None => format!("{}/{}", p.os, p.architecture),
        })
        .collect();
    Err(format!(
        "it has no linux/{arch} variant (it offers: {}); pick an image built for this machine's architecture",
        if offered.is_empty() { "nothing runnable".into() } else { offered.join(", ") }
    ))
}

/// What the box uses from an image's config.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq)]
pub struct RunConfig {
    #[serde(rename = "Env", default)]
    pub env: Option<Vec<String>>,
    #[serde(rename = "User", default)]
    pub user: Option<String>,
    #[serde(rename = "WorkingDir", default)]
    pub working_dir: Option<String>,
    #[serde(rename = "Entrypoint", default)]
    pub entrypoint: Option<Vec<String>>,
    #[serde(rename = "Cmd", default)]
    pub cmd: Option<Vec<String>>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ImageConfig {
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
    #[serde(default)]
    pub config: Option<RunConfig>,
    pub rootfs: RootFs,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RootFs {
    #[serde(default)]
    pub diff_ids: Vec<String>,
}

pub fn parse_config(bytes: &[u8]) -> Result<ImageConfig, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("the image config is not valid: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(os: &str, arch: &str, variant: Option<&str>, attest: bool) -> Descriptor {
        let mut annotations = BTreeMap::new();
        if attest {
            annotations.insert(
                "vnd.docker.reference.type".into(),
                "attestation-manifest".into(),
            );
        }
        Descriptor {
            media_type: OCI_MANIFEST.into(),
            digest: format!("sha256:{}", "0".repeat(64)),
            size: 1,
            platform: Some(Platform {
                architecture: arch.into(),
                os: os.into(),
                variant: variant.map(Into::into),
            }),
            annotations,
        }
    }

    #[test]
    fn picks_linux_arch_and_skips_attestations() {
        let list = vec![
            entry("unknown", "unknown", None, true),
            entry("linux", "arm64", Some("v7"), false),
            entry("linux", "arm64", Some("v8"), false),
            entry("linux", "amd64", None, false),
            entry("windows", "amd64", None, false),
        ];
        assert_eq!(select(&list, "amd64").unwrap().platform, list[3].platform);
        assert_eq!(select(&list, "arm64").unwrap().platform, list[2].platform);
        let err = select(&list[..2], "amd64").unwrap_err();
        assert!(
            err.contains("no linux/amd64") && err.contains("linux/arm64/v7"),
            "{err}"
        );
        // An attestation labelled with our platform is still not an image.
        let mut fake = entry("linux", "amd64", None, true);
        fake.platform.as_mut().unwrap().os = "linux".into();
        assert!(select(&[fake], "amd64").is_err());
    }

    #[test]
    fn tells_manifests_from_indexes() {
        let idx = br#"{"schemaVersion":2,"manifests":[]}"#;
        assert!(matches!(parse(idx, None), Ok(Parsed::Index(_))));
        let man = format!(
            r#"{{"schemaVersion":2,"mediaType":"{DOCKER_MANIFEST}","config":{{"digest":"sha256:{0}","size":1}},"layers":[]}}"#,
            "a".repeat(64)
        );
        assert!(matches!(
            parse(man.as_bytes(), None),
            Ok(Parsed::Manifest { .. })
        ));
        let oci = format!(
            r#"{{"schemaVersion":2,"mediaType":"{OCI_MANIFEST}","config":{{"digest":"sha256:{0}","size":1}},"layers":[]}}"#,
            "a".repeat(64)
        );
        assert!(matches!(
            parse(oci.as_bytes(), None),
            Ok(Parsed::Manifest { .. })
        ));
        assert!(parse(br#"{"schemaVersion":1}"#, None)
            .err()
            .unwrap()
            .contains("schema 1"));
        assert_eq!(
            layer_compression("application/vnd.oci.image.layer.v1.tar+zstd"),
            Some(Compression::Zstd)
        );
        assert_eq!(layer_compression("application/vnd.in-toto+json"), None);
    }
}
