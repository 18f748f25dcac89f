//! Stalled clients: connections that stop reading their replies, or stop sending mid-frame,
//! held open for the whole run to show they do not slow the others down.

use crate::raw::{io, Raw};
use crate::{Shared, Target};
use pdcx_core::protocol::{self, read, write, FrameKind, ReadItem, ReadOpts, Request, StageItem};
use pdcx_core::{Region, Result};
use std::io::Write;
use std::net::TcpStream;

/// A stalled client: a reader sends large read requests and never reads a reply; a writer
/// announces a large write and sends only half its payload. Both keep their socket open until
/// dropped.
pub(crate) fn stall(sh: &Shared, t: &Target, writer: bool) -> Result<TcpStream> {
    let mut c = Raw::connect(t.addr, &sh.secret)?;
    let id = t.ids[0];
    let len = sh.args.large;
    if writer {
        let req = Request::from(write::Stage {
            items: vec![StageItem {
                txn: u64::MAX - 1,
                id,
                region: Region {
                    offset: vec![0],
                    count: vec![len],
                },
                len,
            }],
            shm: None,
            commit: None,
        });
        let body = protocol::encode_body(&req)?;
        let head = protocol::Header {
            kind: FrameKind::Request,
            flags: 0,
            body_len: body.len() as u32,
            request_id: 1,
            payload_len: len,
        };
        c.w.write_all(&head.encode()).map_err(io("stall"))?;
        c.w.write_all(&body).map_err(io("stall"))?;
        c.w.write_all(&vec![0u8; (len / 2) as usize])
            .map_err(io("stall"))?;
        c.w.flush().map_err(io("stall"))?;
    } else {
        // Enough requests that the replies fill both socket buffers and the server's writer
        // blocks; sent from a helper thread because our own send can block too once the
        // server stops reading.
        let mut w = c.w.get_ref().try_clone().map_err(io("stall"))?;
        let req = Request::from(read::Read {
            opts: ReadOpts::default(),
            items: vec![ReadItem {
                id,
                region: Region {
                    offset: vec![0],
                    count: vec![len],
                },
            }],
        });
        let body = protocol::encode_body(&req)?;
        std::thread::Builder::new()
            .stack_size(64 << 10)
            .spawn(move || {
                for n in 0..64u64 {
                    if protocol::write_frame(&mut w, FrameKind::Request, n + 1, &body, &[]).is_err()
                    {
                        break;
                    }
                }
            })
            .map_err(io("spawning a stall thread"))?;
    }
    c.w.get_ref().try_clone().map_err(io("stall"))
}
