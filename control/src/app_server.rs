//! The application-facing verbs, sans-IO: each request an application sends over control.sock
//! is checked against the resource tables and becomes a reply plus the commands iwarpd must
//! run. The process layer around it owns the socket, creates the ring segments (named by
//! [`ring_name`]) and verifies application segments before calling in.

use crate::daemon_link::teardown_commands;
use crate::error::Error;
use crate::error::Resource;
use crate::resources::{check_access, AppId, Resources};
use iwarp_abi::app::Request;
use iwarp_abi::command::{reply_status, Command, ShmPath, NO_ID};
use iwarp_abi::id::{CqId, PdId, QpId, SrqId};
use iwarp_abi::qp::QpState;
use iwarp_config::Limits;
use std::collections::BTreeMap;

/// What a ring segment holds, for its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingKind {
    Sq,
    Rq,
    Srq,
    Cq,
}

/// The file name of a ring segment: unique per application and resource, and recognisable
/// when cleaning up after a crashed application (`iw-<pid>-<kind><id>`).
pub fn ring_name(app_pid: u32, kind: RingKind, id: u32) -> String {
    let k = match kind {
        RingKind::Sq => "sq",
        RingKind::Rq => "rq",
        RingKind::Srq => "srq",
        RingKind::Cq => "cq",
    };
    format!("iw-{app_pid}-{k}{id}")
}

/// An application segment control has opened and verified (mapped, header checked, owned by
/// the application's pid): the only memory registration accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedSegment {
    pub path: ShmPath,
    pub data_len: u64,
}

/// The answer to a request, with control's own error: sent as the protocol's
/// [`iwarp_abi::app::Failure`] by [`crate::app_proto::encode_reply`].
pub type Reply = iwarp_abi::app::Reply<Error>;

/// iwarpd's reply status as control's error: `IN_USE` is the verb's "still in use"
/// immediate error, anything else a refusal with its status.
fn refused(status: u32, what: Resource, id: u32) -> Result<(), Error> {
    match status {
        reply_status::OK => Ok(()),
        reply_status::IN_USE => Err(Error::Refused {
            what,
            id,
            reason: match what {
                Resource::Cq => "more completions are on the CQ than the new size holds",
                Resource::Qp => "memory windows are still bound on it",
                _ => "memory windows or fast-registered STags still point into it",
            },
        }),
        _ => Err(Error::Refused {
            what,
            id,
            reason: "iwarpd refused the command (see its log)",
        }),
    }
}

/// The control plane's state for every application.
pub struct Core {
    res: Resources,
    segments: BTreeMap<(AppId, u32), VerifiedSegment>,
    next_segment: u32,
}

impl Core {
    pub fn new(limits: Limits) -> Core {
        Core {
            res: Resources::new(limits),
            segments: BTreeMap::new(),
            next_segment: 1,
        }
    }

    pub fn resources(&self) -> &Resources {
        &self.res
    }

    /// Records a segment the process layer verified for `app`; returns its id.
    pub fn add_segment(&mut self, app: AppId, seg: VerifiedSegment) -> u32 {
        let id = self.next_segment;
        self.next_segment += 1;
        self.segments.insert((app, id), seg);
        id
    }

    /// Handles one request of `app`; returns the reply and the daemon commands to run (in
    /// order) before the reply is sent.
    pub fn handle(&mut self, app: AppId, req: Request) -> (Reply, Vec<Command>) {
        match self.dispatch(app, req) {
            Ok(r) => r,
            Err(e) => (Reply::Failed(e), Vec::new()),
        }
    }

    fn dispatch(&mut self, app: AppId, req: Request) -> Result<(Reply, Vec<Command>), Error> {
        let r = &mut self.res;
        // A VA-based registration is a RegMr whose tagged offsets start at `va`.
        let (req, va) = match req {
            Request::RegMrVa {
                pd,
                access,
                segment,
                offset,
                len,
                va,
            } => (
                Request::RegMr {
                    pd,
                    access,
                    segment,
                    offset,
                    len,
                },
                Some(va),
            ),
            other => (other, None),
        };
        Ok(match req {
            Request::QueryRnic => (Reply::Rnic(r.limits().clone()), vec![]),
            Request::AllocPd => {
                let pd = r.alloc_pd(app)?;
                (Reply::Id(pd), vec![Command::AllocPd { pd: PdId(pd) }])
            }
            Request::DeallocPd { pd } => {
                r.dealloc_pd(app, pd.0)?;
                (Reply::Done, vec![Command::DeallocPd { pd }])
            }
            Request::CreateCq { depth, ring } => {
                let cq = r.create_cq(app, depth)?;
                (
                    Reply::Id(cq),
                    vec![Command::CreateCq {
                        cq: CqId(cq),
                        depth,
                        ring,
                    }],
                )
            }
            Request::DestroyCq { cq } => {
                r.destroy_cq(app, cq.0)?;
                (Reply::Done, vec![Command::DestroyCq { cq }])
            }
            Request::QueryCq { cq } => (
                Reply::Cq {
                    depth: r.cq(app, cq.0)?.depth,
                },
                vec![],
            ),
            Request::CreateSrq { pd, depth, ring } => {
                let srq = r.create_srq(app, pd.0, depth)?;
                let c = Command::CreateSrq {
                    srq: SrqId(srq),
                    pd,
                    depth,
                    ring,
                };
                (Reply::Id(srq), vec![c])
            }
            Request::DestroySrq { srq } => {
                r.destroy_srq(app, srq.0)?;
                (Reply::Done, vec![Command::DestroySrq { srq }])
            }
            Request::QuerySrq { srq } => {
                let s = r.srq(app, srq.0)?;
                let (depth, limit) = (s.depth, s.limit);
                (Reply::Srq { depth, limit }, vec![])
            }
            Request::ModifySrq { srq, limit } => {
                r.set_srq_limit(app, srq.0, limit)?;
                (Reply::Done, vec![Command::ArmSrq { srq, limit }])
            }
            Request::CreateQp { attrs, sq, rq } => {
                let a = attrs.clone();
                let qp = r.create_qp(app, attrs)?;
                let c = Command::CreateQp {
                    qp: QpId(qp),
                    pd: a.pd,
                    send_cq: a.send_cq,
                    recv_cq: a.recv_cq,
                    srq: a.srq.unwrap_or(SrqId(NO_ID)),
                    sq_depth: a.sq_depth,
                    rq_depth: a.rq_depth,
                    sq,
                    rq,
                };
                (Reply::Id(qp), vec![c])
            }
            Request::ModifyQp { qp, state } => {
                r.modify_qp(app, qp.0, state)?;
                (Reply::Done, vec![Command::ModifyQp { qp, state }])
            }
            Request::QueryQp { qp } => (
                Reply::Qp {
                    state: r.qp(app, qp.0)?.state,
                },
                vec![],
            ),
            Request::RegMr {
                pd,
                access,
                segment,
                offset,
                len,
            } => {
                // Only a segment this application passed and control verified can be
                // registered: the daemon could not map anything else, and never copies instead.
                let seg = self
                    .segments
                    .get(&(app, segment))
                    .ok_or(Error::InvalidRegion {
                        offset,
                        len,
                        segment_len: 0,
                    })?
                    .clone();
                let stag = r.reg_mr(app, pd.0, access, segment, seg.data_len, offset, len)?;
                if let Some(va) = va {
                    r.set_mr_va(stag, va);
                }
                let c = Command::RegisterMr {
                    stag,
                    pd,
                    access,
                    zero_based: va.is_none(),
                    offset,
                    len,
                    va: va.unwrap_or(0),
                    segment: seg.path,
                };
                (Reply::Id(stag.0), vec![c])
            }
            Request::RegMrVa { .. } => unreachable!("rewritten as RegMr above"),
            Request::AllocMw { pd } => {
                let stag = r.alloc_mw(app, pd.0)?;
                (Reply::Id(stag.0), vec![Command::AllocMw { stag, pd }])
            }
            Request::DeallocMw { stag } => {
                r.dealloc_mw(app, stag)?;
                (Reply::Done, vec![Command::DeallocMw { stag }])
            }
            Request::AllocStag { pd } => {
                let stag = r.alloc_fastreg(app, pd.0)?;
                (
                    Reply::Id(stag.0),
                    vec![Command::AllocFastRegStag { stag, pd }],
                )
            }
            Request::DeallocStag { stag } => {
                r.dealloc_fastreg(app, stag)?;
                (Reply::Done, vec![Command::DeregisterMr { stag }])
            }
            // The daemon decides these (see `serve`).
            Request::ModifyCq { .. }
            | Request::DeregMr { .. }
            | Request::ReregMr { .. }
            | Request::DestroyQp { .. } => {
                return Err(Error::Protocol {
                    what: "request needs the daemon's answer first (Core::serve)",
                })
            }
            // Need IO (open, map, check the creator) or the connection manager: the process
            // layer answers these.
            Request::AttachSegment { .. }
            | Request::Placement
            | Request::Listen { .. }
            | Request::Unlisten { .. }
            | Request::Connect { .. }
            | Request::Accept { .. }
            | Request::Reject { .. }
            | Request::Disconnect { .. } => {
                return Err(Error::Protocol {
                    what: "request is answered by the process layer",
                })
            }
        })
    }

    /// Handles one request of `app`, running its daemon commands in order through `daemon`
    /// (which returns iwarpd's reply status), and returns the reply. Requests iwarpd may
    /// refuse for a reason only it knows (a region that windows still point into, a QP that
    /// windows are bound on, a CQ holding more completions than its new size) change control's tables only once
    /// iwarpd agreed, so a refusal leaves both sides as they were.
    pub fn serve(
        &mut self,
        app: AppId,
        req: Request,
        mut daemon: impl FnMut(&Command) -> u32,
    ) -> Reply {
        if matches!(
            req,
            Request::DeregMr { .. }
                | Request::ReregMr { .. }
                | Request::ModifyCq { .. }
                | Request::DestroyQp { .. }
        ) {
            return self
                .decided_by_daemon(app, req, &mut daemon)
                .unwrap_or_else(Reply::Failed);
        }
        let (reply, cmds) = self.handle(app, req);
        for c in &cmds {
            daemon(c);
        }
        reply
    }

    fn decided_by_daemon(
        &mut self,
        app: AppId,
        req: Request,
        daemon: &mut impl FnMut(&Command) -> u32,
    ) -> Result<Reply, Error> {
        let r = &mut self.res;
        match req {
            Request::DeregMr { stag } => {
                r.mr(app, stag)?;
                refused(
                    daemon(&Command::DeregisterMr { stag }),
                    Resource::Mr,
                    stag.0,
                )?;
                r.dereg_mr(app, stag)?;
                Ok(Reply::Done)
            }
            Request::ReregMr { stag, access } => {
                check_access(access)?;
                let old = r.mr(app, stag)?.clone();
                let seg = self
                    .segments
                    .get(&(app, old.segment))
                    .map(|s| s.path)
                    .ok_or(Error::InvalidStag { stag: stag.0 })?;
                // The old registration goes first: iwarpd refuses while windows point
                // into it, and then nothing changed.
                refused(
                    daemon(&Command::DeregisterMr { stag }),
                    Resource::Mr,
                    stag.0,
                )?;
                let new = r.rereg_mr(app, stag, access)?;
                let status = daemon(&Command::RegisterMr {
                    stag: new,
                    pd: PdId(old.pd),
                    access,
                    zero_based: old.va.is_none(),
                    offset: old.offset,
                    len: old.len,
                    va: old.va.unwrap_or(0),
                    segment: seg,
                });
                if let Err(e) = refused(status, Resource::Mr, new.0) {
                    // The region is gone in iwarpd: forget it here too.
                    let _ = r.dereg_mr(app, new);
                    return Err(e);
                }
                Ok(Reply::Id(new.0))
            }
            Request::DestroyQp { qp } => {
                r.qp(app, qp.0)?;
                refused(daemon(&Command::DestroyQp { qp }), Resource::Qp, qp.0)?;
                r.destroy_qp(app, qp.0)?;
                Ok(Reply::Done)
            }
            Request::ModifyCq { cq, depth, ring } => {
                r.check_cq_resize(app, cq.0, depth)?;
                let status = daemon(&Command::ResizeCq { cq, depth, ring });
                refused(status, Resource::Cq, cq.0)?;
                r.resize_cq(app, cq.0, depth)?;
                Ok(Reply::Cq { depth })
            }
            _ => Err(Error::Protocol {
                what: "request is answered without asking iwarpd first",
            }),
        }
    }

    /// Checks that `qp` is one of `app`'s QPs (before connecting or accepting on it).
    pub fn check_qp(&self, app: AppId, qp: QpId) -> Result<(), Error> {
        self.res.qp(app, qp.0).map(|_| ())
    }

    /// Records that connection setup moved `qp` to RTS (or teardown to Error).
    pub fn set_qp_state(&mut self, qp: u32, s: QpState) {
        self.res.set_qp_state(qp, s);
    }

    /// The application's socket reached EOF (exit or crash): everything it owned goes, and
    /// the returned commands flush and destroy it in the daemon.
    pub fn app_gone(&mut self, app: AppId) -> Vec<Command> {
        self.segments.retain(|(a, _), _| *a != app);
        teardown_commands(&self.res.cleanup_app(app))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::access;
    use iwarp_abi::app::QpAttrs;
    use iwarp_abi::id::Stag;
    use std::path::Path;

    fn path(s: &str) -> ShmPath {
        ShmPath::new(Path::new(s)).unwrap()
    }

    fn id(r: (Reply, Vec<Command>)) -> (u32, Vec<Command>) {
        match r {
            (Reply::Id(i), c) => (i, c),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_vertical_slice_becomes_the_right_daemon_commands() {
        let mut c = Core::new(Limits::default());
        let (pd, cmds) = id(c.handle(1, Request::AllocPd));
        let pd = PdId(pd);
        assert_eq!(cmds, vec![Command::AllocPd { pd }]);
        let (cq, _) = id(c.handle(
            1,
            Request::CreateCq {
                depth: 64,
                ring: path("/dev/shm/iw-1-cq1"),
            },
        ));
        let cq = CqId(cq);
        let attrs = QpAttrs {
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            sq_depth: 32,
            rq_depth: 32,
            max_sge: 1,
            max_inline: 0,
            ird: 8,
            ord: 8,
        };
        let (qp, cmds) = id(c.handle(
            1,
            Request::CreateQp {
                attrs,
                sq: path("/dev/shm/iw-1-sq1"),
                rq: path("/dev/shm/iw-1-rq1"),
            },
        ));
        let qp = QpId(qp);
        assert!(
            matches!(cmds[0], Command::CreateQp { qp: q, srq: iwarp_abi::command::NO_SRQ, .. } if q == qp)
        );
        let seg = c.add_segment(
            1,
            VerifiedSegment {
                path: path("/dev/shm/iw-1-buf"),
                data_len: 1 << 20,
            },
        );
        let req = Request::RegMr {
            pd,
            access: access::LOCAL_WRITE | access::REMOTE_WRITE,
            segment: seg,
            offset: 0,
            len: 4096,
        };
        let (stag, cmds) = id(c.handle(1, req.clone()));
        let stag = Stag(stag);
        assert!(
            matches!(cmds[0], Command::RegisterMr { stag: s, len: 4096, zero_based: true, va: 0, .. } if s == stag)
        );
        // VA-based (Verbs section 7.2.3): the daemon is told the first octet's tagged offset.
        let va = Request::RegMrVa {
            pd,
            access: access::LOCAL_WRITE,
            segment: seg,
            offset: 0x10,
            len: 100,
            va: 0x7f00_0000_0010,
        };
        let (_, cmds) = id(c.handle(1, va));
        assert!(matches!(
            cmds[0],
            Command::RegisterMr {
                zero_based: false,
                va: 0x7f00_0000_0010,
                offset: 0x10,
                len: 100,
                ..
            }
        ));
        // Another application can neither register this segment nor use this PD.
        assert!(matches!(c.handle(2, req), (Reply::Failed(_), cmds) if cmds.is_empty()));
        assert_eq!(
            c.handle(1, Request::QueryQp { qp }).0,
            Reply::Qp {
                state: QpState::Idle
            }
        );
        // The app dies: its QP is flushed first, then everything destroyed.
        let cmds = c.app_gone(1);
        assert_eq!(
            cmds[0],
            Command::ModifyQp {
                qp,
                state: QpState::Error
            }
        );
        assert_eq!(cmds.last(), Some(&Command::DeallocPd { pd }));
        assert_eq!(c.resources().counts(), (0, 0, 0, 0, 0));
    }

    /// Verbs section 7.4.2 (figure 18): "The RI MUST NOT allow the Consumer to assign
    /// Remote Write to an MR that has not been assigned Local Write"; Reregister (9.2.6.5)
    /// is held to it as Register is, with "Invalid Access Rights requested", before iwarpd
    /// is asked anything. A VA-based region stays VA-based through Reregister.
    #[test]
    fn reregister_checks_the_rights_and_keeps_the_va() {
        let mut c = Core::new(Limits::default());
        let (pd, _) = id(c.handle(1, Request::AllocPd));
        let pd = PdId(pd);
        let seg = c.add_segment(
            1,
            VerifiedSegment {
                path: path("/dev/shm/iw-1-buf"),
                data_len: 4096,
            },
        );
        for access in [access::REMOTE_WRITE, access::REMOTE_ATOMIC] {
            let reg = Request::RegMr {
                pd,
                access,
                segment: seg,
                offset: 0,
                len: 4096,
            };
            assert!(matches!(
                c.handle(1, reg),
                (Reply::Failed(Error::InvalidAccess { .. }), cmds) if cmds.is_empty()
            ));
        }
        let reg = Request::RegMrVa {
            pd,
            access: access::LOCAL_WRITE,
            segment: seg,
            offset: 0,
            len: 4096,
            va: 0x4000_0000,
        };
        let (stag, _) = id(c.handle(1, reg));
        let stag = Stag(stag);
        let mut sent = Vec::new();
        let mut ok = |cmd: &Command| {
            sent.push(*cmd);
            reply_status::OK
        };
        for access in [
            access::REMOTE_WRITE,
            access::REMOTE_ATOMIC | access::REMOTE_READ,
        ] {
            let reply = c.serve(1, Request::ReregMr { stag, access }, &mut ok);
            assert!(
                matches!(reply, Reply::Failed(Error::InvalidAccess { .. })),
                "{reply:?}"
            );
        }
        let access = access::LOCAL_WRITE | access::REMOTE_WRITE | access::BIND;
        let Reply::Id(new) = c.serve(1, Request::ReregMr { stag, access }, &mut ok) else {
            panic!("Reregister refused")
        };
        assert_eq!(sent.len(), 2, "only the valid Reregister reached iwarpd");
        assert!(matches!(
            sent[1],
            Command::RegisterMr { stag: s, zero_based: false, va: 0x4000_0000, .. } if s == Stag(new)
        ));
    }

    #[test]
    fn what_iwarpd_refuses_changes_nothing_in_control() {
        let mut c = Core::new(Limits::default());
        let (pd, _) = id(c.handle(1, Request::AllocPd));
        let pd = PdId(pd);
        let seg = c.add_segment(
            1,
            VerifiedSegment {
                path: path("/dev/shm/iw-1-buf"),
                data_len: 4096,
            },
        );
        let reg = Request::RegMr {
            pd,
            access: access::LOCAL_WRITE | access::BIND,
            segment: seg,
            offset: 0,
            len: 4096,
        };
        let (stag, _) = id(c.handle(1, reg));
        let stag = Stag(stag);
        // A window is bound into the region: iwarpd says IN_USE, the region stays.
        let mut sent = Vec::new();
        let mut busy = |cmd: &Command| {
            sent.push(*cmd);
            reply_status::IN_USE
        };
        let reply = c.serve(1, Request::DeregMr { stag }, &mut busy);
        assert!(
            matches!(reply, Reply::Failed(Error::Refused { what: Resource::Mr, id, .. }) if id == stag.0),
            "{reply:?}"
        );
        let reply = c.serve(
            1,
            Request::ReregMr {
                stag,
                access: access::LOCAL_WRITE,
            },
            &mut busy,
        );
        assert!(matches!(reply, Reply::Failed(Error::Refused { .. })));
        assert_eq!(sent, vec![Command::DeregisterMr { stag }; 2]);
        assert!(c.resources().mr(1, stag).is_ok(), "still registered");
        // Once iwarpd agrees, re-registration gives a new key and deregistration works.
        let mut ok = |_: &Command| reply_status::OK;
        let Reply::Id(new) = c.serve(
            1,
            Request::ReregMr {
                stag,
                access: access::LOCAL_WRITE,
            },
            &mut ok,
        ) else {
            panic!()
        };
        let new = Stag(new);
        assert_ne!(new, stag);
        assert_eq!(
            c.serve(1, Request::DeregMr { stag: new }, &mut ok),
            Reply::Done
        );
        assert_eq!(c.resources().counts().4, 0);

        // A CQ with more completions present than the new size: its size stays.
        let (cq, _) = id(c.handle(
            1,
            Request::CreateCq {
                depth: 64,
                ring: path("/dev/shm/iw-1-cq1"),
            },
        ));
        let cq = CqId(cq);
        let resize = |depth| Request::ModifyCq {
            cq,
            depth,
            ring: path("/dev/shm/iw-1-cq2"),
        };
        let reply = c.serve(1, resize(8), |_| reply_status::IN_USE);
        assert!(matches!(
            reply,
            Reply::Failed(Error::Refused {
                what: Resource::Cq,
                ..
            })
        ));
        assert_eq!(
            c.handle(1, Request::QueryCq { cq }).0,
            Reply::Cq { depth: 64 }
        );
        assert_eq!(c.serve(1, resize(256), &mut ok), Reply::Cq { depth: 256 });
        assert_eq!(
            c.handle(1, Request::QueryCq { cq }).0,
            Reply::Cq { depth: 256 }
        );
        // Past the RNIC's limit, or another application's CQ: refused before iwarpd.
        let too_big = c.serve(1, resize(u32::MAX), |_| panic!("asked iwarpd"));
        assert!(matches!(
            too_big,
            Reply::Failed(Error::InvalidAttribute { .. })
        ));
        let theirs = c.serve(2, resize(128), |_| panic!("asked iwarpd"));
        assert!(matches!(theirs, Reply::Failed(Error::InvalidHandle { .. })));

        // Verbs section 6.1.4: a QP with windows bound on it is not destroyed; iwarpd says
        // IN_USE, the application hears why, and the QP stays in both tables.
        let attrs = QpAttrs {
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            sq_depth: 8,
            rq_depth: 8,
            max_sge: 1,
            max_inline: 0,
            ird: 1,
            ord: 1,
        };
        let (qp, _) = id(c.handle(
            1,
            Request::CreateQp {
                attrs,
                sq: path("/dev/shm/iw-1-sq1"),
                rq: path("/dev/shm/iw-1-rq1"),
            },
        ));
        let qp = QpId(qp);
        let mut sent = Vec::new();
        let reply = c.serve(1, Request::DestroyQp { qp }, |cmd: &Command| {
            sent.push(*cmd);
            reply_status::IN_USE
        });
        assert!(
            matches!(reply, Reply::Failed(Error::Refused { what: Resource::Qp, id, .. }) if id == qp.0),
            "{reply:?}"
        );
        assert_eq!(sent, [Command::DestroyQp { qp }]);
        assert_eq!(
            c.handle(1, Request::QueryQp { qp }).0,
            Reply::Qp {
                state: QpState::Idle
            }
        );
        let theirs = c.serve(2, Request::DestroyQp { qp }, |_| panic!("asked iwarpd"));
        assert!(matches!(theirs, Reply::Failed(Error::InvalidHandle { .. })));
        assert_eq!(c.serve(1, Request::DestroyQp { qp }, &mut ok), Reply::Done);
        assert!(matches!(
            c.handle(1, Request::QueryQp { qp }).0,
            Reply::Failed(Error::InvalidHandle { .. })
        ));
    }

    #[test]
    fn srq_limits_and_fast_register_stags() {
        let mut c = Core::new(Limits::default());
        let (pd, _) = id(c.handle(1, Request::AllocPd));
        let pd = PdId(pd);
        let (srq, _) = id(c.handle(
            1,
            Request::CreateSrq {
                pd,
                depth: 16,
                ring: path("/dev/shm/iw-1-srq1"),
            },
        ));
        let srq = SrqId(srq);
        let (reply, cmds) = c.handle(1, Request::ModifySrq { srq, limit: 4 });
        assert_eq!(reply, Reply::Done);
        assert_eq!(cmds, vec![Command::ArmSrq { srq, limit: 4 }]);
        assert_eq!(
            c.handle(1, Request::QuerySrq { srq }).0,
            Reply::Srq {
                depth: 16,
                limit: 4
            }
        );
        let (reply, cmds) = c.handle(1, Request::ModifySrq { srq, limit: 17 });
        assert!(matches!(
            reply,
            Reply::Failed(Error::InvalidAttribute { max: 16, .. })
        ));
        assert!(cmds.is_empty());
        let (stag, cmds) = id(c.handle(1, Request::AllocStag { pd }));
        let stag = Stag(stag);
        assert_eq!(cmds, vec![Command::AllocFastRegStag { stag, pd }]);
        // Not a region: Deregister MR and Deallocate MW do not take it.
        assert!(matches!(
            c.handle(1, Request::DeallocMw { stag }).0,
            Reply::Failed(_)
        ));
        assert!(matches!(
            c.handle(2, Request::DeallocStag { stag }).0,
            Reply::Failed(_)
        ));
        let (reply, cmds) = c.handle(1, Request::DeallocStag { stag });
        assert_eq!(reply, Reply::Done);
        assert_eq!(cmds, vec![Command::DeregisterMr { stag }]);
        assert_eq!(c.resources().counts().4, 0);
    }

    #[test]
    fn unverified_memory_and_bad_requests_fail_with_a_reason_and_no_command() {
        let mut c = Core::new(Limits::default());
        let (pd, _) = id(c.handle(1, Request::AllocPd));
        let pd = PdId(pd);
        let (reply, cmds) = c.handle(
            1,
            Request::RegMr {
                pd,
                access: 0,
                segment: 99,
                offset: 0,
                len: 8,
            },
        );
        assert!(matches!(reply, Reply::Failed(Error::InvalidRegion { .. })));
        assert!(cmds.is_empty());
        let mut asked = false;
        let reply = c.serve(1, Request::DestroyQp { qp: QpId(1) }, |_| {
            asked = true;
            reply_status::OK
        });
        assert!(matches!(reply, Reply::Failed(Error::InvalidHandle { .. })));
        assert!(!asked, "an unknown QP is refused without asking iwarpd");
        let Reply::Rnic(l) = c.handle(1, Request::QueryRnic).0 else {
            panic!()
        };
        assert_eq!(l.max_ird, Limits::default().max_ird);
        assert_eq!(ring_name(42, RingKind::Cq, 7), "iw-42-cq7");
    }
}
