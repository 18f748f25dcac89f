//! The file namespace: canonical names, what `stat` tells, and the operations on names
//! rather than open handles (stat, remove, rename, list, and directories as name prefixes
//! with their marker objects).

use crate::client::Client;
use pdcx_core::{Error, ErrorKind, ObjectMeta, Result};
use std::collections::BTreeMap;

/// What `stat` tells of a file.
#[derive(Debug, Clone, PartialEq)]
pub struct FileStat {
    pub name: String,
    pub size: u64,
    /// Seconds since the epoch.
    pub ctime: f64,
    pub mtime: f64,
}

impl From<&ObjectMeta> for FileStat {
    fn from(m: &ObjectMeta) -> Self {
        FileStat {
            name: m.name.clone(),
            size: m.dims.first().copied().unwrap_or(0),
            ctime: m.ctime,
            mtime: m.mtime,
        }
    }
}

/// The canonical object name of a path-like file name: empty and `.` components and repeated
/// slashes dropped; refused when empty, absolute-looking after the scheme was stripped is
/// fine (`/a/b` is `a/b`), or when a `..` component would leave its prefix.
pub fn normalize(name: &str) -> Result<String> {
    let mut parts: Vec<&str> = Vec::new();
    for p in name.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                return Err(Error::invalid(format!(
                    "file name {name:?}: '..' is not allowed (a name may not leave its prefix)"
                )))
            }
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return Err(Error::invalid(format!("file name {name:?} names nothing")));
    }
    let out = parts.join("/");
    pdcx_core::model::validate_name("file", &out)?;
    Ok(out)
}

/// What a name is: a file, or a directory (a name prefix; see [`Client::file_kind`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    File(FileStat),
    Dir,
}

/// One entry of a directory listing ([`Client::file_dir`]).
#[derive(Debug, Clone, PartialEq)]
pub struct DirEntry {
    /// The name under the directory (one component).
    pub name: String,
    /// None for a subdirectory.
    pub stat: Option<FileStat>,
}

/// The marker object [`Client::file_mkdir`] creates for directory `dir`: its name and a
/// slash, an empty byte stream (so a directory exists before anything is written in it).
pub fn dir_marker(dir: &str) -> String {
    format!("{dir}/")
}

impl Client {
    /// Size and times of file `name`.
    pub fn file_stat(&self, name: &str) -> Result<FileStat> {
        let m = self.open_object(&normalize(name)?)?;
        if !m.is_byte_stream() {
            return Err(Error::invalid(format!(
                "object {:?} is not a file (a {:?} array of dims {:?})",
                m.name, m.dtype, m.dims
            )));
        }
        Ok(FileStat::from(&m))
    }

    /// Deletes file `name`.
    pub fn file_remove(&self, name: &str) -> Result<()> {
        let m = self.open_object(&normalize(name)?)?;
        if !m.is_byte_stream() {
            return Err(Error::invalid(format!(
                "object {:?} is not a file; delete it with `pdcx rm`",
                m.name
            )));
        }
        self.delete_object(m.id)
    }

    /// Renames file `from` to `to`, replacing a file `to` as POSIX `rename` does (the
    /// replaced file is removed first, so unlike POSIX a crash in between can leave neither
    /// at `to`; `from` is never lost). The data does not move.
    pub fn file_rename(&self, from: &str, to: &str) -> Result<()> {
        let (from, to) = (normalize(from)?, normalize(to)?);
        let m = self.open_object(&from)?;
        if !m.is_byte_stream() {
            return Err(Error::invalid(format!("object {from:?} is not a file")));
        }
        if from == to {
            return Ok(());
        }
        match self.open_object(&to) {
            Ok(t) if t.is_byte_stream() => self.delete_object(t.id)?,
            Ok(_) => {
                return Err(Error::new(
                    ErrorKind::AlreadyExists,
                    format!("{to:?} is an object that is not a file"),
                ))
            }
            Err(e) if e.kind == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        self.rename_object(m.id, &to).map(drop)
    }

    /// Files whose names start with `prefix`, sorted by name.
    pub fn file_list(&self, prefix: &str) -> Result<Vec<FileStat>> {
        Ok(self.bs_list(prefix)?.iter().map(FileStat::from).collect())
    }

    /// What canonical name `name` is ("" is the root, always a directory): a file, a
    /// directory (some file's name starts with it and a slash, or `file_mkdir` made it), or
    /// nothing.
    pub fn file_kind(&self, name: &str) -> Result<Option<Kind>> {
        if name.is_empty() {
            return Ok(Some(Kind::Dir));
        }
        match self.file_stat(name) {
            Ok(s) => return Ok(Some(Kind::File(s))),
            Err(e) if e.kind == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let under = self.file_list(&dir_marker(name))?;
        Ok((!under.is_empty()).then_some(Kind::Dir))
    }

    /// The entries directly under directory `dir` ("" for the root), sorted by name.
    pub fn file_dir(&self, dir: &str) -> Result<Vec<DirEntry>> {
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            dir_marker(dir)
        };
        // (name, is a directory) -> stat: a name may be a file and a directory at once.
        let mut seen: BTreeMap<(String, bool), Option<FileStat>> = BTreeMap::new();
        for f in self.file_list(&prefix)? {
            let rest = &f.name[prefix.len()..];
            match rest.split_once('/') {
                None if rest.is_empty() => {} // this directory's own marker
                None => {
                    seen.insert((rest.to_string(), false), Some(f.clone()));
                }
                Some((sub, _)) => {
                    seen.insert((sub.to_string(), true), None);
                }
            }
        }
        let out = seen
            .into_iter()
            .map(|((name, _), stat)| DirEntry { name, stat })
            .collect();
        Ok(out)
    }

    /// Makes directory `dir` (canonical) exist: its marker object. Fails if the name is
    /// taken by a file or a directory.
    pub fn file_mkdir(&self, dir: &str) -> Result<()> {
        let dir = normalize(dir)?;
        if self.file_kind(&dir)?.is_some() {
            return Err(Error::new(
                ErrorKind::AlreadyExists,
                format!("{dir:?} exists"),
            ));
        }
        self.bs_open(&dir_marker(&dir), true).map(drop)
    }

    /// Removes empty directory `dir` (its marker; a directory that exists only through the
    /// files under it goes away with them).
    pub fn file_rmdir(&self, dir: &str) -> Result<()> {
        let dir = normalize(dir)?;
        match self.file_kind(&dir)? {
            None => Err(Error::new(
                ErrorKind::NotFound,
                format!("no directory {dir:?}"),
            )),
            Some(Kind::File(_)) => Err(Error::invalid(format!("{dir:?} is a file"))),
            Some(Kind::Dir) => {
                if !self.file_dir(&dir)?.is_empty() {
                    return Err(Error::invalid(format!("directory {dir:?} is not empty")));
                }
                let m = self.open_object(&dir_marker(&dir))?;
                self.delete_object(m.id)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_canonical_and_stay_in_their_prefix() {
        assert_eq!(normalize("raw//a/./b.fits").unwrap(), "raw/a/b.fits");
        assert_eq!(normalize("/raw/a").unwrap(), "raw/a");
        assert!(normalize("raw/../etc/passwd").is_err());
        assert!(normalize("..").is_err());
        assert!(normalize("//").is_err());
        assert!(normalize("a\nb").is_err());
    }
}
