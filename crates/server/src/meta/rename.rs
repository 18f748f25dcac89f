//! Renames. An object's owner is fixed by its id, but lookups by name go to the
//! server its name hashes to. A rename to a name that hashes to another server therefore
//! leaves a **link** there (`name_links`: name -> id), which that server follows with a
//! lookup by id; the owner's row takes the new name, so listings and metadata show it.
//!
//! The client drives a rename in this order (`Client::rename_object`):
//! 1. `LinkName{new, id}` at the new name's server, when that is not the owner: durable
//!    before anything else, so the new name resolves from here on;
//! 2. `RenameObject{id, new}` at the owner: the row's name changes (and a link to `new` the
//!    owner itself held is dropped: the name is now its own);
//! 3. `UnlinkName{old, id}` at the old name's server, when the old name was a link.
//!
//! A crash between steps leaves both names resolving to the object (never neither), and
//! running the rename again finishes it. Deleting an object drops its link the same way
//! (the client unlinks after the owner deleted). A link whose object is gone is harmless for
//! lookups (they report no object) and is dropped by a create of that name
//! ([`Metadata::drop_dangling_link`], which asks the owner first).

use super::{db_err, Metadata};
use pdcx_core::model::validate_name;
use pdcx_core::{Error, ErrorKind, ObjectId, ObjectMeta, Result};

impl Metadata {
    pub(super) fn load_links(&self) -> Result<()> {
        let rows: Vec<(String, i64)> = {
            let db = self.db();
            let mut st = db
                .prepare("SELECT name, id FROM name_links")
                .map_err(db_err)?;
            let rows = st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(db_err)?;
            rows.collect::<std::result::Result<_, _>>()
                .map_err(db_err)?
        };
        let mut links = self.links.write().unwrap_or_else(|p| p.into_inner());
        for (name, id) in rows {
            links.insert(name, id as ObjectId);
        }
        Ok(())
    }

    /// The object another server owns that `name` links to.
    pub fn linked(&self, name: &str) -> Option<ObjectId> {
        self.links
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .copied()
    }

    /// Makes `name` (which hashes here) resolve to object `id` of another server. The same
    /// link again is a no-op; a name taken by another object or link is refused.
    pub fn link_name(&self, name: &str, id: ObjectId) -> Result<()> {
        validate_name("object", name)?;
        if let Some(other) = self.taken_by_other(name, id) {
            return Err(taken(name, other));
        }
        if self.linked(name) == Some(id) {
            return Ok(());
        }
        self.link_row(
            "INSERT OR REPLACE INTO name_links (name, id) VALUES (?1, ?2)",
            name,
            id,
        )?;
        self.links
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), id);
        Ok(())
    }

    /// Drops the link `name` -> `id` (another link, or none, is left alone).
    pub fn unlink_name(&self, name: &str, id: ObjectId) -> Result<()> {
        if self.linked(name) != Some(id) {
            return Ok(());
        }
        self.link_row("DELETE FROM name_links WHERE name=?1 AND id=?2", name, id)?;
        self.links
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        Ok(())
    }

    /// Renames object `id` (owned here) to `new`. Refuses a name another object of this
    /// server has or a link here names for another object.
    pub fn rename_object(&self, id: ObjectId, new: &str) -> Result<ObjectMeta> {
        validate_name("object", new)?;
        let cur = self.object(id)?;
        if cur.name == new {
            return Ok(cur);
        }
        if let Some(other) = self.taken_by_other(new, id) {
            return Err(taken(new, other));
        }
        let own_link = self.linked(new) == Some(id);
        self.write(|tx| {
            tx.prepare_cached("UPDATE objects SET name=?1 WHERE lid=?2")
                .map_err(db_err)?
                .execute(rusqlite::params![new, super::lid_of(id)])
                .map_err(db_err)?;
            if own_link {
                tx.prepare_cached("DELETE FROM name_links WHERE name=?1")
                    .map_err(db_err)?
                    .execute([new])
                    .map_err(db_err)?;
            }
            Ok(())
        })?;
        if own_link {
            self.links
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .remove(new);
        }
        {
            let mut names = self.names.write().unwrap_or_else(|p| p.into_inner());
            names.remove(&cur.name);
            names.insert(new.to_string(), id);
        }
        let mut objects = self.objects.write().unwrap_or_else(|p| p.into_inner());
        let m = objects
            .get_mut(&id)
            .ok_or_else(|| Error::not_found(format!("no object with id {id:#x}")))?;
        m.name = new.to_string();
        Ok(m.clone())
    }

    /// Runs one statement on `name_links` with (name, id), durably.
    fn link_row(&self, sql: &str, name: &str, id: ObjectId) -> Result<()> {
        self.write(|tx| {
            tx.prepare_cached(sql)
                .map_err(db_err)?
                .execute(rusqlite::params![name, id as i64])
                .map_err(db_err)
                .map(drop)
        })
    }

    /// Another object than `id` that `name` names here (its own, or a link).
    fn taken_by_other(&self, name: &str, id: ObjectId) -> Option<ObjectId> {
        let own = self
            .names
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .copied();
        own.filter(|&o| o != id)
            .or(self.linked(name).filter(|&l| l != id))
    }

    /// Drops link `name` when `exists` says its object is gone (before a create of `name`).
    pub fn drop_dangling_link(
        &self,
        name: &str,
        exists: impl FnOnce(ObjectId) -> bool,
    ) -> Result<()> {
        match self.linked(name) {
            Some(id) if !exists(id) => self.unlink_name(name, id),
            _ => Ok(()),
        }
    }
}

fn taken(name: &str, other: ObjectId) -> Error {
    Error::new(
        ErrorKind::AlreadyExists,
        format!("object {name:?} already exists (id {other:#x})"),
    )
}
