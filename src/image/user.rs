//! The image's `USER` ("name", "uid", "name:group", "uid:gid"), resolved the way Docker does:
//! names through the image's own /etc/passwd and /etc/group, a number as it is (a uid with no
//! passwd entry gets gid 0), and the user's supplementary groups from /etc/group.

use super::Error;
use crate::engine::shared::spec::BoxUser;
use std::path::Path;

/// Reads a file of the image, resolving every symlink as if the image root were `/`: an
/// image's /etc/passwd that links to `/etc/shadow` must not read the host's. A passwd file is
/// small; one over 4 MiB (or not UTF-8) is not worth reading and counts as absent.
pub(crate) fn read_in_root(root: &Path, rel: &str) -> Option<String> {
    let bytes = crate::fsx::read_in_root(root, rel, 4 << 20).ok()?;
    String::from_utf8(bytes).ok()
}

/// `name:x:uid:gid:...` lines of passwd and `name:x:gid:members` of group.
fn fields(text: &str) -> impl Iterator<Item = Vec<&str>> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(':').collect::<Vec<_>>())
        .filter(|f| f.len() >= 4)
}

pub fn resolve(root: &Path, user: &str, what: &str) -> Result<BoxUser, Error> {
    let (name, group) = match user.split_once(':') {
        Some((n, g)) => (n, Some(g)),
        None => (user, None),
    };
    let passwd = read_in_root(root, "etc/passwd").unwrap_or_default();
    let groups = read_in_root(root, "etc/group").unwrap_or_default();
    let entry =
        fields(&passwd).find(|f| f[0] == name || (f[2] == name && name.parse::<u32>().is_ok()));
    let (uid, mut gid, user_name) = match (name.parse::<u32>(), &entry) {
        (Ok(n), Some(f)) => (n, f[3].parse::<u32>().unwrap_or(0), Some(f[0])),
        (Ok(n), None) => (n, 0, None),
        (Err(_), Some(f)) => (
            f[2].parse::<u32>()
                .map_err(|_| bad(what, user, "its passwd entry has no numeric uid"))?,
            f[3].parse::<u32>()
                .map_err(|_| bad(what, user, "its passwd entry has no numeric gid"))?,
            Some(f[0]),
        ),
        (Err(_), None) => {
            return Err(bad(
                what,
                user,
                &format!("there is no user {name:?} in the image's /etc/passwd"),
            ))
        }
    };
    if let Some(g) = group {
        gid = match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => fields(&groups)
                .find(|f| f[0] == g)
                .and_then(|f| f[2].parse().ok())
                .ok_or_else(|| {
                    bad(
                        what,
                        user,
                        &format!("there is no group {g:?} in the image's /etc/group"),
                    )
                })?,
        };
    }
    let mut supplementary = vec![gid];
    if let Some(n) = user_name {
        for f in fields(&groups) {
            if f[3].split(',').any(|m| m == n) {
                if let Ok(g) = f[2].parse::<u32>() {
                    if !supplementary.contains(&g) {
                        supplementary.push(g);
                    }
                }
            }
        }
    }
    Ok(BoxUser {
        uid,
        gid,
        groups: supplementary,
    })
}

fn bad(what: &str, user: &str, why: &str) -> Error {
    Error::Invalid(format!(
        "{what}: its USER {user:?} cannot be resolved: {why}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_numbers_and_groups() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("etc")).unwrap();
        std::fs::write(
            dir.path().join("etc/passwd"),
            "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1001::/home/app:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("etc/group"),
            "root:x:0:\napp:x:1001:\nstaff:x:50:app,other\nwheel:x:10:other\n",
        )
        .unwrap();
        let r = |u: &str| resolve(dir.path(), u, "image t");
        assert_eq!(
            r("app").unwrap(),
            BoxUser {
                uid: 1000,
                gid: 1001,
                groups: vec![1001, 50]
            }
        );
        assert_eq!(r("1000").unwrap().gid, 1001);
        assert_eq!(
            r("4242").unwrap(),
            BoxUser {
                uid: 4242,
                gid: 0,
                groups: vec![0]
            }
        );
        assert_eq!(r("app:wheel").unwrap().gid, 10);
        assert_eq!(r("app:7").unwrap().gid, 7);
        assert!(r("ghost")
            .unwrap_err()
            .to_string()
            .contains("no user \"ghost\""));
        assert!(r("app:ghosts")
            .unwrap_err()
            .to_string()
            .contains("no group"));
    }

    #[test]
    fn passwd_symlinks_stay_in_the_image() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("etc")).unwrap();
        // Pointing at the host's passwd: resolved inside the image, where it does not exist.
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("etc/passwd")).unwrap();
        let err = resolve(dir.path(), "root", "image t").unwrap_err();
        assert!(err.to_string().contains("no user"), "{err}");
    }
}
