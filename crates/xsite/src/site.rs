//! A site's identity and the remote sites it knows, under `ROOT/xsite/` (mode 0700):
//! `cert.pem` and `key.pem` (self-signed, made by `pdcx remote init`), `accept.json` (the
//! tokens this site's gateway accepts, by peer site, stored as SHA-256 digests, and the names
//! outside its own `SITE/` a peer site may push to) and
//! `remotes.json` (per remote site: URL, token, certificate fingerprint; mode 0600).

use crate::{invalid, io, Result, XsiteError};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The certificate's subject name; clients pin the fingerprint, not the name.
pub const CERT_NAME: &str = "pdcx-site";

pub fn dir(root: &Path) -> PathBuf {
    root.join("xsite")
}

/// Hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref())
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `data` to `path` atomically (temp file, fsync, rename) with mode `mode`.
fn write_private(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .map_err(io(format!("create {}", tmp.display())))?;
    f.write_all(data)
        .and_then(|()| f.sync_all())
        .map_err(io(format!("write {}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(io(format!("rename {}", path.display())))
}

fn ensure_dir(root: &Path) -> Result<PathBuf> {
    let d = dir(root);
    std::fs::create_dir_all(&d).map_err(io(format!("create {}", d.display())))?;
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700))
        .map_err(io(format!("chmod {}", d.display())))?;
    Ok(d)
}

/// This site's certificate and key (PEM).
pub struct Identity {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Identity {
    /// The fingerprint remote sites pin: hex SHA-256 of the certificate (DER).
    pub fn fingerprint(&self) -> Result<String> {
        Ok(sha256_hex(&cert_der(&self.cert_pem)?))
    }
}

/// The DER of the first certificate in `pem`.
pub fn cert_der(pem: &str) -> Result<CertificateDer<'static>> {
    CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|e| XsiteError::Tls(e.to_string()))
}

/// Makes this site's identity unless it has one; returns it and whether it was made now.
pub fn init(root: &Path) -> Result<(Identity, bool)> {
    if let Ok(id) = load_identity(root) {
        return Ok((id, false));
    }
    let d = ensure_dir(root)?;
    let ck = rcgen::generate_simple_self_signed(vec![CERT_NAME.to_string()])
        .map_err(|e| XsiteError::Tls(format!("making a certificate: {e}")))?;
    let id = Identity {
        cert_pem: ck.cert.pem(),
        key_pem: ck.key_pair.serialize_pem(),
    };
    write_private(&d.join("key.pem"), id.key_pem.as_bytes(), 0o600)?;
    write_private(&d.join("cert.pem"), id.cert_pem.as_bytes(), 0o644)?;
    Ok((id, true))
}

pub fn load_identity(root: &Path) -> Result<Identity> {
    let d = dir(root);
    let read = |name: &str| {
        std::fs::read_to_string(d.join(name)).map_err(|e| {
            invalid(format!(
                "this site has no identity ({}: {e}): run `pdcx remote init` first",
                d.join(name).display()
            ))
        })
    };
    Ok(Identity {
        cert_pem: read("cert.pem")?,
        key_pem: read("key.pem")?,
    })
}

/// Tokens this site's gateway accepts: peer site name -> SHA-256 of the token; and per peer
/// site the names it may push to besides its own `SITE/...` (a name, or a prefix ending in
/// `/`).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Accepted {
    pub tokens: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub grants: BTreeMap<String, Vec<String>>,
}

impl Accepted {
    /// The names granted to peer site `site`.
    pub fn grants_of(&self, site: &str) -> Vec<String> {
        self.grants.get(site).cloned().unwrap_or_default()
    }
}

fn save_accepted(root: &Path, acc: &Accepted) -> Result<()> {
    let d = ensure_dir(root)?;
    let json = serde_json::to_vec_pretty(acc).map_err(|e| invalid(e.to_string()))?;
    write_private(&d.join("accept.json"), &json, 0o600)
}

/// Grants peer site `site` pushes to `names` (each a name, or a prefix ending in `/`), or with
/// `revoke` takes them back; returns the site's grants after.
pub fn grant(root: &Path, site: &str, names: &[String], revoke: bool) -> Result<Vec<String>> {
    check_site_name(site)?;
    for n in names {
        pdcx_core::model::validate_name("granted", n)?;
        if crate::is_staging(n) || n == "/" {
            return Err(invalid(format!("{n:?} cannot be granted")));
        }
    }
    let mut acc = load_accepted(root)?;
    let mine = acc.grants.entry(site.to_string()).or_default();
    if revoke {
        mine.retain(|g| !names.contains(g));
    } else {
        for n in names {
            if !mine.contains(n) {
                mine.push(n.clone());
            }
        }
    }
    let after = mine.clone();
    if after.is_empty() {
        acc.grants.remove(site);
    }
    save_accepted(root, &acc)?;
    Ok(after)
}

pub fn load_accepted(root: &Path) -> Result<Accepted> {
    let p = dir(root).join("accept.json");
    match std::fs::read(&p) {
        Ok(b) => serde_json::from_slice(&b)
            .map_err(|e| invalid(format!("{} is not valid: {e}", p.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Accepted::default()),
        Err(e) => Err(io(format!("read {}", p.display()))(e)),
    }
}

/// Issues a new token for peer site `site` (replacing any earlier one); returns it. Only its
/// digest is kept.
pub fn issue_token(root: &Path, site: &str) -> Result<String> {
    check_site_name(site)?;
    let mut acc = load_accepted(root)?;
    let mut raw = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut raw);
    let token = hex(&raw);
    acc.tokens
        .insert(site.to_string(), sha256_hex(token.as_bytes()));
    save_accepted(root, &acc)?;
    Ok(token)
}

/// The peer site a token belongs to, if this site accepts it (compared in constant time).
pub fn accepts(acc: &Accepted, site: &str, token: &str) -> bool {
    let got = sha256_hex(token.as_bytes());
    acc.tokens.get(site).is_some_and(|want| {
        // Digests are compared (an attacker cannot steer a digest's bytes); all bytes anyway.
        want.len() == got.len()
            && want
                .bytes()
                .zip(got.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    })
}

/// A remote site as this site knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Remote {
    /// host:port of its gateway, or several comma-separated (`pdcx://` or `tls://` prefix
    /// allowed on input).
    pub url: String,
    /// The token the remote issued for this site.
    pub token: String,
    /// Hex SHA-256 of the remote gateway's certificate.
    pub fingerprint: String,
    /// The name this site has at the remote (the token was issued for it).
    pub as_site: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Remotes {
    pub sites: BTreeMap<String, Remote>,
}

pub fn check_site_name(site: &str) -> Result<()> {
    if site.is_empty()
        || site.len() > 64
        || !site
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
    {
        return Err(invalid(format!(
            "site name {site:?}: use 1-64 letters, digits, '-', '_' or '.'"
        )));
    }
    Ok(())
}

/// `host:port[,host:port...]` from gateway URLs (`tls://host:port`, `pdcx://host:port` or
/// `host:port`, comma-separated: a site may run one gateway per node, and a transfer spreads
/// its streams over them).
pub fn normalize_url(urls: &str) -> Result<String> {
    let all: Result<Vec<String>> = urls.split(',').map(|u| normalize_one(u.trim())).collect();
    Ok(all?.join(","))
}

fn normalize_one(url: &str) -> Result<String> {
    let rest = url
        .strip_prefix("tls://")
        .or_else(|| url.strip_prefix("pdcx://"))
        .unwrap_or(url);
    let ok = rest
        .rsplit_once(':')
        .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
    if !ok {
        return Err(invalid(format!(
            "gateway URL {url:?}: expected HOST:PORT (e.g. tls://10.0.0.2:7070)"
        )));
    }
    Ok(rest.to_string())
}

pub fn load_remotes(root: &Path) -> Result<Remotes> {
    let p = dir(root).join("remotes.json");
    match std::fs::read(&p) {
        Ok(b) => serde_json::from_slice(&b)
            .map_err(|e| invalid(format!("{} is not valid: {e}", p.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Remotes::default()),
        Err(e) => Err(io(format!("read {}", p.display()))(e)),
    }
}

pub fn save_remotes(root: &Path, r: &Remotes) -> Result<()> {
    let d = ensure_dir(root)?;
    let json = serde_json::to_vec_pretty(r).map_err(|e| invalid(e.to_string()))?;
    write_private(&d.join("remotes.json"), &json, 0o600)
}

/// Adds (or replaces) remote `site`.
pub fn add_remote(root: &Path, site: &str, remote: Remote) -> Result<()> {
    check_site_name(site)?;
    check_site_name(&remote.as_site)?;
    if remote.fingerprint.len() != 64 || !remote.fingerprint.chars().all(|c| c.is_ascii_hexdigit())
    {
        return Err(invalid(format!(
            "fingerprint {:?}: expected the 64 hex digits `pdcx remote init` prints at {site}",
            remote.fingerprint
        )));
    }
    if remote.token.len() != 64 || !remote.token.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(invalid(
            "token: expected the 64 hex digits `pdcx remote token` printed",
        ));
    }
    let mut r = load_remotes(root)?;
    r.sites.insert(
        site.to_string(),
        Remote {
            url: normalize_url(&remote.url)?,
            fingerprint: remote.fingerprint.to_ascii_lowercase(),
            ..remote
        },
    );
    save_remotes(root, &r)
}

pub fn remote(root: &Path, site: &str) -> Result<Remote> {
    load_remotes(root)?.sites.remove(site).ok_or_else(|| {
        invalid(format!(
            "no remote site {site:?}: add it with `pdcx remote add {site} HOST:PORT --token ... --fingerprint ...`"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_kept_as_digests_and_checked_per_site() {
        let d = tempfile::tempdir().unwrap();
        let t = issue_token(d.path(), "cloud").unwrap();
        let raw = std::fs::read_to_string(dir(d.path()).join("accept.json")).unwrap();
        assert!(!raw.contains(&t), "the token itself is not stored");
        let acc = load_accepted(d.path()).unwrap();
        assert!(accepts(&acc, "cloud", &t));
        assert!(!accepts(&acc, "other", &t));
        assert!(!accepts(&acc, "cloud", &t[1..]));
        let t2 = issue_token(d.path(), "cloud").unwrap();
        let acc = load_accepted(d.path()).unwrap();
        assert!(
            accepts(&acc, "cloud", &t2) && !accepts(&acc, "cloud", &t),
            "replaced"
        );
        assert!(issue_token(d.path(), "bad/name").is_err());
    }

    #[test]
    fn grants_are_kept_per_site_and_revoked() {
        let d = tempfile::tempdir().unwrap();
        let t = issue_token(d.path(), "cloud").unwrap();
        let g = |names: &[&str], revoke| {
            let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
            grant(d.path(), "cloud", &names, revoke)
        };
        assert_eq!(
            g(&["shared/", "run/x"], false).unwrap(),
            ["shared/", "run/x"]
        );
        assert_eq!(g(&["shared/"], false).unwrap(), ["shared/", "run/x"]);
        let acc = load_accepted(d.path()).unwrap();
        assert_eq!(acc.grants_of("cloud"), ["shared/", "run/x"]);
        assert!(acc.grants_of("other").is_empty());
        assert!(accepts(&acc, "cloud", &t), "granting keeps the token");
        assert_eq!(g(&["run/x"], true).unwrap(), ["shared/"]);
        assert!(g(&["xsite.staging/x"], false).is_err());
        assert!(grant(d.path(), "bad/site", &[], false).is_err());
    }

    #[test]
    fn remotes_are_validated() {
        let d = tempfile::tempdir().unwrap();
        let good = Remote {
            url: "tls://10.0.0.2:7070, 10.0.0.3:7070".into(),
            token: "ab".repeat(32),
            fingerprint: "CD".repeat(32),
            as_site: "hpc".into(),
        };
        add_remote(d.path(), "cloud", good.clone()).unwrap();
        let r = remote(d.path(), "cloud").unwrap();
        assert_eq!(r.url, "10.0.0.2:7070,10.0.0.3:7070");
        assert_eq!(r.fingerprint, "cd".repeat(32));
        for bad in [
            Remote {
                url: "10.0.0.2".into(),
                ..good.clone()
            },
            Remote {
                token: "xyz".into(),
                ..good.clone()
            },
            Remote {
                fingerprint: "ab".into(),
                ..good.clone()
            },
        ] {
            assert!(add_remote(d.path(), "cloud", bad).is_err());
        }
        assert!(remote(d.path(), "nowhere")
            .unwrap_err()
            .to_string()
            .contains("pdcx remote add"));
    }
}
