//! What root makes, reads and checks on a private cluster's behalf (the invariants of
//! [`super`]'s "nothing another local user made is used"): the password file, files opened
//! without following links, the relocated directory, its owner marker and the ancestors above
//! it, and the server's log made afresh.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use super::postgres_ids;

/// The file in the data directory holding the `postgres` role's password.
pub(super) const PASSWORD_FILE: &str = "leasehold.password";

pub(super) fn new_password() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// Write `password` to a new file (mode 0600, given to `owner`): `O_EXCL` and `O_NOFOLLOW`,
/// so neither a file nor a symbolic link someone left at `file` is written through.
pub(super) fn save_password(
    file: &Path,
    password: &str,
    owner: Option<(u32, u32)>,
) -> anyhow::Result<()> {
    use std::io::Write;
    let mut f = create_private(file).with_context(|| format!("writing {}", file.display()))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::fchown(&f, Some(uid), Some(gid))?;
    }
    writeln!(f, "{password}")?;
    Ok(())
}

/// A new file at `file`, mode 0600: `O_EXCL` and `O_NOFOLLOW`, so nothing that lies there (a
/// file, a symbolic link someone planted) is opened.
pub(super) fn create_private(file: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(file)
}

/// Open `file` (for reading, or for rewriting with `write`) when it is what leasehold keeps in
/// a data directory: a regular file, not a symbolic link (`O_NOFOLLOW`), with one link, owned
/// by us or by the `postgres` user, that no one else may read.
pub(super) fn open_own(file: &Path, write: bool) -> anyhow::Result<std::fs::File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(file)
        .with_context(|| format!("opening {} (a symbolic link is refused)", file.display()))?;
    let meta = f.metadata()?;
    let me = nix::unistd::Uid::effective().as_raw();
    let owners = [Some(me), postgres_ids().ok().map(|(uid, _)| uid)];
    if !meta.is_file()
        || meta.nlink() != 1
        || !owners.contains(&Some(meta.uid()))
        || meta.mode() & 0o077 != 0
    {
        bail!(
            "{} is not a file leasehold wrote (a regular file with one link, owned by this \
             user or `postgres`, mode 0600): it is left alone",
            file.display()
        );
    }
    Ok(f)
}

/// The password kept in a data directory's `leasehold.password`, read as [`open_own`] allows.
///
/// # Errors
/// The file is missing, unreadable, or not one leasehold wrote.
pub fn read_password(data_dir: &Path) -> anyhow::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    open_own(&data_dir.join(PASSWORD_FILE), false)?
        .take(4096)
        .read_to_string(&mut text)?;
    Ok(text.trim().to_owned())
}

/// The first directory from `/` down to `dir` that user `uid` (group `gid`) cannot search,
/// if any. Root-only files below do not matter: the data directory itself is chowned.
pub(super) fn unreachable_by(dir: &Path, uid: u32, gid: u32) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    for a in dir.ancestors().collect::<Vec<_>>().into_iter().rev() {
        if a == dir {
            break;
        }
        let Ok(m) = std::fs::metadata(a) else {
            return Some(a.to_owned());
        };
        let mode = m.mode();
        let ok = if m.uid() == uid {
            mode & 0o100 != 0
        } else if m.gid() == gid {
            mode & 0o010 != 0
        } else {
            mode & 0o001 != 0
        };
        if !ok {
            return Some(a.to_owned());
        }
    }
    None
}

/// `/var/tmp/leasehold-<hash of dir>/pg`: the same place for the same asked directory (`dir`
/// canonical), where the cluster lives when the `postgres` user cannot reach `dir`.
pub fn relocated(dir: &Path) -> PathBuf {
    use sha2::{Digest, Sha256};
    let hash = Sha256::digest(dir.as_os_str().as_encoded_bytes());
    let short: String = hash[..8].iter().map(|b| format!("{b:02x}")).collect();
    Path::new("/var/tmp")
        .join(format!("leasehold-{short}"))
        .join("pg")
}

/// The marker in a relocation's directory: written by root when it made the directory, it
/// names the asked directory the cluster is for.
pub(super) const OWNER_MARKER: &str = "leasehold-dev.owner";

/// Make the relocation `moved` (`<parent>/pg`) for `asked`, or recognise the one made before:
/// the parent made exclusively (root, group `gid`, 0710) with the marker, then `pg/` (`uid`,
/// 0700). Whatever is there and is not exactly that is refused, untouched.
pub(super) fn claim_relocated(
    moved: &Path,
    asked: &Path,
    uid: u32,
    gid: u32,
) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let parent = moved.parent().expect("has a parent");
    shared_ancestors_are_roots(parent)?;
    let marker = parent.join(OWNER_MARKER);
    let made = match std::fs::DirBuilder::new().mode(0o700).create(parent) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
        Err(e) => return Err(e).with_context(|| format!("creating {}", parent.display())),
    };
    if made {
        // Root's alone (0700) until it is complete: no one else can enter it meanwhile.
        std::os::unix::fs::lchown(parent, Some(0), Some(gid))?;
        save_marker(&marker, asked)?;
        std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o710))?;
    } else {
        let meta = std::fs::symlink_metadata(parent)?;
        let ours =
            meta.is_dir() && meta.uid() == 0 && meta.gid() == gid && meta.mode() & 0o7777 == 0o710;
        if !ours {
            bail!(
                "{} exists and leasehold did not make it ({}, owner uid {}, mode {:o}; leasehold \
                 makes a directory of root's, group postgres, mode 0710): it is not used, and \
                 left as it is; look at what it holds, remove it, and run again",
                parent.display(),
                if meta.is_symlink() {
                    "a symbolic link"
                } else if meta.is_dir() {
                    "a directory"
                } else {
                    "not a directory"
                },
                meta.uid(),
                meta.mode() & 0o7777
            );
        }
        let recorded = read_marker(&marker).with_context(|| {
            format!(
                "{} has no marker of leasehold's ({OWNER_MARKER}, root's, naming {}): it is not \
                 used, and left as it is; look at what it holds, remove it, and run again",
                parent.display(),
                asked.display()
            )
        })?;
        if recorded != asked.as_os_str().as_encoded_bytes() {
            bail!(
                "{} holds the cluster of another directory ({}), not of {}: it is not used",
                parent.display(),
                String::from_utf8_lossy(&recorded),
                asked.display()
            );
        }
    }
    match std::fs::DirBuilder::new().mode(0o700).create(moved) {
        Ok(()) => std::os::unix::fs::lchown(moved, Some(uid), Some(gid))?,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("creating {}", moved.display())),
    }
    let meta = std::fs::symlink_metadata(moved)?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o7777 != 0o700 {
        bail!(
            "{} is not the postgres user's private directory (owner uid {}, mode {:o}): it is \
             not used",
            moved.display(),
            meta.uid(),
            meta.mode() & 0o7777
        );
    }
    Ok(())
}

/// Every directory above `dir` is root's, and one others may write is sticky (as `/var/tmp`
/// is): no other user can rename or replace what root makes in it.
pub(super) fn shared_ancestors_are_roots(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    for a in dir.ancestors().skip(1) {
        let meta =
            std::fs::symlink_metadata(a).with_context(|| format!("reading {}", a.display()))?;
        let writable_by_others = meta.mode() & 0o022 != 0;
        if !meta.is_dir() || meta.uid() != 0 || (writable_by_others && meta.mode() & 0o1000 == 0) {
            bail!(
                "{} is not a directory of root's that only root may change (owner uid {}, mode \
                 {:o}): no cluster is made below it",
                a.display(),
                meta.uid(),
                meta.mode() & 0o7777
            );
        }
    }
    Ok(())
}

/// Write the marker (root's, 0600) naming `asked`.
pub(super) fn save_marker(marker: &Path, asked: &Path) -> anyhow::Result<()> {
    use std::io::Write;
    let mut f = create_private(marker).with_context(|| format!("writing {}", marker.display()))?;
    f.write_all(asked.as_os_str().as_encoded_bytes())?;
    f.sync_all()?;
    Ok(())
}

/// What a marker names, when it is root's own: a regular file (not a link), one link, owned by
/// root, that no one else may write.
pub(super) fn read_marker(marker: &Path) -> anyhow::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(marker)?;
    let meta = f.metadata()?;
    if !meta.is_file() || meta.nlink() != 1 || meta.uid() != 0 || meta.mode() & 0o022 != 0 {
        bail!("{} is not root's", marker.display());
    }
    let mut bytes = Vec::new();
    f.take(8192).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// A new file for the server's log at `path` in the shared temporary directory: whatever lies
/// there (a link someone planted included) is removed and the file made afresh (`O_EXCL`).
pub(super) fn fresh_log(path: &Path) -> anyhow::Result<std::fs::File> {
    let mut last = None;
    for _ in 0..5 {
        let _ = std::fs::remove_file(path);
        match create_private(path) {
            Ok(f) => return Ok(f),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("tried")).with_context(|| format!("creating {}", path.display()))
}

pub(super) fn cannot_reach(dir: &Path, blocked: &Path) -> String {
    format!(
        "the postgres OS user cannot reach {} ({} is not searchable by it), and no other place \
         under /var/tmp could be used: `chmod o+x {}`, or keep the checkout somewhere that user \
         can reach (e.g. under /srv or /opt), or set DATABASE_URL to a server of your own",
        dir.display(),
        blocked.display(),
        blocked.display()
    )
}
