//! The catalog family: containers, objects, names and tags (metadata only).

use crate::error::Error;
use crate::model::{ContainerInfo, ObjectId, ObjectMeta, Tags};
use crate::query::Condition;
use crate::Dtype;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum TagTarget {
    Object(ObjectId),
    Container(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObjectSpec {
    pub name: String,
    pub dims: Vec<u64>,
    pub dtype: Dtype,
    pub fill: Option<Vec<u8>>,
    pub containers: Vec<String>,
    pub tags: Tags,
    pub creator: String,
}

/// How a lookup names an object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ObjectKey {
    Name(String),
    Id(ObjectId),
}

/// Replies of the catalog family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CatalogResponse {
    Done,
    Container(ContainerInfo),
    Containers(Vec<ContainerInfo>),
    Object(ObjectMeta),
    Objects(Vec<ObjectMeta>),
    Matches(Vec<(ObjectId, String)>),
    /// One result per spec, in request order.
    Created(Vec<std::result::Result<ObjectMeta, Error>>),
}

family! {
    /// Metadata requests, each at the server that owns the container, object or name.
    Catalog: CatalogRequest => CatalogResponse;

    CreateContainer { name: String, tags: Tags, creator: String } => Container(ContainerInfo);
    GetContainer { name: String } => Container(ContainerInfo);
    ListContainers {} => Containers(Vec<ContainerInfo>);
    /// Creates an object this server owns. With `lazy`, answered once the owner has created
    /// it in its in-memory catalog: it is visible and usable (a duplicate or bad spec has
    /// failed) when the answer comes; its rows reach the owner's database with the next batch
    /// (the WAL syncer's, within about 5 ms plus one transaction, or before any other use of
    /// the database) and stable storage with that batch's background fsync or a `SyncMeta` to
    /// the owner, whichever comes first. Its id is never reused, even if a crash loses the
    /// object before that.
    CreateObject { spec: ObjectSpec, lazy: bool } => Object(ObjectMeta);
    /// Creates many objects this server owns in one metadata transaction (one fsync, none
    /// with `lazy`): one result per spec in order; a duplicate or invalid spec fails only
    /// itself.
    CreateObjects { specs: Vec<ObjectSpec>, lazy: bool } => Created(Vec<std::result::Result<ObjectMeta, Error>>);
    OpenObject { name: String } => Object(ObjectMeta);
    GetObject { id: ObjectId } => Object(ObjectMeta);
    /// Client to its node-local server: the metadata of one object. The server answers if it
    /// owns the object; otherwise it forwards the lookup to the owner (`PeerRequest::Lookup`),
    /// and concurrent identical lookups from its clients share one forwarded request
    /// (per-node aggregation).
    LookupObject { key: ObjectKey } => Object(ObjectMeta);
    ListObjects { container: Option<String> } => Objects(Vec<ObjectMeta>);
    SetDims { id: ObjectId, dims: Vec<u64> } => Object(ObjectMeta);
    /// At the owner: gives an object created without an element type (`ObjectMeta::
    /// is_untyped`) its type and, when `dims` is not empty, its dims, in one durable change.
    /// Setting the type it already has is a no-op (every rank of a collective create may
    /// send it); another type is refused.
    SetType { id: ObjectId, dtype: Dtype, dims: Vec<u64> } => Object(ObjectMeta);
    AddToContainer { id: ObjectId, container: String } => Done;
    /// Removes one object from one container (the object itself stays).
    RemoveFromContainer { id: ObjectId, container: String } => Done;
    /// Removes every membership in `container` held by this server's objects.
    DropMemberships { container: String } => Done;
    /// With `lazy`, answered at commit, with the durability of a lazy `CreateObject`.
    PutTags { target: TagTarget, tags: Tags, lazy: bool } => Done;
    DeleteTag { target: TagTarget, key: String } => Done;
    Query { conditions: Vec<Condition> } => Matches(Vec<(ObjectId, String)>);
    /// Removes an object: metadata, memberships, tags and extents. Its log bytes become
    /// unreferenced garbage. Answered with the object as it was.
    DeleteObject { id: ObjectId } => Object(ObjectMeta);
    /// Removes a container and its tags at its owner. Memberships live with the objects'
    /// owners: the client follows up with `DropMemberships` on every server.
    DeleteContainer { name: String } => Done;
    /// At the owner of `id`: the object takes `name` (the order of a rename's three requests
    /// is in the server's `meta/rename.rs`).
    RenameObject { id: ObjectId, name: String } => Object(ObjectMeta);
    /// At the server `name` hashes to: `name` resolves to `id`, which another server owns.
    LinkName { name: String, id: ObjectId } => Done;
    /// At the server `name` hashes to: drops the link `name` -> `id` (if it is that link).
    UnlinkName { name: String, id: ObjectId } => Done;
    /// Answered once every metadata change this server committed before it is on stable
    /// storage (the consistency point of lazy creates and tags).
    SyncMeta {} => Done;
    /// Grants user `uid` (every user of the deployment when None) read access (`write`
    /// false), read and write access (`write` true), or takes its grant away (`access` None)
    /// on an object or a container. Only its owner (or the deployment's user) may.
    Share { target: TagTarget, uid: Option<u32>, access: Option<bool> } => Done;
}

impl CatalogRequest {
    /// Creates come before a program's writes (they count as writing).
    pub fn creates(&self) -> bool {
        matches!(
            self,
            CatalogRequest::CreateObject(_) | CatalogRequest::CreateObjects(_)
        )
    }
}
