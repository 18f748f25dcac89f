//! Containers and memberships: containers created, listed and deleted; objects added to and
//! removed from them.

use super::create::LOCAL_MASK;
use super::rows::{access_column, access_from_column, read_tags, write_tags};
use crate::meta::{db_err, id_of, lid_of, now, Metadata};
use pdcx_core::model::Tags;
use pdcx_core::{Access, ContainerInfo, Error, ErrorKind, ObjectId, Result};
use rusqlite::{params, OptionalExtension};

impl Metadata {
    pub fn create_container(
        &self,
        name: &str,
        tags: &Tags,
        creator: &str,
        access: &Access,
    ) -> Result<ContainerInfo> {
        self.write(|tx| {
            let inserted = tx
                .execute(
                    // An id of this server's (a resize may have brought containers of other
                    // homes here, whose ids AUTOINCREMENT would continue), never one used
                    // before (the sequence keeps the highest after deletes).
                    &format!(
                        "INSERT OR IGNORE INTO containers (lid, name, creator, ctime, access) \
                         VALUES (?5 | (1 + max(
                             coalesce((SELECT max(lid & {LOCAL_MASK}) FROM containers), 0),
                             coalesce((SELECT seq & {LOCAL_MASK} FROM sqlite_sequence WHERE name='containers'), 0))),
                         ?1, ?2, ?3, ?4)"
                    ),
                    params![name, creator, now(), access_column(access), (self.rank as i64) << 48],
                )
                .map_err(db_err)?;
            if inserted == 0 {
                return Err(Error::new(
                    ErrorKind::AlreadyExists,
                    format!("container {name:?} already exists"),
                ));
            }
            let lid = tx.last_insert_rowid();
            write_tags(tx, 1, lid, tags)
        })?;
        self.get_container(name)
    }

    pub fn get_container(&self, name: &str) -> Result<ContainerInfo> {
        let db = self.db();
        let row: Option<(i64, String, f64, String)> = db
            .query_row(
                "SELECT lid, creator, ctime, access FROM containers WHERE name=?1",
                [name],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .optional()
            .map_err(db_err)?;
        let (lid, creator, ctime, access) =
            row.ok_or_else(|| Error::not_found(format!("no container named {name:?}")))?;
        Ok(ContainerInfo {
            id: id_of(lid),
            name: name.to_string(),
            owner: self.rank,
            creator,
            ctime,
            tags: read_tags(&db, 1, lid)?,
            access: access_from_column(&access),
        })
    }

    pub fn list_containers(&self) -> Result<Vec<ContainerInfo>> {
        let names: Vec<String> = {
            let db = self.db();
            let mut st = db
                .prepare("SELECT name FROM containers ORDER BY name")
                .map_err(db_err)?;
            let rows = st.query_map([], |r| r.get(0)).map_err(db_err)?;
            rows.collect::<std::result::Result<_, _>>()
                .map_err(db_err)?
        };
        names.iter().map(|n| self.get_container(n)).collect()
    }

    pub fn add_to_container(&self, id: ObjectId, container: &str) -> Result<()> {
        self.object(id)?;
        self.write(|tx| {
            tx.prepare_cached("INSERT OR IGNORE INTO memberships VALUES (?1, ?2)")
                .map_err(db_err)?
                .execute(params![lid_of(id), container])
                .map_err(db_err)
        })?;
        self.refresh(id).map(|_| ())
    }

    /// Removes a container and its tags. Memberships naming it are dropped separately on
    /// every server (`drop_memberships`), since they live with the objects' owners.
    pub fn delete_container(&self, name: &str) -> Result<()> {
        let c = self.get_container(name)?;
        let lid = lid_of(c.id);
        self.write(|tx| {
            tx.prepare_cached("DELETE FROM tags WHERE kind=1 AND lid=?1")
                .map_err(db_err)?
                .execute([lid])
                .map_err(db_err)?;
            tx.prepare_cached("DELETE FROM containers WHERE lid=?1")
                .map_err(db_err)?
                .execute([lid])
                .map_err(db_err)?;
            Ok(())
        })
    }

    /// Removes object `id` from `container`; NotFound if it was not a member.
    pub fn remove_from_container(&self, id: ObjectId, container: &str) -> Result<()> {
        let o = self.object(id)?;
        let n = self.write(|tx| {
            tx.prepare_cached("DELETE FROM memberships WHERE object_lid=?1 AND container=?2")
                .map_err(db_err)?
                .execute(params![lid_of(id), container])
                .map_err(db_err)
        })?;
        if n == 0 {
            return Err(Error::not_found(format!(
                "object {:?} is not in container {container:?}",
                o.name
            )));
        }
        self.refresh(id).map(|_| ())
    }

    /// Drops every membership in `container` of this shard's objects; returns how many.
    pub fn drop_memberships(&self, container: &str) -> Result<u64> {
        let lids: Vec<i64> = {
            let db = self.db();
            let mut st = db
                .prepare("SELECT object_lid FROM memberships WHERE container=?1")
                .map_err(db_err)?;
            let rows = st.query_map([container], |r| r.get(0)).map_err(db_err)?;
            rows.collect::<std::result::Result<_, _>>()
                .map_err(db_err)?
        };
        self.write(|tx| {
            tx.prepare_cached("DELETE FROM memberships WHERE container=?1")
                .map_err(db_err)?
                .execute([container])
                .map_err(db_err)
        })?;
        for lid in &lids {
            self.refresh(id_of(*lid))?;
        }
        Ok(lids.len() as u64)
    }
}
