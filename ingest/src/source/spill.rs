//! Where `check --max-memory` keeps a history it assesses part by part
//! ([`fencewatch_assess::history::Spilled`]): numbered files in a directory of its own, made
//! under a parent directory (`--spill-dir`, default the system's temporary directory) and
//! removed with everything in it when the check ends, whatever way it ends but a kill.

use fencewatch_assess::history::SpillStore;
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// Spill files under a directory removed on drop.
#[derive(Debug)]
pub struct DirStore {
    dir: PathBuf,
    files: Vec<Option<BufWriter<File>>>,
}

impl DirStore {
    /// A new, empty directory under `parent`.
    pub fn new(parent: &Path) -> io::Result<DirStore> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = parent.join(format!("fencewatch-check-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&dir)?;
        Ok(DirStore {
            dir,
            files: Vec::new(),
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, file: usize) -> PathBuf {
        self.dir.join(format!("{file}.spill"))
    }
}

impl SpillStore for DirStore {
    fn append(&mut self, file: usize, bytes: &[u8]) -> io::Result<()> {
        if self.files.len() <= file {
            self.files.resize_with(file + 1, || None);
        }
        if self.files[file].is_none() {
            let f = File::create_new(self.path(file))?;
            self.files[file] = Some(BufWriter::with_capacity(64 * 1024, f));
        }
        self.files[file]
            .as_mut()
            .expect("opened above")
            .write_all(bytes)
    }

    fn take(&mut self, file: usize) -> io::Result<Vec<u8>> {
        let Some(w) = self.files.get_mut(file).and_then(Option::take) else {
            return Ok(Vec::new());
        };
        w.into_inner().map_err(io::IntoInnerError::into_error)?;
        let path = self.path(file);
        let mut data = Vec::new();
        File::open(&path)?.read_to_end(&mut data)?;
        std::fs::remove_file(&path)?;
        Ok(data)
    }
}

impl Drop for DirStore {
    fn drop(&mut self) {
        self.files.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_read_back_whole_and_the_directory_goes_with_the_store() {
        let parent = std::env::temp_dir();
        let mut s = DirStore::new(&parent).unwrap();
        let dir = s.dir().to_path_buf();
        s.append(3, b"ab").unwrap();
        s.append(3, b"cd").unwrap();
        s.append(0, b"x").unwrap();
        assert_eq!(s.take(3).unwrap(), b"abcd");
        assert!(!dir.join("3.spill").exists(), "taken files are removed");
        assert_eq!(s.take(3).unwrap(), b"", "taken once");
        assert_eq!(s.take(7).unwrap(), b"", "never written");
        assert!(dir.join("0.spill").exists());
        drop(s);
        assert!(!dir.exists());
    }
}
