//! The proof that a directory is a cache `pipeline` made, and the names of everything it
//! writes there.
//!
//! The root of a cache holds a `CACHEDIR.TAG` (the [Cache Directory Tagging
//! Specification](https://bford.info/cachedir/): its first line keeps backup tools out)
//! whose comment names pipeline's layout version. `pipeline` writes into a directory only
//! when it is absent, empty or tagged so, and deletes only in a tagged one, and there only
//! names it writes itself (a fingerprint, 64 lowercase hex digits, and the suffixes of
//! `tmp/` below). A directory is never a cache because of the names it happens to hold.
//!
//! A cache written before the tag existed (layout 1) is adopted (tagged) by the first
//! command that writes or tidies it, but only when *everything* in it is a name pipeline
//! writes; anything else makes it foreign, and foreign directories are refused with an
//! error that names them.
//!
//! Limitation: the proof is a file anyone can copy. It keeps `pipeline` from mistaking a
//! user's directory for a cache, not a determined user from faking one.

use crate::atomic::write_atomic;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The file that marks a cache's root.
pub const TAG_FILE: &str = "CACHEDIR.TAG";
/// The first line of every `CACHEDIR.TAG`, by the specification.
pub const TAG_SIGNATURE: &str = "Signature: 8a477f597d28d172789f06886806bc55";
/// The layout of the directories under a cache's root; bump when it changes meaning.
pub const LAYOUT: u32 = 2;
/// The line of the tag that says it is pipeline's, and which layout.
const LAYOUT_LINE: &str = "# pipeline cache, layout ";

/// The names pipeline writes directly under a cache's root.
const ROOT_NAMES: &[&str] = &[
    TAG_FILE,
    "entries",
    "tmp",
    "locks",
    "snapshots",
    "lineages",
    "published",
    "downloads",
    "manifests",
    "hashes.json",
];

/// What a would-be cache root is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootState {
    /// Nothing there (or an empty directory): a cache may be made there.
    Absent,
    /// Tagged by pipeline.
    Ours,
    /// Untagged, but everything in it is what an earlier pipeline wrote: it may be adopted.
    Legacy,
    /// Not a cache: the first thing found that pipeline would not have written.
    Foreign(String),
}

/// The error for a directory that is not a cache pipeline made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotACache {
    pub root: PathBuf,
    /// What shows it: `it holds notes/`, `its CACHEDIR.TAG is another tool's`.
    pub why: String,
}

impl fmt::Display for NotACache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is not a pipeline cache ({}), so pipeline neither writes into it nor deletes \
             anything in it; choose a new or empty directory (--cache-dir DIR or \
             PIPELINE_CACHE_DIR=DIR), or leave both unset for .pipeline/cache next to the manifest",
            self.root.display(),
            self.why
        )
    }
}

impl std::error::Error for NotACache {}

impl From<NotACache> for io::Error {
    fn from(e: NotACache) -> io::Error {
        io::Error::other(e)
    }
}

/// Whether `name` is a fingerprint: 64 lowercase hex digits.
pub fn is_fingerprint(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn is_pid(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// Whether `name` is one pipeline gives to what it writes in `<cache>/tmp/`:
/// `<fp>.<pid>` (an entry being stored), `<fp>.removed.<pid>` and `<fp>.replaced.<pid>`
/// (an entry or snapshot being removed), `<fp>.pulled.<pid>` (an entry being fetched
/// from a remote cache), `<fp>.<pid>.run` (a stage's scratch directory,
/// `backends/src/runner.rs`).
pub fn is_tmp_name(name: &str) -> bool {
    let Some((fp, rest)) = name.split_once('.') else {
        return false;
    };
    if !is_fingerprint(fp) {
        return false;
    }
    match rest.split('.').collect::<Vec<_>>()[..] {
        [pid] | [pid, "run"] | ["removed" | "replaced" | "pulled", pid] => is_pid(pid),
        _ => false,
    }
}

/// Whether `name` is a temporary file of [`write_atomic`] for one of `names`.
fn is_atomic_temp(name: &str, names: impl Fn(&str) -> bool) -> bool {
    name.strip_prefix('.')
        .and_then(|n| n.strip_suffix(".tmp"))
        .and_then(|n| n.rsplit_once('.'))
        .is_some_and(|(n, pid)| is_pid(pid) && names(n))
}

fn tag_text() -> String {
    format!(
        "{TAG_SIGNATURE}\n\
         # This file is a cache directory tag created by pipeline: its entries are rebuilt\n\
         # when missing, and backup tools may skip this directory.\n\
         # For information about cache directory tags, see https://bford.info/cachedir/\n\
         {LAYOUT_LINE}{LAYOUT}\n"
    )
}

/// The layout named by the tag in `root`: `Ok(None)` without a tag, `Err` for a tag that
/// is not pipeline's.
fn tag_layout(root: &Path) -> Result<Option<u32>, String> {
    let text = match fs::read_to_string(root.join(TAG_FILE)) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("its {TAG_FILE} is unreadable: {e}")),
    };
    if !text.starts_with(TAG_SIGNATURE) {
        return Err(format!("its {TAG_FILE} lacks the tag signature"));
    }
    text.lines()
        .find_map(|l| l.strip_prefix(LAYOUT_LINE))
        .and_then(|v| v.trim().parse().ok())
        .map(Some)
        .ok_or_else(|| format!("its {TAG_FILE} was written by another tool"))
}

/// What `root` is (reads it; writes nothing).
pub fn state(root: &Path) -> RootState {
    match fs::symlink_metadata(root) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return RootState::Absent,
        Err(e) => return RootState::Foreign(format!("it cannot be read: {e}")),
        Ok(_) => {}
    }
    let meta = match fs::metadata(root) {
        Ok(m) => m,
        Err(e) => return RootState::Foreign(format!("it cannot be read: {e}")),
    };
    if !meta.is_dir() {
        return RootState::Foreign("it is not a directory".into());
    }
    match tag_layout(root) {
        Ok(Some(layout)) if layout == LAYOUT => return RootState::Ours,
        Ok(Some(layout)) => {
            return RootState::Foreign(format!(
                "its {TAG_FILE} names layout {layout}, and this pipeline knows layout {LAYOUT}"
            ))
        }
        Err(why) => return RootState::Foreign(why),
        Ok(None) => {}
    }
    match foreign_content(root) {
        Ok(None) if is_empty(root) => RootState::Absent,
        Ok(None) => RootState::Legacy,
        Ok(Some(why)) => RootState::Foreign(why),
        Err(e) => RootState::Foreign(format!("it cannot be read: {e}")),
    }
}

fn is_empty(dir: &Path) -> bool {
    fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none())
}

fn names(dir: &Path) -> io::Result<Vec<(String, bool)>> {
    match fs::read_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
        Ok(d) => d
            .map(|e| {
                let e = e?;
                let is_dir = e.file_type()?.is_dir();
                Ok((e.file_name().to_string_lossy().into_owned(), is_dir))
            })
            .collect(),
    }
}

/// The first thing under an untagged `root` that pipeline would not have written.
fn foreign_content(root: &Path) -> io::Result<Option<String>> {
    let holds = |what: String| Ok(Some(format!("it holds {what} and no {TAG_FILE}")));
    for (name, is_dir) in names(root)? {
        let ours = ROOT_NAMES.contains(&name.as_str()) && (is_dir != name.contains('.'))
            // Another process writing the tag or the memo right now.
            || is_atomic_temp(&name, |n| n == "hashes.json" || n == TAG_FILE);
        if !ours {
            return holds(name + if is_dir { "/" } else { "" });
        }
    }
    for (name, is_dir) in names(&root.join("entries"))? {
        let dir = root.join("entries").join(&name);
        if !(is_dir && is_fingerprint(&name) && dir.join("entry.json").is_file()) {
            return holds(format!("entries/{name}"));
        }
    }
    for (name, is_dir) in names(&root.join("snapshots"))? {
        if !(is_dir && is_fingerprint(&name)) {
            return holds(format!("snapshots/{name}"));
        }
    }
    for (name, is_dir) in names(&root.join("lineages"))? {
        if !(is_dir && is_fingerprint(&name)) {
            return holds(format!("lineages/{name}"));
        }
    }
    for dir in ["published", "downloads"] {
        for (name, is_dir) in names(&root.join(dir))? {
            if !(is_dir && name.len() == 16 && name.bytes().all(|b| b.is_ascii_hexdigit())) {
                return holds(format!("{dir}/{name}"));
            }
        }
    }
    for (name, _) in names(&root.join("tmp"))? {
        if !is_tmp_name(&name) {
            return holds(format!("tmp/{name}"));
        }
    }
    for (name, is_dir) in names(&root.join("locks"))? {
        let ours = name
            .strip_suffix(".lock")
            .is_some_and(|fp| !is_dir && is_fingerprint(fp));
        if !ours {
            return holds(format!("locks/{name}"));
        }
    }
    for (name, is_dir) in names(&root.join("manifests"))? {
        let record = |n: &str| {
            n.strip_suffix(".json")
                .is_some_and(|h| h.len() == 32 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        };
        if is_dir || !(record(&name) || is_atomic_temp(&name, record)) {
            return holds(format!("manifests/{name}"));
        }
    }
    Ok(None)
}

/// Fails unless `root` is absent, empty, tagged, or an earlier pipeline's cache; writes
/// nothing.
pub fn check(root: &Path) -> Result<RootState, NotACache> {
    match state(root) {
        RootState::Foreign(why) => Err(NotACache {
            root: root.to_path_buf(),
            why,
        }),
        state => Ok(state),
    }
}

/// Makes `root` a cache before anything is written in it: creates and tags it when
/// absent or empty, adopts an earlier pipeline's cache (see [`adopt_entries`]), and
/// refuses anything else.
pub fn ensure(root: &Path) -> io::Result<()> {
    match check(root)? {
        RootState::Ours => Ok(()),
        RootState::Absent => {
            fs::create_dir_all(root)?;
            write_atomic(&root.join(TAG_FILE), tag_text().as_bytes())
        }
        RootState::Legacy => {
            crate::store::adopt_entries(root)?;
            write_atomic(&root.join(TAG_FILE), tag_text().as_bytes())
        }
        RootState::Foreign(_) => unreachable!("check refuses foreign directories"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FP: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn names_pipeline_writes_in_tmp() {
        for ours in [
            format!("{FP}.123"),
            format!("{FP}.removed.123"),
            format!("{FP}.replaced.9"),
            format!("{FP}.123.run"),
        ] {
            assert!(is_tmp_name(&ours), "{ours}");
        }
        for theirs in [
            "notes",
            "notes.1",
            FP,
            &format!("{FP}.x"),
            &format!("{FP}.1.run.2"),
            &format!("{}.1", &FP[1..]),
            &format!("{}.1", FP.to_uppercase()),
            &format!("{FP}.removed."),
        ] {
            assert!(!is_tmp_name(theirs), "{theirs}");
        }
    }

    #[test]
    fn a_directory_is_a_cache_only_by_its_tag_or_by_holding_only_what_pipeline_writes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("cache");
        assert_eq!(state(&root), RootState::Absent);
        fs::create_dir(&root).unwrap();
        assert_eq!(state(&root), RootState::Absent, "empty");

        // A user's files.
        fs::create_dir_all(root.join("tmp/notes")).unwrap();
        fs::write(root.join("tmp/notes/draft.txt"), "mine").unwrap();
        assert_eq!(
            state(&root),
            RootState::Foreign(format!("it holds tmp/notes and no {TAG_FILE}"))
        );
        let err = ensure(&root).unwrap_err().to_string();
        assert!(
            err.contains("is not a pipeline cache (it holds tmp/notes"),
            "{err}"
        );
        assert!(!root.join(TAG_FILE).exists(), "nothing written");
        fs::remove_dir_all(root.join("tmp")).unwrap();
        fs::create_dir_all(root.join("entries/photos")).unwrap();
        assert!(matches!(state(&root), RootState::Foreign(w) if w.contains("entries/photos")));
        fs::remove_dir_all(root.join("entries")).unwrap();
        fs::write(root.join("pipeline.kdl"), "").unwrap();
        assert!(matches!(state(&root), RootState::Foreign(w) if w.contains("pipeline.kdl")));
        fs::remove_file(root.join("pipeline.kdl")).unwrap();

        // Another tool's tag.
        fs::write(
            root.join(TAG_FILE),
            format!("{TAG_SIGNATURE}\n# made by foo\n"),
        )
        .unwrap();
        assert!(
            matches!(state(&root), RootState::Foreign(w) if w.contains("another tool")),
            "{:?}",
            state(&root)
        );
        fs::remove_file(root.join(TAG_FILE)).unwrap();

        // An earlier pipeline's cache: only names pipeline writes.
        fs::create_dir_all(root.join("entries").join(FP)).unwrap();
        fs::write(root.join("entries").join(FP).join("entry.json"), "{}").unwrap();
        fs::create_dir_all(root.join("locks")).unwrap();
        fs::write(root.join("locks").join(format!("{FP}.lock")), "").unwrap();
        fs::write(root.join("hashes.json"), "{}").unwrap();
        fs::create_dir_all(root.join("manifests")).unwrap();
        fs::write(
            root.join("manifests").join(format!("{}.json", &FP[..32])),
            "",
        )
        .unwrap();
        assert_eq!(state(&root), RootState::Legacy);
        // Another process tagging it at this very moment.
        fs::write(root.join(".CACHEDIR.TAG.77.tmp"), "").unwrap();
        assert_eq!(state(&root), RootState::Legacy);
        fs::remove_file(root.join(".CACHEDIR.TAG.77.tmp")).unwrap();
        ensure(&root).unwrap();
        assert_eq!(state(&root), RootState::Ours);
        assert!(fs::read_to_string(root.join(TAG_FILE))
            .unwrap()
            .starts_with(TAG_SIGNATURE));

        // A new directory is created and tagged.
        let fresh = dir.path().join("a/b");
        ensure(&fresh).unwrap();
        assert_eq!(state(&fresh), RootState::Ours);

        // A file is not a cache.
        let file = dir.path().join("file");
        fs::write(&file, "").unwrap();
        assert!(matches!(state(&file), RootState::Foreign(w) if w == "it is not a directory"));
    }
}
