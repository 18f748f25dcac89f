//! Analysis calls: value queries where the data lives, imports by reference.

use super::*;

impl Client {
    /// Evaluates a value query at the owner of its first object, which reads the
    /// objects where they live and answers with the hits only: the answer, and a payload of
    /// the hits' coordinates (if `want.coords`: ndim little-endian u64 each) followed by each
    /// of `want.values`' hit values.
    pub fn value_query(
        &self,
        query: pdcx_core::valuequery::ValueExpr,
        region: Option<Region>,
        want: pdcx_core::valuequery::QueryWant,
    ) -> Result<(pdcx_core::valuequery::QueryAnswer, Vec<u8>)> {
        let Some(&first) = query.objects().first() else {
            return Err(Error::invalid("a value query needs a condition"));
        };
        let owner = self.id_owner(first)?;
        let req: Request = analysis::ValueQuery {
            query,
            region,
            want,
        }
        .into();
        let (resp, bytes) = self.with_conn(owner, &mut |c| c.call(&req, &[]))?;
        Ok((<analysis::ValueQuery as Call>::reply(resp)?, bytes))
    }

    /// Makes regions of object `id` extents whose bytes stay in files outside pdcx (HDF5
    /// chunks imported by reference); the owner reads and decodes them on access, so it must
    /// be able to read the files. Returns the extents recorded and the raw bytes they stand for.
    pub fn import_refs(
        &self,
        id: ObjectId,
        items: Vec<pdcx_core::protocol::RefItem>,
    ) -> Result<(u64, u64)> {
        let owner = self.id_owner(id)?;
        let m = self.call(owner, analysis::ImportRefs { id, items })?;
        Ok((m.extents, m.bytes))
    }

    /// Copies the extents of `id` read by reference into the servers' logs (same sequence
    /// numbers: later writes stay later); returns extents and bytes promoted.
    pub fn promote_refs(&self, id: ObjectId) -> Result<(u64, u64)> {
        let m = self.call(self.id_owner(id)?, analysis::PromoteRefs { id })?;
        Ok((m.extents, m.bytes))
    }
}
