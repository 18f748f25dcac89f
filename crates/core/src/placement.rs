//! Where a written region's bytes go: the placement modes of the PDC API. Metadata (and the
//! region map that says where each region lives) always stays with the object's owner; only
//! the data server changes. Pure functions, so the policy is tested without servers.

use crate::error::{Error, Result};
use crate::region::Region;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Placement {
    /// Every region on the object's metadata owner.
    ObjectStatic,
    /// Regions spread over all servers by a hash of the region's offset, the same for every
    /// writer.
    RegionStatic,
    /// Each write goes to the server with the least data in flight from this client.
    RegionDynamic,
    /// Each write goes to the writer's node-local server (PDC's node-local aggregation).
    #[default]
    RegionLocal,
}

impl Placement {
    pub const NAMES: [&'static str; 4] = [
        "object-static",
        "region-static",
        "region-dynamic",
        "region-local",
    ];

    pub fn parse(s: &str) -> Result<Placement> {
        match s.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "object-static" => Ok(Placement::ObjectStatic),
            "region-static" => Ok(Placement::RegionStatic),
            "region-dynamic" => Ok(Placement::RegionDynamic),
            "region-local" | "local" => Ok(Placement::RegionLocal),
            other => Err(Error::invalid(format!(
                "unknown placement {other:?}; expected one of {}",
                Self::NAMES.join(", ")
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Placement::ObjectStatic => Self::NAMES[0],
            Placement::RegionStatic => Self::NAMES[1],
            Placement::RegionDynamic => Self::NAMES[2],
            Placement::RegionLocal => Self::NAMES[3],
        }
    }
}

/// What a client knows when it places one write.
pub struct PlacementInput<'a> {
    pub owner: u32,
    /// This client's node-local server.
    pub local: u32,
    pub size: u32,
    pub region: &'a Region,
    /// Bytes this client has in flight to each server (index = rank).
    pub in_flight: &'a [u64],
    /// The write's payload in bytes (a batch: all of it).
    pub len: u64,
    /// Whether the owner is a server of this client's node.
    pub owner_on_node: bool,
    /// Region-local: writes smaller than this go to a same-node owner (0: never).
    pub small_to_owner: u64,
}

/// The server that stores the bytes of one write.
pub fn data_server(placement: Placement, input: &PlacementInput) -> u32 {
    let size = input.size.max(1);
    match placement {
        Placement::ObjectStatic => input.owner,
        // A small write to an object owned by another server of this node stays on this node
        // at the owner: the bytes are as local, and the holder's registration with the owner
        // (one more round trip, a third process woken) is saved. Large writes stay with the
        // writer's own server, spreading the node's bandwidth over its servers.
        Placement::RegionLocal if input.owner_on_node && input.len < input.small_to_owner => {
            input.owner
        }
        Placement::RegionLocal => input.local,
        Placement::RegionStatic => {
            // FNV-1a over the offset, so equal regions land on the same server in every run.
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for o in &input.region.offset {
                for b in o.to_le_bytes() {
                    h ^= b as u64;
                    h = h.wrapping_mul(0x0100_0000_01b3);
                }
            }
            ((input.owner as u64 + h) % size as u64) as u32
        }
        Placement::RegionDynamic => {
            // Least loaded; ties go to the local server, then the lowest rank.
            let load = |r: u32| input.in_flight.get(r as usize).copied().unwrap_or(0);
            (0..size)
                .min_by_key(|&r| (load(r), r != input.local, r))
                .unwrap_or(input.local)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input<'a>(region: &'a Region, in_flight: &'a [u64]) -> PlacementInput<'a> {
        PlacementInput {
            owner: 1,
            local: 2,
            size: 4,
            region,
            in_flight,
            len: 4096,
            owner_on_node: false,
            small_to_owner: 256 << 10,
        }
    }

    #[test]
    fn names_round_trip_and_bad_names_are_explained() {
        for n in Placement::NAMES {
            assert_eq!(Placement::parse(n).unwrap().name(), n);
        }
        assert_eq!(
            Placement::parse("REGION_LOCAL").unwrap(),
            Placement::RegionLocal
        );
        let e = Placement::parse("nearest").unwrap_err();
        assert!(e.message.contains("region-local"), "{e}");
    }

    #[test]
    fn each_mode_picks_its_server() {
        let r = Region::new(vec![0], vec![10]).unwrap();
        let idle = [0u64; 4];
        assert_eq!(data_server(Placement::ObjectStatic, &input(&r, &idle)), 1);
        assert_eq!(data_server(Placement::RegionLocal, &input(&r, &idle)), 2);
        assert_eq!(data_server(Placement::RegionDynamic, &input(&r, &idle)), 2);
        let busy_local = [5, 0, 9, 0];
        assert_eq!(
            data_server(Placement::RegionDynamic, &input(&r, &busy_local)),
            1
        );
    }

    #[test]
    fn region_local_sends_small_writes_to_a_same_node_owner_only() {
        let r = Region::new(vec![0], vec![10]).unwrap();
        let idle = [0u64; 4];
        let on_node = |len, limit| PlacementInput {
            len,
            owner_on_node: true,
            small_to_owner: limit,
            ..input(&r, &idle)
        };
        assert_eq!(
            data_server(Placement::RegionLocal, &on_node(4096, 256 << 10)),
            1
        );
        // At the limit and above, and with the rule off, the writer's own server.
        assert_eq!(
            data_server(Placement::RegionLocal, &on_node(256 << 10, 256 << 10)),
            2
        );
        assert_eq!(data_server(Placement::RegionLocal, &on_node(4096, 0)), 2);
        // An owner on another node never takes it: the bytes stay on the writer's node.
        assert_eq!(data_server(Placement::RegionLocal, &input(&r, &idle)), 2);
    }

    #[test]
    fn region_static_is_deterministic_and_spreads() {
        let idle = [0u64; 4];
        let mut seen = std::collections::HashSet::new();
        for i in 0..64u64 {
            let r = Region::new(vec![i * 100], vec![100]).unwrap();
            let a = data_server(Placement::RegionStatic, &input(&r, &idle));
            assert_eq!(a, data_server(Placement::RegionStatic, &input(&r, &idle)));
            assert!(a < 4);
            seen.insert(a);
        }
        assert_eq!(seen.len(), 4);
    }
}
