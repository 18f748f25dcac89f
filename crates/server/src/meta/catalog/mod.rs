//! The catalog: containers, objects, their memberships and tags, and tag queries. Objects are
//! cached in memory (`Metadata::object`): every data request checks bounds and dtype against
//! them.
//!
//! By job: `rows` reads and writes the catalog's rows, `create` creates objects (and hands
//! out their ids), `objects` changes and deletes them, `containers` keeps containers and
//! memberships, `tags` sets tags and answers tag queries; this module keeps the in-memory
//! copy of the objects and answers lookups from it.

mod containers;
mod create;
mod grants;
mod objects;
mod rows;
mod tags;

pub(crate) use create::LidRange;
pub(super) use rows::{grow_row, insert_rows};

use crate::meta::{db_err, lid_of, Metadata};
use pdcx_core::{Error, ObjectId, ObjectMeta, Result, TagValue};

impl Metadata {
    pub(super) fn load_objects(&self) -> Result<()> {
        let lids: Vec<i64> = {
            let db = self.db();
            let mut st = db.prepare("SELECT lid FROM objects").map_err(db_err)?;
            let rows = st.query_map([], |r| r.get(0)).map_err(db_err)?;
            rows.collect::<std::result::Result<_, _>>()
                .map_err(db_err)?
        };
        for lid in lids {
            let meta = self.read_object(&self.db(), lid)?;
            self.names
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .insert(meta.name.clone(), meta.id);
            self.objects
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .insert(meta.id, meta);
        }
        Ok(())
    }

    /// Changes the cached copy of object `id` as its row was just changed (data requests are
    /// checked against it) and answers the object as it is now.
    pub(in crate::meta) fn update_cached(
        &self,
        id: ObjectId,
        change: impl FnOnce(&mut ObjectMeta),
    ) -> Result<ObjectMeta> {
        let mut objects = self.objects.write().unwrap_or_else(|p| p.into_inner());
        let m = objects
            .get_mut(&id)
            .ok_or_else(|| Error::not_found(format!("no object with id {id:#x}")))?;
        change(m);
        Ok(m.clone())
    }

    fn refresh(&self, id: ObjectId) -> Result<ObjectMeta> {
        let meta = self.read_object(&self.db(), lid_of(id))?;
        self.objects
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, meta.clone());
        Ok(meta)
    }

    pub fn object(&self, id: ObjectId) -> Result<ObjectMeta> {
        self.objects
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
            .ok_or_else(|| Error::not_found(format!("no object with id {id:#x}")))
    }

    /// One tag of object `id` (None: no such tag or object), without copying the object.
    pub fn object_tag(&self, id: ObjectId, key: &str) -> Option<TagValue> {
        self.objects
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .and_then(|o| o.tags.iter().find(|(k, _)| k == key))
            .map(|(_, v)| v.clone())
    }

    pub fn object_by_name(&self, name: &str) -> Result<ObjectMeta> {
        let id = self
            .names
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .copied();
        let id = id.ok_or_else(|| Error::not_found(format!("no object named {name:?}")))?;
        self.object(id)
    }

    pub fn list_objects(&self, container: Option<&str>) -> Result<Vec<ObjectMeta>> {
        let objects = self.objects.read().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<ObjectMeta> = objects
            .values()
            .filter(|o| container.is_none_or(|c| o.containers.iter().any(|x| x == c)))
            .cloned()
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(v)
    }

    pub fn counts(&self) -> Result<(u64, u64)> {
        let db = self.db();
        let c: i64 = db
            .query_row("SELECT COUNT(*) FROM containers", [], |r| r.get(0))
            .map_err(db_err)?;
        Ok((
            self.objects.read().unwrap_or_else(|p| p.into_inner()).len() as u64,
            c as u64,
        ))
    }
}
