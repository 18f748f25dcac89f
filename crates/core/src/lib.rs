//! pdcx-core: the data model, region math and wire protocol shared by every pdcx process.
//! Nothing here performs I/O, so every rule about shapes, bounds and frames is unit-testable.

pub mod config;
pub mod cover;
pub mod dtype;
pub mod error;
pub mod model;
pub mod placement;
pub mod protocol;
pub mod query;
pub mod region;
pub mod valuequery;

pub use dtype::Dtype;
pub use error::{Error, ErrorKind, Result};
pub use model::{
    owner_of_name, Access, ContainerInfo, Need, ObjectId, ObjectMeta, TagValue, MAX_DIMS,
};
pub use placement::Placement;
pub use query::Condition;
pub use region::Region;
