//! `pdcx gateway`: a site's end of links from other sites. One thread per connection; each
//! connection must first say which site it is with the token this site issued to it
//! (`pdcx remote token SITE`); then it may read metadata and regions (pulls) and push
//! transfers, which a shared [`Receiver`] takes in.

use crate::receive::Receiver;
use crate::site;
use crate::wire::{self, Msg};
use crate::{io, Result, XsiteError};
use pdcx_client::Client;
use rustls::{ServerConnection, StreamOwned};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;

/// This site's name as its gateway tells connecting sites.
pub struct Gateway {
    pub site: String,
    receiver: Arc<Receiver>,
    /// The deployment root: the tokens it accepts are read at each connection, so a token
    /// issued (or replaced) while the gateway runs counts at once.
    root: std::path::PathBuf,
    tls: Arc<rustls::ServerConfig>,
}

impl Gateway {
    pub fn new(root: &Path, site: &str, client: Client) -> Result<Gateway> {
        site::check_site_name(site)?;
        let id = site::load_identity(root)?;
        Ok(Gateway {
            site: site.to_string(),
            receiver: Arc::new(Receiver::new(client)),
            root: root.to_path_buf(),
            tls: crate::tls::server_config(&id)?,
        })
    }

    /// Serves connections from `listener` until the process ends.
    pub fn serve(self: Arc<Self>, listener: TcpListener) -> Result<()> {
        for conn in listener.incoming() {
            let tcp = match conn {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("pdcx gateway: accept: {e}");
                    continue;
                }
            };
            let me = self.clone();
            std::thread::spawn(move || {
                let peer = tcp.peer_addr().map(|a| a.to_string()).unwrap_or_default();
                if let Err(e) = me.connection(tcp) {
                    eprintln!("pdcx gateway: connection from {peer}: {e}");
                }
            });
        }
        Ok(())
    }

    fn connection(&self, tcp: TcpStream) -> Result<()> {
        tcp.set_nodelay(true).ok();
        let conn =
            ServerConnection::new(self.tls.clone()).map_err(|e| XsiteError::Tls(e.to_string()))?;
        let mut s = StreamOwned::new(conn, tcp);
        // Nothing but a valid Hello is answered before the peer is known.
        let peer = match wire::recv(&mut s)? {
            Some((
                Msg::Hello {
                    site,
                    token,
                    version,
                },
                _,
            )) => {
                let refused = if version != wire::VERSION {
                    Some(format!(
                        "link protocol {version}, this gateway speaks {}",
                        wire::VERSION
                    ))
                } else if !site::accepts(&site::load_accepted(&self.root)?, &site, &token) {
                    Some(format!(
                        "site {site:?} is not accepted with this token (issue one with `pdcx remote token {site}` here)"
                    ))
                } else {
                    None
                };
                if let Some(message) = refused {
                    wire::send(
                        &mut s,
                        &Msg::Error {
                            message: message.clone(),
                        },
                        &[],
                    )?;
                    return Err(crate::invalid(format!("refused: {message}")));
                }
                wire::send(
                    &mut s,
                    &Msg::Welcome {
                        site: self.site.clone(),
                    },
                    &[],
                )?;
                site
            }
            Some(_) => {
                wire::send(
                    &mut s,
                    &Msg::Error {
                        message: "say Hello first".into(),
                    },
                    &[],
                )?;
                return Ok(());
            }
            None => return Ok(()),
        };
        while let Some((msg, payload)) = wire::recv(&mut s)? {
            let (answer, data) = match self.handle(&peer, msg, &payload) {
                Ok(x) => x,
                Err(e) => (
                    Msg::Error {
                        message: e.to_string(),
                    },
                    Vec::new(),
                ),
            };
            wire::send(&mut s, &answer, &data)?;
        }
        Ok(())
    }

    fn handle(&self, peer: &str, msg: Msg, payload: &[u8]) -> Result<(Msg, Vec<u8>)> {
        let client = self.receiver.client();
        Ok(match msg {
            Msg::Meta { name } => {
                if name.starts_with(crate::receive::STAGING_PREFIX) {
                    return Err(crate::invalid(format!(
                        "{name} is not an object one may pull"
                    )));
                }
                (
                    Msg::MetaIs {
                        meta: client.open_object(&name)?,
                    },
                    Vec::new(),
                )
            }
            Msg::Read { name, region, step } => {
                if name.starts_with(crate::receive::STAGING_PREFIX) {
                    return Err(crate::invalid(format!(
                        "{name} is not an object one may pull"
                    )));
                }
                let meta = client.open_object(&name)?;
                region.check_within(&meta.dims)?;
                let elems = match &step {
                    Some(s) if s.len() == region.ndim() && !s.contains(&0) => region
                        .count
                        .iter()
                        .zip(s)
                        .map(|(c, s)| c.div_ceil(*s))
                        .product::<u64>(),
                    Some(s) => {
                        return Err(crate::invalid(format!("steps {s:?} for region {region}")))
                    }
                    None => region.num_elements(),
                };
                let len = elems.saturating_mul(meta.dtype.size() as u64);
                if len > wire::MAX_PAYLOAD {
                    return Err(crate::invalid(format!(
                        "region {region} is {len} bytes, over a frame"
                    )));
                }
                let mut buf = vec![0u8; len as usize];
                match &step {
                    Some(s) => client.read_strided(meta.id, &region, s, &mut buf)?,
                    None => client.read_into(meta.id, &region, &mut buf)?,
                }
                (
                    Msg::Data {
                        crc: crc32c::crc32c(&buf),
                    },
                    buf,
                )
            }
            Msg::Query { name, expr, region } => {
                let meta = client.open_object(&name)?;
                let (nhits, ndim, bytes) =
                    crate::transfer::where_query(client, &meta, &expr, region)?;
                let hits = Msg::Hits {
                    nhits,
                    ndim: ndim as u32,
                    crc: crc32c::crc32c(&bytes),
                };
                (hits, bytes)
            }
            Msg::Begin { spec } => {
                if spec.source_site != peer {
                    return Err(crate::invalid(format!(
                        "site {peer} pushes as {:?}",
                        spec.source_site
                    )));
                }
                (
                    Msg::Missing {
                        chunks: self.receiver.begin(&spec)?,
                    },
                    Vec::new(),
                )
            }
            Msg::Chunk { key, index, crc } => {
                self.receiver.store(&key, index, crc, payload)?;
                (Msg::Stored, Vec::new())
            }
            Msg::Finish { key } => {
                let name = self.receiver.name_of(&key)?;
                (
                    Msg::Published {
                        bytes: self.receiver.publish(&key, &name)?,
                    },
                    Vec::new(),
                )
            }
            other => return Err(crate::invalid(format!("not a request: {other:?}"))),
        })
    }
}

/// Binds `addr` for a gateway, with a clear error.
pub fn bind(addr: &str) -> Result<TcpListener> {
    TcpListener::bind(addr).map_err(io(format!("listen on {addr}")))
}
