//! blake3 content hashes, as lowercase hex.
//!
//! Only regular files are hashed: a FIFO, a device (`/dev/zero`, `/dev/urandom`), a socket
//! or a directory is refused before it is opened (opening a FIFO blocks until a writer
//! comes; a device never ends). A symbolic link to a regular file is followed.

use std::fs;
use std::io;
use std::path::Path;

pub fn hash_bytes(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// What a file that is not a regular one is, in words (`a FIFO`, `a character device`).
fn kind(meta: &fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    "a special file"
}

/// `Ok` when `path` is a regular file (after following links); otherwise an error of kind
/// `InvalidInput` that says what it is, without opening it.
pub fn require_regular(path: &Path) -> io::Result<fs::Metadata> {
    let meta = fs::metadata(path)?;
    if meta.is_file() {
        return Ok(meta);
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{} is {}, not a regular file", path.display(), kind(&meta)),
    ))
}

/// Hashes a regular file's content, memory-mapped 64 MiB at a time, each window hashed on
/// several threads and unmapped before the next. Not mapped whole: every page of a mapped
/// file that is touched counts in the process's resident size, so hashing a 4 GiB data
/// file in one map held 4 GiB resident. (Reading into a buffer instead costs a copy:
/// about half the speed on 2 cores.) As with any map, a file cut short while it is being
/// hashed ends the process with SIGBUS.
pub fn hash_file(path: &Path) -> io::Result<String> {
    const WINDOW: u64 = 64 << 20;
    let length = require_regular(path)?.len();
    let file = fs::File::open(path)?;
    let mut hasher = blake3::Hasher::new();
    let mut offset = 0;
    while offset < length {
        let len = WINDOW.min(length - offset);
        // SAFETY: the window is only read, and only while this loop holds it (see above
        // for a file truncated meanwhile).
        let window = unsafe {
            memmap2::MmapOptions::new()
                .offset(offset)
                .len(len as usize)
                .map(&file)?
        };
        hasher.update_rayon(&window);
        offset += len;
    }
    Ok(hasher.finalize().to_hex().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_of_several_windows_hashes_as_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        let bytes: Vec<u8> = (0..(64 << 20) * 2 + 12_345)
            .map(|i: u32| (i % 251) as u8)
            .collect();
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(hash_file(&path).unwrap(), hash_bytes(&bytes));
        std::fs::write(&path, &bytes[..64 << 20]).unwrap();
        assert_eq!(hash_file(&path).unwrap(), hash_bytes(&bytes[..64 << 20]));
        std::fs::write(&path, b"").unwrap();
        assert_eq!(hash_file(&path).unwrap(), hash_bytes(b""));
    }

    #[test]
    fn file_and_bytes_hash_alike() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("abc");
        std::fs::write(&path, b"abc").unwrap();
        assert_eq!(hash_file(&path).unwrap(), hash_bytes(b"abc"));
        assert_eq!(
            hash_bytes(b"abc"),
            "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"
        );
        #[cfg(unix)]
        {
            let link = dir.path().join("link");
            std::os::unix::fs::symlink(&path, &link).unwrap();
            assert_eq!(
                hash_file(&link).unwrap(),
                hash_bytes(b"abc"),
                "links are followed"
            );
        }
    }

    #[test]
    fn directories_and_devices_are_refused_without_being_opened() {
        let dir = tempfile::tempdir().unwrap();
        let err = hash_file(dir.path()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err
            .to_string()
            .contains("is a directory, not a regular file"));
        #[cfg(unix)]
        for (device, what) in [
            ("/dev/zero", "a character device"),
            ("/dev/urandom", "a character device"),
        ] {
            let err = hash_file(Path::new(device)).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("{device} is {what}, not a regular file")
            );
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_instead_of_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !made.is_ok_and(|s| s.success()) {
            eprintln!("mkfifo is unavailable: skipped");
            return;
        }
        // Opening it would block this test forever; the refusal comes first.
        let err = hash_file(&fifo).unwrap_err();
        assert!(err
            .to_string()
            .contains("is a FIFO (named pipe), not a regular file"));
    }
}
