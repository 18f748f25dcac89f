//! Who reaches an object or a container: its owning user and the grants it made
//! (`pdcx_core::Access`), changed here and kept in the `access` column of its row.

use super::rows::access_column;
use crate::meta::{db_err, lid_of, Metadata};
use pdcx_core::{Access, Error, ObjectId, ObjectMeta, Result};
use rusqlite::params;

impl Metadata {
    /// Sets who reaches object `id`; answers the object as it is now.
    pub fn set_object_access(&self, id: ObjectId, access: &Access) -> Result<ObjectMeta> {
        self.object(id)?;
        let text = access_column(access);
        self.write(|tx| {
            tx.prepare_cached("UPDATE objects SET access=?1 WHERE lid=?2")
                .map_err(db_err)?
                .execute(params![text, lid_of(id)])
                .map_err(db_err)
        })?;
        self.update_cached(id, |m| m.access = access.clone())
    }

    /// Sets who reaches container `name`.
    pub fn set_container_access(&self, name: &str, access: &Access) -> Result<()> {
        let text = access_column(access);
        let changed = self.write(|tx| {
            tx.prepare_cached("UPDATE containers SET access=?1 WHERE name=?2")
                .map_err(db_err)?
                .execute(params![text, name])
                .map_err(db_err)
        })?;
        if changed == 0 {
            return Err(Error::not_found(format!("no container named {name:?}")));
        }
        Ok(())
    }
}
