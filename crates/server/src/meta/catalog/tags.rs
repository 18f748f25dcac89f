//! Tags and tag queries: tags set (into a queued row when the object's rows are not written
//! yet) and deleted, and the objects matching a query's conditions.

use super::rows::write_tags;
use crate::meta::{db_err, id_of, lid_of, Metadata};
use pdcx_core::model::Tags;
use pdcx_core::protocol::TagTarget;
use pdcx_core::query::CmpOp;
use pdcx_core::{Condition, Error, ObjectId, Result, TagValue};
use rusqlite::params;

impl Metadata {
    fn target_lid(&self, target: &TagTarget) -> Result<(i64, i64)> {
        match target {
            TagTarget::Object(id) => self.object(*id).map(|_| (0, lid_of(*id))),
            TagTarget::Container(name) => self.get_container(name).map(|c| (1, lid_of(c.id))),
        }
    }

    pub fn put_tags(&self, target: &TagTarget, tags: &Tags) -> Result<()> {
        self.put_tags_with(target, tags, false)
    }

    /// [`put_tags`](Self::put_tags), or with `lazy` answered at commit (as
    /// [`create_objects_with`](Self::create_objects_with)).
    pub fn put_tags_with(&self, target: &TagTarget, tags: &Tags, lazy: bool) -> Result<()> {
        if tags.iter().any(|(k, _)| k.is_empty()) {
            return Err(Error::invalid("tag names must not be empty"));
        }
        if let (true, TagTarget::Object(id)) = (lazy, target) {
            // An object whose rows are still queued (the create-then-tag pattern) takes the
            // tags into its queued row: no transaction of its own, and no more durable than
            // the create it belongs to would be anyway.
            if self.tag_queued(*id, tags) {
                self.syncer.kick();
                return Ok(());
            }
        }
        let (kind, lid) = self.target_lid(target)?;
        let rows = |tx: &rusqlite::Transaction| write_tags(tx, kind, lid, tags);
        if lazy {
            self.write_lazy(rows)?;
        } else {
            self.write(rows)?;
        }
        if let TagTarget::Object(id) = target {
            // The cached copy takes the new values the way `read_object` would read them back
            // (sorted by name, the last value of a repeated name wins), saving three queries.
            let mut objects = self.objects.write().unwrap_or_else(|p| p.into_inner());
            match objects.get_mut(id) {
                Some(o) => {
                    let mut merged: std::collections::BTreeMap<String, TagValue> =
                        std::mem::take(&mut o.tags).into_iter().collect();
                    for (k, v) in tags {
                        merged.insert(k.clone(), v.clone());
                    }
                    o.tags = merged.into_iter().collect();
                }
                None => {
                    drop(objects);
                    self.refresh(*id)?;
                }
            }
        }
        Ok(())
    }

    /// Merges `tags` into object `id`'s queued row and cached copy if its row is still queued
    /// (false: it is not, write the tags the usual way). Holds the queue's lock throughout, so
    /// a flush takes the row either before (then this returns false) or after the merge.
    fn tag_queued(&self, id: ObjectId, tags: &Tags) -> bool {
        let merge = |have: &mut Tags| {
            let mut merged: std::collections::BTreeMap<String, TagValue> =
                std::mem::take(have).into_iter().collect();
            for (k, v) in tags {
                merged.insert(k.clone(), v.clone());
            }
            *have = merged.into_iter().collect();
        };
        self.shard.with_queued(id, |row| {
            merge(&mut row.tags);
            let mut objects = self.objects.write().unwrap_or_else(|p| p.into_inner());
            if let Some(o) = objects.get_mut(&id) {
                merge(&mut o.tags);
            }
        })
    }

    pub fn delete_tag(&self, target: &TagTarget, key: &str) -> Result<()> {
        let (kind, lid) = self.target_lid(target)?;
        let n = self.write(|tx| {
            tx.prepare_cached("DELETE FROM tags WHERE kind=?1 AND lid=?2 AND key=?3")
                .map_err(db_err)?
                .execute(params![kind, lid, key])
                .map_err(db_err)
        })?;
        if n == 0 {
            return Err(Error::no_tag(key));
        }
        if let TagTarget::Object(id) = target {
            self.refresh(*id)?;
        }
        Ok(())
    }

    /// Objects of this shard matching all conditions. The tag name `name` matches the object's
    /// own name, so `name~run1/*` selects by name pattern.
    pub fn query(&self, conditions: &[Condition]) -> Result<Vec<(ObjectId, String)>> {
        let mut sql = String::from("SELECT o.lid, o.name FROM objects o WHERE 1=1");
        let mut args: Vec<rusqlite::types::Value> = Vec::new();
        for c in conditions {
            let (clause, mut a) = condition_sql(c);
            sql.push_str(" AND ");
            sql.push_str(&clause);
            args.append(&mut a);
        }
        sql.push_str(" ORDER BY o.name");
        let db = self.db();
        let mut st = db.prepare(&sql).map_err(db_err)?;
        let rows = st
            .query_map(rusqlite::params_from_iter(args), |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(db_err)?;
        rows.map(|r| r.map(|(lid, name)| (id_of(lid), name)).map_err(db_err))
            .collect()
    }
}

/// SQL for one condition over `objects o`, with its bind values.
fn condition_sql(c: &Condition) -> (String, Vec<rusqlite::types::Value>) {
    use rusqlite::types::Value as V;
    let key = c.key().to_string();
    if key == "name" {
        match c {
            Condition::Eq(_, TagValue::Str(s)) => {
                return ("o.name = ?".into(), vec![V::Text(s.clone())])
            }
            Condition::Ne(_, TagValue::Str(s)) => {
                return ("o.name != ?".into(), vec![V::Text(s.clone())])
            }
            Condition::Glob(_, g) => return ("o.name GLOB ?".into(), vec![V::Text(g.clone())]),
            _ => {}
        }
    }
    let eq = |v: &TagValue| -> (String, Vec<V>) {
        match v {
            TagValue::Str(s) => ("vtype=0 AND sval=?".into(), vec![V::Text(s.clone())]),
            TagValue::Int(i) => (
                "((vtype=1 AND ival=?) OR (vtype=2 AND num=?))".into(),
                vec![V::Integer(*i), V::Real(*i as f64)],
            ),
            TagValue::Float(f) => ("vtype IN (1,2) AND num=?".into(), vec![V::Real(*f)]),
            TagValue::Bytes(b) => ("vtype=3 AND bval=?".into(), vec![V::Blob(b.clone())]),
        }
    };
    let (pred, mut vals) = match c {
        Condition::Eq(_, v) => eq(v),
        Condition::Ne(_, v) => {
            let (p, v) = eq(v);
            (format!("NOT ({p})"), v)
        }
        Condition::Cmp(_, op, x) => {
            let op = match op {
                CmpOp::Lt => "<",
                CmpOp::Le => "<=",
                CmpOp::Gt => ">",
                CmpOp::Ge => ">=",
            };
            (format!("vtype IN (1,2) AND num {op} ?"), vec![V::Real(*x)])
        }
        Condition::Glob(_, g) => ("vtype=0 AND sval GLOB ?".into(), vec![V::Text(g.clone())]),
        Condition::Exists(_) => ("1=1".into(), vec![]),
    };
    let mut args = vec![V::Text(key)];
    args.append(&mut vals);
    (
        format!("o.lid IN (SELECT lid FROM tags WHERE kind=0 AND key=? AND {pred})"),
        args,
    )
}
