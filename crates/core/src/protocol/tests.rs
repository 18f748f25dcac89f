//! Framing, handshake and family round trips; random bodies never panic.

mod frames {
    use super::super::*;
    use crate::model::TagValue;
    use crate::region::Region;

    fn head(kind: FrameKind, body: usize, payload: u64) -> Header {
        Header {
            kind,
            flags: 0,
            body_len: body as u32,
            request_id: 99,
            payload_len: payload,
        }
    }

    #[test]
    fn a_payload_buffer_grows_only_with_the_bytes_that_arrive() {
        // 4 GiB announced, 10 bytes sent: the buffer stays at the first step.
        let mut buf = Vec::new();
        let mut short: &[u8] = &[7u8; 10];
        let e = read_payload(&mut short, &mut buf, 4 << 30).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
        assert!(buf.capacity() <= PAYLOAD_STEP, "{}", buf.capacity());
        // An honest payload arrives whole, from an empty buffer and into a larger reused one.
        let data: Vec<u8> = (0..5 * PAYLOAD_STEP + 3).map(|i| (i % 251) as u8).collect();
        let mut buf = Vec::new();
        read_payload(&mut &data[..], &mut buf, data.len()).unwrap();
        assert_eq!(buf, data);
        let mut big = vec![1u8; 8 * PAYLOAD_STEP];
        read_payload(&mut &data[..], &mut big, data.len()).unwrap();
        assert_eq!(big.len(), 8 * PAYLOAD_STEP);
        assert_eq!(&big[..data.len()], &data[..]);
        read_payload(&mut &data[..0], &mut Vec::new(), 0).unwrap();
    }

    #[test]
    fn header_round_trips() {
        let h = head(FrameKind::Request, 17, 1 << 33);
        assert_eq!(Header::decode(&h.encode(), u64::MAX).unwrap(), h);
    }

    #[test]
    fn header_rejects_garbage_versions_and_oversize() {
        let good = head(FrameKind::Request, 10, 10).encode();
        let mut b = good;
        b[0] = b'X';
        assert!(Header::decode(&b, 100)
            .unwrap_err()
            .message
            .contains("magic"));
        let mut b = good;
        b[4] = (VERSION + 1) as u8;
        let e = Header::decode(&b, 100).unwrap_err();
        assert!(
            e.message.contains("version mismatch")
                && e.message.contains(&format!("protocol {}", VERSION + 1))
                && e.message.contains(&format!("this one {VERSION}")),
            "{e}"
        );
        let mut b = good;
        b[6] = 77;
        assert!(Header::decode(&b, 100).is_err());
        assert!(Header::decode(&head(FrameKind::Request, 10, 101).encode(), 100).is_err());
        let huge = head(FrameKind::Request, MAX_BODY as usize + 1, 0).encode();
        assert!(Header::decode(&huge, 100).is_err());
    }

    fn stage_request() -> Request {
        write::Stage {
            items: vec![StageItem {
                txn: 5,
                id: 1 << 48 | 3,
                region: Region::new(vec![0, 4], vec![2, 2]).unwrap(),
                len: 32,
            }],
            shm: None,
            commit: Some(CommitOpts::at(Durability::Memory)),
        }
        .into()
    }

    #[test]
    fn requests_round_trip_through_a_frame() {
        let req = stage_request();
        let body = encode_body(&req).unwrap();
        let data = [7u8; 32];
        let mut wire = Vec::new();
        write_frame(
            &mut wire,
            FrameKind::Request,
            42,
            &body,
            &[&data[..16], &data[16..]],
        )
        .unwrap();
        let mut r = &wire[..];
        let (h, b) = read_frame_head(&mut r, 1 << 20).unwrap();
        assert_eq!((h.request_id, h.payload_len), (42, 32));
        assert_eq!(decode_body::<Request>(&b).unwrap(), req);
        assert_eq!(r, &data[..]);

        let resp = Response::Catalog(CatalogResponse::Objects(vec![]));
        assert_eq!(
            decode_body::<Response>(&encode_body(&resp).unwrap()).unwrap(),
            resp
        );
        let tags: Request = catalog::PutTags {
            target: TagTarget::Container("c".into()),
            tags: vec![("k".into(), TagValue::Float(1.5))],
            lazy: true,
        }
        .into();
        assert_eq!(
            decode_body::<Request>(&encode_body(&tags).unwrap()).unwrap(),
            tags
        );
    }

    #[test]
    fn a_call_takes_only_its_own_reply() {
        let staged = Response::Write(WriteResponse::Staged(3));
        assert_eq!(<write::Stage as Call>::reply(staged.clone()).unwrap(), 3);
        // Another operation's reply, even of the same family, is one typed protocol error.
        let e = <write::Commit as Call>::reply(staged).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Protocol);
        assert!(e.message.contains("reply to Commit"), "{e}");
        let welcome =
            Response::Handshake(HandshakeResponse::Welcome(ServerInfo { rank: 1, size: 2 }));
        assert_eq!(
            <handshake::Ping as Call>::reply(welcome.clone()).unwrap(),
            ServerInfo { rank: 1, size: 2 }
        );
        assert!(<admin::Shutdown as Call>::reply(welcome).is_err());
        let done = Response::Catalog(CatalogResponse::Done);
        assert!(<catalog::SyncMeta as Call>::reply(done.clone()).is_ok());
        assert!(<write::SyncLog as Call>::reply(done).is_err());
    }

    #[test]
    fn metric_names_tell_the_paths_apart() {
        assert_eq!(stage_request().metric_name(), "StageCommit");
        let late: Request = write::Reserve {
            items: vec![],
            crcs: None,
        }
        .into();
        assert_eq!(late.metric_name(), "ReserveWriteLate");
        let held: Request = read::Read {
            items: vec![],
            opts: ReadOpts {
                held: true,
                ..ReadOpts::default()
            },
        }
        .into();
        assert_eq!((held.name(), held.metric_name()), ("Read", "ReadHeld"));
    }

    #[test]
    fn whether_a_request_writes_follows_its_family() {
        assert!(stage_request().writes());
        assert_eq!(stage_request().name(), "Stage");
        let versions: Request = stream::Versions { id: None }.into();
        assert!(!versions.writes(), "a status poll is not a write");
        let seal: Request = stream::Seal {
            id: 1,
            home: "h".into(),
            sync_log: false,
        }
        .into();
        assert!(seal.writes());
        let open: Request = catalog::OpenObject { name: "x".into() }.into();
        assert!(!open.writes());
        let read: Request = read::Read {
            items: vec![],
            opts: ReadOpts::default(),
        }
        .into();
        assert!(!read.writes());
    }

    #[test]
    fn malformed_and_truncated_bodies_are_errors_not_panics() {
        let body = encode_body(&Request::from(catalog::OpenObject { name: "abc".into() })).unwrap();
        for cut in 0..body.len() {
            assert!(
                decode_body::<Request>(&body[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        // A length prefix that claims 2^60 elements must not allocate.
        // Catalog, CreateObjects: a Vec of specs.
        let mut evil = vec![1u8, 4];
        evil.extend_from_slice(&[0xff; 16]);
        assert!(decode_body::<Request>(&evil).is_err());
        let mut r: &[u8] = b"PD";
        assert_eq!(
            read_frame_head(&mut r, 10).unwrap_err().kind,
            ErrorKind::Unavailable
        );
    }

    #[test]
    fn hello_accepts_only_the_right_secret_role_rank_channel_and_nonce() {
        let peer = Role::Peer { rank: 1 };
        let bind = tcp_binding(
            "10.0.0.1:5000".parse().unwrap(),
            "10.0.0.2:7000".parse().unwrap(),
        );
        let cred = Credential::deployment(b"secret");
        let hello = Hello::new(&cred, b"nonce", peer, bind.clone(), Wire::Integrity);
        assert!(hello.verify(b"secret", b"nonce"));
        assert!(!hello.verify(b"other", b"nonce"));
        assert!(!hello.verify(b"secret", b"nonce2"));
        let changed = |f: &dyn Fn(&mut Hello)| {
            let mut h = hello.clone();
            f(&mut h);
            h.verify(b"secret", b"nonce")
        };
        assert!(!changed(&|h| h.tag.truncate(31)));
        // A proof names one role, rank, channel, client nonce and protection.
        assert!(!changed(&|h| h.role = Role::Client));
        assert!(!changed(&|h| h.role = Role::Admin));
        assert!(!changed(&|h| h.user = Some(0)));
        assert!(!changed(&|h| h.role = Role::Peer { rank: 2 }));
        assert!(!changed(&|h| h.binding = unix_binding(1, 2)));
        assert!(!changed(&|h| h.nonce[0] ^= 1));
        assert!(!changed(&|h| h.nonce.truncate(16)));
        assert!(!changed(&|h| h.wire = Wire::Plain));
        // Two Hellos for the same challenge differ (fresh client nonces).
        let again = Hello::new(&cred, b"nonce", peer, bind, Wire::Integrity);
        assert_ne!(again.nonce, hello.nonce);
    }

    #[test]
    fn a_user_key_proves_exactly_its_user() {
        let bind = unix_binding(1, 2);
        let key = user_key(b"secret", 1000);
        let hello = Hello::new(
            &Credential::user_key(1000, key.clone()),
            b"n",
            Role::Client,
            bind.clone(),
            Wire::Plain,
        );
        assert_eq!(hello.user, Some(1000));
        // The server makes the key again from the uid the Hello names.
        assert!(hello.verify(&hello.key(b"secret"), b"n"));
        // Claiming another uid, or the deployment secret's place, fails.
        for user in [Some(1001), Some(0), None] {
            let mut h = hello.clone();
            h.user = user;
            assert!(!h.verify(&h.key(b"secret"), b"n"), "{user:?}");
        }
        // A key for one deployment is worth nothing in another.
        assert!(!hello.verify(&user_key(b"other", 1000), b"n"));
        assert_ne!(user_key(b"secret", 1000), user_key(b"secret", 1001));
        // A kernel credential sends no tag, and a tagless Hello never verifies.
        let k = Hello::new(
            &Credential::kernel(1000, 0),
            b"n",
            Role::Client,
            bind,
            Wire::Plain,
        );
        assert!(k.by_kernel() && k.tag.is_empty());
        assert!(!k.verify(&k.key(b"secret"), b"n"));
        assert!(!hello.by_kernel());
    }

    #[test]
    fn welcome_proves_the_server_and_keys_are_per_connection_and_direction() {
        let hello = Hello::new(
            &Credential::deployment(b"secret"),
            b"n",
            Role::Client,
            unix_binding(1, 2),
            Wire::Plain,
        );
        let info = ServerInfo { rank: 3, size: 4 };
        let w = Welcome::new(b"secret", &hello, info, Wire::Integrity);
        assert!(w.verify(b"secret", &hello));
        assert!(!w.verify(b"other", &hello));
        // A server without the secret cannot forge one, nor change rank, size or wire.
        assert!(!Welcome::new(b"other", &hello, info, Wire::Integrity).verify(b"secret", &hello));
        for bad in [
            Welcome {
                info: ServerInfo { rank: 2, size: 4 },
                ..w.clone()
            },
            Welcome {
                info: ServerInfo { rank: 3, size: 5 },
                ..w.clone()
            },
            Welcome {
                wire: Wire::Plain,
                ..w.clone()
            },
        ] {
            assert!(!bad.verify(b"secret", &hello));
        }
        // The Welcome answers one Hello only.
        let other = Hello::new(
            &Credential::deployment(b"secret"),
            b"n",
            Role::Client,
            unix_binding(1, 2),
            Wire::Plain,
        );
        assert!(!w.verify(b"secret", &other));
        let k = SessionKeys::derive(b"secret", &hello, &w);
        assert_ne!(k.client_to_server, k.server_to_client);
        let w2 = Welcome::new(b"secret", &other, info, Wire::Integrity);
        let k2 = SessionKeys::derive(b"secret", &other, &w2);
        assert_ne!(k.client_to_server, k2.client_to_server);
    }

    #[test]
    fn peer_requests_round_trip_and_are_not_client_requests() {
        let req = PeerRequest::Register {
            items: vec![RegisterItem {
                id: 3,
                region: Region::new(vec![0], vec![4]).unwrap(),
                token: Some((1, 2)),
            }],
        };
        let body = encode_body(&req).unwrap();
        assert_eq!(decode_body::<PeerRequest>(&body).unwrap(), req);
        let resp = PeerResponse::Seqs(vec![Some(7), None]);
        assert_eq!(
            decode_body::<PeerResponse>(&encode_body(&resp).unwrap()).unwrap(),
            resp
        );
        assert!(PeerResponse::Error(Error::internal("x"))
            .into_result()
            .is_err());
    }
}

/// Poor man's fuzzing without extra dependencies: random and mutated frames must decode to a
/// value or an error, never panic or allocate unboundedly.
mod fuzz {
    use super::super::*;
    use crate::query::Condition;
    use crate::region::Region;

    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }
    }

    #[test]
    fn random_and_mutated_bodies_never_panic() {
        let mut rng = Lcg(7);
        let seeds: Vec<Vec<u8>> = vec![
            encode_body(&Request::from(write::Stage {
                items: vec![StageItem {
                    txn: 1,
                    id: 2,
                    region: Region::new(vec![0, 0], vec![4, 4]).unwrap(),
                    len: 128,
                }],
                shm: Some(vec![ShmLoc {
                    arena: 1,
                    offset: 64,
                }]),
                commit: None,
            }))
            .unwrap(),
            encode_body(&Request::from(catalog::Query {
                conditions: vec![Condition::parse("a>=1").unwrap()],
            }))
            .unwrap(),
            encode_body(&Response::Catalog(CatalogResponse::Objects(vec![]))).unwrap(),
        ];
        for round in 0..20_000 {
            let mut b = if round % 4 == 0 {
                (0..rng.next() % 64).map(|_| rng.next() as u8).collect()
            } else {
                seeds[round % seeds.len()].clone()
            };
            for _ in 0..1 + rng.next() % 4 {
                if !b.is_empty() {
                    let i = (rng.next() as usize) % b.len();
                    b[i] = rng.next() as u8;
                }
            }
            let _ = decode_body::<Request>(&b);
            let _ = decode_body::<Response>(&b);
            let _ = decode_body::<PeerRequest>(&b);
            let _ = decode_body::<PeerResponse>(&b);
            let _ = decode_body::<Hello>(&b);
            let mut h = [0u8; HEADER_LEN];
            h.iter_mut()
                .zip(b.iter().chain(std::iter::repeat(&0)))
                .for_each(|(d, s)| *d = *s);
            h[0..4].copy_from_slice(&MAGIC);
            h[4..6].copy_from_slice(&VERSION.to_le_bytes());
            let _ = Header::decode(&h, 1 << 20);
        }
    }
}
