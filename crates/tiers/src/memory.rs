//! The memory tier: blobs in this server's heap. Fast and volatile, so the server keeps the
//! log copy of anything whose only other home is here.

use crate::{check_key, Tier, TierKind};
use pdcx_core::{Error, ErrorKind, Result};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

pub struct MemoryTier {
    name: String,
    capacity: Option<u64>,
    state: RwLock<State>,
}

#[derive(Default)]
struct State {
    blobs: BTreeMap<String, Arc<Vec<u8>>>,
    used: u64,
}

impl MemoryTier {
    pub fn new(name: &str, capacity: Option<u64>) -> Self {
        MemoryTier {
            name: name.to_string(),
            capacity,
            state: RwLock::new(State::default()),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }
}

impl Tier for MemoryTier {
    fn name(&self) -> &str {
        &self.name
    }
    fn kind(&self) -> TierKind {
        TierKind::Memory
    }

    fn put(&self, key: &str, data: &[u8]) -> Result<()> {
        check_key(key)?;
        let mut st = self.state.write().unwrap_or_else(|p| p.into_inner());
        let old = st.blobs.get(key).map_or(0, |b| b.len() as u64);
        let new_used = st.used - old + data.len() as u64;
        if let Some(cap) = self.capacity {
            if new_used > cap {
                return Err(Error::new(
                    ErrorKind::NoSpace,
                    format!(
                        "tier {:?} (memory) is full: {} of {} bytes used, {} more needed",
                        self.name,
                        st.used,
                        cap,
                        data.len()
                    ),
                ));
            }
        }
        st.blobs.insert(key.to_string(), Arc::new(data.to_vec()));
        st.used = new_used;
        Ok(())
    }

    fn get_range(&self, key: &str, offset: u64, out: &mut [u8]) -> Result<()> {
        let blob =
            self.read().blobs.get(key).cloned().ok_or_else(|| {
                Error::not_found(format!("tier {:?}: no blob {key:?}", self.name))
            })?;
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let end = start
            .checked_add(out.len())
            .filter(|&e| e <= blob.len())
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::OutOfBounds,
                    format!(
                        "tier {:?}: range {offset}+{} past the end of {key:?} ({} bytes)",
                        self.name,
                        out.len(),
                        blob.len()
                    ),
                )
            })?;
        out.copy_from_slice(&blob[start..end]);
        Ok(())
    }

    fn len(&self, key: &str) -> Result<u64> {
        self.read()
            .blobs
            .get(key)
            .map(|b| b.len() as u64)
            .ok_or_else(|| Error::not_found(format!("tier {:?}: no blob {key:?}", self.name)))
    }

    fn delete(&self, key: &str) -> Result<()> {
        let mut st = self.state.write().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = st.blobs.remove(key) {
            st.used -= b.len() as u64;
        }
        Ok(())
    }

    fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>> {
        Ok(self
            .read()
            .blobs
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.len() as u64))
            .collect())
    }

    fn capacity(&self) -> Option<u64> {
        self.capacity
    }
    fn used(&self) -> u64 {
        self.read().used
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance;

    #[test]
    fn behaves_like_a_tier() {
        conformance::check(&MemoryTier::new("mem", None));
    }

    #[test]
    fn capacity_is_enforced_and_freed() {
        let t = MemoryTier::new("mem", Some(100));
        t.put("a", &[1; 60]).unwrap();
        let err = t.put("b", &[2; 60]).unwrap_err();
        assert_eq!(err.kind, ErrorKind::NoSpace);
        t.put("a", &[1; 90]).unwrap(); // replacing counts only the difference
        t.delete("a").unwrap();
        t.put("b", &[2; 100]).unwrap();
        assert_eq!(t.used(), 100);
    }
}
