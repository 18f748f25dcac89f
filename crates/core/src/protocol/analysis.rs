//! The analysis family: work done where the data lives (value queries), and objects whose
//! bytes stay in files outside pdcx (imported by reference).

use super::admin::Moved;
use crate::model::ObjectId;
use crate::region::Region;
use crate::valuequery::{QueryAnswer, QueryWant, ValueExpr};
use serde::{Deserialize, Serialize};

/// A region whose bytes are `size` bytes at `offset` of the file `path` (absolute), stored
/// as a chunk of shape `chunk` (the region is the chunk clipped to the object's dims, at the
/// chunk's origin) after `filters` were applied in order (they are undone in reverse).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefItem {
    pub region: Region,
    pub path: String,
    pub offset: u64,
    pub size: u64,
    pub chunk: Vec<u64>,
    pub filters: Vec<RefFilter>,
}

/// The HDF5 filters pdcx undoes itself when reading a chunk by reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RefFilter {
    /// HDF5's byte shuffle (filter 2) of elements of this many bytes.
    Shuffle { elem: u32 },
    /// Deflate (filter 1): a zlib stream.
    Deflate,
}

/// Replies of the analysis family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AnalysisResponse {
    /// The payload holds coordinates, then values, as the query's `want` asks.
    Answer(QueryAnswer),
    Imported(Moved),
}

family! {
    /// Analysis and imports, at an object's owner.
    Analysis: AnalysisRequest => AnalysisResponse;

    /// Owner of the query's first object: evaluates a value query over `region` (the whole
    /// object when None) of objects of one shape, reading other owners' objects from them.
    ValueQuery { query: ValueExpr, region: Option<Region>, want: QueryWant } => Answer(QueryAnswer);
    /// Makes each item's region of `id` an extent whose bytes stay in a file outside pdcx (an
    /// HDF5 chunk imported by reference), read and decoded on access. Durable when answered.
    /// The owner must be able to read the file.
    ImportRefs { id: ObjectId, items: Vec<RefItem> } => Imported(Moved);
    /// Copies every extent of `id` read by reference into its log, under the same sequence
    /// numbers (so later writes stay later); afterwards the file is not needed.
    PromoteRefs { id: ObjectId } => Imported(Moved);
}
