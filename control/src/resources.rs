//! The resource tables of one RNIC: PDs, CQs, S-RQs, QPs, MRs and MWs of every application.
//!
//! Every verb is checked here before anything is sent to the daemon: the caller owns each
//! handle it names (another application's resources are invisible), the handles agree on the
//! protection domain (Verbs section 5.3), sizes are within the limits Query RNIC reports
//! (Verbs section 8.1, `[limits]` of the configuration), and nothing is destroyed while
//! something else still uses it. When an application goes away, [`Resources::cleanup_app`]
//! removes all it owned and says, in destroy order, what the daemon must tear down.

use crate::error::{Error, Resource};
use crate::stag::{Stag, StagEntry, StagKind, StagTable};
use iwarp_abi::app::QpAttrs;
use iwarp_abi::id::SrqId;
use iwarp_abi::qp::QpState;
use iwarp_config::Limits;
use std::collections::BTreeMap;

/// Control's id for an application connection.
pub type AppId = u32;

/// Access rights of a memory region or window (Verbs section 7.2.3): the ABI's bits, the
/// same the engine checks.
pub use iwarp_abi::wqe::access;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pd {
    pub app: AppId,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cq {
    pub app: AppId,
    pub depth: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Srq {
    pub app: AppId,
    pub pd: u32,
    pub depth: u32,
    /// The S-RQ limit last set by Modify S-RQ.
    pub limit: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Qp {
    pub app: AppId,
    pub attrs: QpAttrs,
    pub state: QpState,
}

/// A registered region: a window into a shared segment the application allocated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mr {
    pub app: AppId,
    pub pd: u32,
    pub access: u32,
    /// Segment id (control's handle for the application's shared buffer).
    pub segment: u32,
    pub offset: u64,
    pub len: u64,
    /// The tagged offset of its first octet when VA-based, `None` when zero-based: a
    /// re-registration keeps it, as the application's handle does.
    pub va: Option<u64>,
}

/// What the daemon must tear down for an application that went away, in destroy order:
/// QPs (flushed, connections closed) first, then STags, S-RQs, CQs, PDs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Teardown {
    pub qps: Vec<u32>,
    pub stags: Vec<(Stag, StagKind)>,
    pub srqs: Vec<u32>,
    pub cqs: Vec<u32>,
    pub pds: Vec<u32>,
}

struct Table<T> {
    what: Resource,
    limit: u32,
    next: u32,
    items: BTreeMap<u32, T>,
}

impl<T> Table<T> {
    fn new(what: Resource, limit: u32) -> Table<T> {
        Table {
            what,
            limit,
            next: 1,
            items: BTreeMap::new(),
        }
    }
    fn insert(&mut self, item: T) -> Result<u32, Error> {
        if self.items.len() as u64 >= self.limit as u64 {
            return Err(Error::InsufficientResources {
                what: self.what,
                limit: self.limit,
            });
        }
        // Ids are not reused soon (they count up), so a stale handle finds nothing.
        while self.next == 0 || self.items.contains_key(&self.next) {
            self.next = self.next.wrapping_add(1);
        }
        let id = self.next;
        self.next = self.next.wrapping_add(1);
        self.items.insert(id, item);
        Ok(id)
    }
    fn owned(&self, id: u32, app: AppId, owner: impl Fn(&T) -> AppId) -> Result<&T, Error> {
        match self.items.get(&id) {
            Some(t) if owner(t) == app => Ok(t),
            _ => Err(Error::InvalidHandle {
                what: self.what,
                id,
            }),
        }
    }
}

fn check_range(name: &'static str, value: u64, max: u64) -> Result<(), Error> {
    if value == 0 || value > max {
        return Err(Error::InvalidAttribute { name, value, max });
    }
    Ok(())
}

/// All resources of one RNIC.
pub struct Resources {
    limits: Limits,
    pds: Table<Pd>,
    cqs: Table<Cq>,
    srqs: Table<Srq>,
    qps: Table<Qp>,
    mrs: BTreeMap<Stag, Mr>,
    stags: StagTable,
}

impl Resources {
    pub fn new(limits: Limits) -> Resources {
        Resources {
            pds: Table::new(Resource::Pd, limits.max_pd),
            cqs: Table::new(Resource::Cq, limits.max_cq),
            srqs: Table::new(Resource::Srq, limits.max_srq),
            qps: Table::new(Resource::Qp, limits.max_qp),
            mrs: BTreeMap::new(),
            stags: StagTable::new(limits.max_mr.saturating_add(limits.max_mw)),
            limits,
        }
    }

    /// The Query RNIC answers (Verbs section 8.1).
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The application owning QP `qp`, CQ `cq` or S-RQ `srq` (to route asynchronous
    /// events).
    pub fn qp_owner(&self, qp: u32) -> Option<AppId> {
        self.qps.items.get(&qp).map(|q| q.app)
    }
    pub fn cq_owner(&self, cq: u32) -> Option<AppId> {
        self.cqs.items.get(&cq).map(|c| c.app)
    }
    pub fn srq_owner(&self, srq: u32) -> Option<AppId> {
        self.srqs.items.get(&srq).map(|s| s.app)
    }

    pub fn alloc_pd(&mut self, app: AppId) -> Result<u32, Error> {
        self.pds.insert(Pd { app })
    }

    pub fn dealloc_pd(&mut self, app: AppId, pd: u32) -> Result<(), Error> {
        self.pds.owned(pd, app, |p| p.app)?;
        let users = self
            .qps
            .items
            .values()
            .filter(|q| q.attrs.pd.0 == pd)
            .count()
            + self.srqs.items.values().filter(|s| s.pd == pd).count()
            + self.mrs.values().filter(|m| m.pd == pd).count();
        if users > 0 {
            return Err(Error::InUse {
                what: Resource::Pd,
                id: pd,
                users: users as u32,
            });
        }
        self.pds.items.remove(&pd);
        Ok(())
    }

    pub fn create_cq(&mut self, app: AppId, depth: u32) -> Result<u32, Error> {
        check_range("cq depth", depth as u64, self.limits.max_cqe as u64)?;
        self.cqs.insert(Cq { app, depth })
    }

    pub fn cq(&self, app: AppId, cq: u32) -> Result<&Cq, Error> {
        self.cqs.owned(cq, app, |c| c.app)
    }

    /// Whether `app` may resize `cq` to `depth` (ownership, the `max_cqe` limit); whether the
    /// completions present fit is iwarpd's to say.
    pub fn check_cq_resize(&self, app: AppId, cq: u32, depth: u32) -> Result<(), Error> {
        self.cq(app, cq)?;
        check_range("cq depth", depth as u64, self.limits.max_cqe as u64)
    }

    /// Records the size iwarpd accepted.
    pub fn resize_cq(&mut self, app: AppId, cq: u32, depth: u32) -> Result<(), Error> {
        self.check_cq_resize(app, cq, depth)?;
        if let Some(c) = self.cqs.items.get_mut(&cq) {
            c.depth = depth;
        }
        Ok(())
    }

    pub fn srq(&self, app: AppId, srq: u32) -> Result<&Srq, Error> {
        self.srqs.owned(srq, app, |s| s.app)
    }

    /// Modify S-RQ: the limit must lie within the S-RQ's depth (Verbs section 6.3.8).
    pub fn set_srq_limit(&mut self, app: AppId, srq: u32, limit: u32) -> Result<(), Error> {
        let depth = self.srq(app, srq)?.depth;
        if limit > depth {
            return Err(Error::InvalidAttribute {
                name: "srq limit",
                value: limit as u64,
                max: depth as u64,
            });
        }
        if let Some(s) = self.srqs.items.get_mut(&srq) {
            s.limit = limit;
        }
        Ok(())
    }

    pub fn destroy_cq(&mut self, app: AppId, cq: u32) -> Result<(), Error> {
        self.cqs.owned(cq, app, |c| c.app)?;
        let users = self
            .qps
            .items
            .values()
            .filter(|q| q.attrs.send_cq.0 == cq || q.attrs.recv_cq.0 == cq)
            .count();
        if users > 0 {
            return Err(Error::InUse {
                what: Resource::Cq,
                id: cq,
                users: users as u32,
            });
        }
        self.cqs.items.remove(&cq);
        Ok(())
    }

    pub fn create_srq(&mut self, app: AppId, pd: u32, depth: u32) -> Result<u32, Error> {
        self.pds.owned(pd, app, |p| p.app)?;
        check_range("srq depth", depth as u64, self.limits.max_rq_depth as u64)?;
        self.srqs.insert(Srq {
            app,
            pd,
            depth,
            limit: 0,
        })
    }

    pub fn destroy_srq(&mut self, app: AppId, srq: u32) -> Result<(), Error> {
        self.srqs.owned(srq, app, |s| s.app)?;
        let users = self
            .qps
            .items
            .values()
            .filter(|q| q.attrs.srq == Some(SrqId(srq)))
            .count();
        if users > 0 {
            return Err(Error::InUse {
                what: Resource::Srq,
                id: srq,
                users: users as u32,
            });
        }
        self.srqs.items.remove(&srq);
        Ok(())
    }

    /// Create QP (Verbs section 7.3.1): every handle owned by `app`, the S-RQ in the QP's PD,
    /// sizes within the limits. The QP starts in Idle.
    pub fn create_qp(&mut self, app: AppId, attrs: QpAttrs) -> Result<u32, Error> {
        let l = &self.limits;
        self.pds.owned(attrs.pd.0, app, |p| p.app)?;
        self.cqs.owned(attrs.send_cq.0, app, |c| c.app)?;
        self.cqs.owned(attrs.recv_cq.0, app, |c| c.app)?;
        if let Some(srq) = attrs.srq {
            let s = self.srqs.owned(srq.0, app, |s| s.app)?;
            if s.pd != attrs.pd.0 {
                return Err(Error::PdMismatch {
                    expected: attrs.pd.0,
                    found: s.pd,
                });
            }
        } else {
            check_range("rq depth", attrs.rq_depth as u64, l.max_rq_depth as u64)?;
        }
        check_range("sq depth", attrs.sq_depth as u64, l.max_sq_depth as u64)?;
        check_range("max sge", attrs.max_sge as u64, l.max_sge as u64)?;
        if attrs.max_inline > l.max_inline {
            return Err(Error::InvalidAttribute {
                name: "max inline",
                value: attrs.max_inline as u64,
                max: l.max_inline as u64,
            });
        }
        // IRD/ORD of 0 are legal (RFC 6581: a side that accepts no Reads says IRD 0).
        if attrs.ird > l.max_ird || attrs.ord > l.max_ord {
            return Err(Error::InvalidAttribute {
                name: if attrs.ird > l.max_ird { "ird" } else { "ord" },
                value: attrs.ird.max(attrs.ord) as u64,
                max: if attrs.ird > l.max_ird {
                    l.max_ird
                } else {
                    l.max_ord
                } as u64,
            });
        }
        self.qps.insert(Qp {
            app,
            attrs,
            state: QpState::Idle,
        })
    }

    pub fn qp(&self, app: AppId, qp: u32) -> Result<&Qp, Error> {
        self.qps.owned(qp, app, |q| q.app)
    }

    /// Modify QP's state change, as the application asks for it.
    pub fn modify_qp(&mut self, app: AppId, qp: u32, to: QpState) -> Result<QpState, Error> {
        let from = self.qp(app, qp)?.state;
        if !from.modify_allowed(to) {
            return Err(Error::InvalidModify {
                from: from.name(),
                to: to.name(),
            });
        }
        self.set_qp_state(qp, to);
        Ok(from)
    }

    /// Records a state the connection manager or the daemon moved the QP to.
    pub fn set_qp_state(&mut self, qp: u32, to: QpState) {
        if let Some(q) = self.qps.items.get_mut(&qp) {
            q.state = to;
        }
    }

    pub fn destroy_qp(&mut self, app: AppId, qp: u32) -> Result<Qp, Error> {
        self.qp(app, qp)?;
        Ok(self.qps.items.remove(&qp).expect("checked above"))
    }

    /// Register Memory Region (Verbs section 7.2.3) over `len` octets at `offset` of a
    /// segment of `segment_len` octets that `app` allocated.
    #[allow(clippy::too_many_arguments)]
    pub fn reg_mr(
        &mut self,
        app: AppId,
        pd: u32,
        access: u32,
        segment: u32,
        segment_len: u64,
        offset: u64,
        len: u64,
    ) -> Result<Stag, Error> {
        self.pds.owned(pd, app, |p| p.app)?;
        check_access(access)?;
        if len == 0 || offset.checked_add(len).is_none_or(|end| end > segment_len) {
            return Err(Error::InvalidRegion {
                offset,
                len,
                segment_len,
            });
        }
        if self.mrs.len() as u32 >= self.limits.max_mr {
            return Err(Error::InsufficientResources {
                what: Resource::Mr,
                limit: self.limits.max_mr,
            });
        }
        let stag = self.stags.alloc(StagEntry {
            kind: StagKind::Mr,
            pd,
            app,
        })?;
        self.mrs.insert(
            stag,
            Mr {
                app,
                pd,
                access,
                segment,
                offset,
                len,
                va: None,
            },
        );
        Ok(stag)
    }

    /// Makes a region registered by [`Resources::reg_mr`] VA-based, its first octet at `va`.
    pub fn set_mr_va(&mut self, stag: Stag, va: u64) {
        if let Some(mr) = self.mrs.get_mut(&stag) {
            mr.va = Some(va);
        }
    }

    pub fn mr(&self, app: AppId, stag: Stag) -> Result<&Mr, Error> {
        self.stags.check(stag, StagKind::Mr, app)?;
        self.mrs
            .get(&stag)
            .ok_or(Error::InvalidStag { stag: stag.0 })
    }

    /// Re-register (Verbs section 7.2.5): new access rights; the region keeps its index and
    /// gets a new key, so the old STag stops working at the peer.
    pub fn rereg_mr(&mut self, app: AppId, stag: Stag, access: u32) -> Result<Stag, Error> {
        check_access(access)?;
        let mut mr = self.mr(app, stag)?.clone();
        let new = self.stags.rekey(stag)?;
        mr.access = access;
        self.mrs.remove(&stag);
        self.mrs.insert(new, mr);
        Ok(new)
    }

    /// Deregister (Verbs section 7.2.6). Whether windows still point into the region only
    /// iwarpd knows (they are bound by work requests): it is asked first (`Core::serve`).
    pub fn dereg_mr(&mut self, app: AppId, stag: Stag) -> Result<Mr, Error> {
        self.mr(app, stag)?;
        self.stags.free(stag)?;
        Ok(self.mrs.remove(&stag).expect("checked above"))
    }

    pub fn alloc_mw(&mut self, app: AppId, pd: u32) -> Result<Stag, Error> {
        self.pds.owned(pd, app, |p| p.app)?;
        let mws = self.stags.live_of(StagKind::Mw);
        if mws >= self.limits.max_mw {
            return Err(Error::InsufficientResources {
                what: Resource::Mw,
                limit: self.limits.max_mw,
            });
        }
        self.stags.alloc(StagEntry {
            kind: StagKind::Mw,
            pd,
            app,
        })
    }

    pub fn dealloc_mw(&mut self, app: AppId, stag: Stag) -> Result<(), Error> {
        self.stags.check(stag, StagKind::Mw, app)?;
        self.stags.free(stag)?;
        Ok(())
    }

    /// Allocate Non-Shared Memory Region STag (Verbs section 9.2.6.1), for Fast-Register work
    /// requests; counted with the regions against `max_mr`.
    pub fn alloc_fastreg(&mut self, app: AppId, pd: u32) -> Result<Stag, Error> {
        self.pds.owned(pd, app, |p| p.app)?;
        if self.mrs.len() as u32 + self.stags.live_of(StagKind::FastReg) >= self.limits.max_mr {
            return Err(Error::InsufficientResources {
                what: Resource::Mr,
                limit: self.limits.max_mr,
            });
        }
        let stag = self.stags.alloc(StagEntry {
            kind: StagKind::FastReg,
            pd,
            app,
        })?;
        Ok(stag)
    }

    /// Deallocate STag (Verbs section 9.2.6.4) of a fast-register STag.
    pub fn dealloc_fastreg(&mut self, app: AppId, stag: Stag) -> Result<(), Error> {
        self.stags.check(stag, StagKind::FastReg, app)?;
        self.stags.free(stag)?;
        Ok(())
    }

    /// Removes everything `app` owned; returns what the daemon must destroy, in order.
    pub fn cleanup_app(&mut self, app: AppId) -> Teardown {
        let mut t = Teardown {
            qps: ids_of(&self.qps, |q| q.app == app),
            ..Teardown::default()
        };
        for q in &t.qps {
            self.qps.items.remove(q);
        }
        for (stag, e) in self.stags.owned_by(app) {
            let _ = self.stags.free(stag);
            self.mrs.remove(&stag);
            t.stags.push((stag, e.kind));
        }
        // Windows and fast-register STags before the regions they may point into (iwarpd
        // refuses a region with valid ones).
        t.stags.sort_by_key(|&(_, kind)| kind == StagKind::Mr);
        t.srqs = ids_of(&self.srqs, |s| s.app == app);
        for s in &t.srqs {
            self.srqs.items.remove(s);
        }
        t.cqs = ids_of(&self.cqs, |c| c.app == app);
        for c in &t.cqs {
            self.cqs.items.remove(c);
        }
        t.pds = ids_of(&self.pds, |p| p.app == app);
        for p in &t.pds {
            self.pds.items.remove(p);
        }
        t
    }

    /// How many resources of each kind exist now: (pds, cqs, srqs, qps, stags).
    pub fn counts(&self) -> (usize, usize, usize, usize, u32) {
        (
            self.pds.items.len(),
            self.cqs.items.len(),
            self.srqs.items.len(),
            self.qps.items.len(),
            self.stags.live(),
        )
    }
}

fn ids_of<T>(t: &Table<T>, pred: impl Fn(&T) -> bool) -> Vec<u32> {
    t.items
        .iter()
        .filter(|(_, v)| pred(v))
        .map(|(k, _)| *k)
        .collect()
}

/// Verbs section 7.2.3: remote write and remote atomic access need local write.
pub(crate) fn check_access(a: u32) -> Result<(), Error> {
    let needs_local = access::REMOTE_WRITE | access::REMOTE_ATOMIC;
    if a & !access::ALL != 0 || (a & needs_local != 0 && a & access::LOCAL_WRITE == 0) {
        return Err(Error::InvalidAccess { access: a });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use iwarp_abi::id::{CqId, PdId};

    fn small() -> Limits {
        Limits {
            max_qp: 2,
            max_cq: 4,
            max_pd: 3,
            max_mr: 2,
            max_mw: 1,
            ..Limits::default()
        }
    }

    fn attrs(pd: u32, cq: u32) -> QpAttrs {
        QpAttrs {
            pd: PdId(pd),
            send_cq: CqId(cq),
            recv_cq: CqId(cq),
            srq: None,
            sq_depth: 64,
            rq_depth: 64,
            max_sge: 2,
            max_inline: 32,
            ird: 4,
            ord: 4,
        }
    }

    #[test]
    fn limits_from_the_config_are_enforced() {
        let mut r = Resources::new(small());
        for _ in 0..3 {
            r.alloc_pd(1).unwrap();
        }
        assert_eq!(
            r.alloc_pd(1),
            Err(Error::InsufficientResources {
                what: Resource::Pd,
                limit: 3
            })
        );
        let cq = r.create_cq(1, 128).unwrap();
        assert!(matches!(
            r.create_cq(1, 65537),
            Err(Error::InvalidAttribute {
                name: "cq depth",
                ..
            })
        ));
        assert!(r.create_cq(1, 0).is_err());
        let mut a = attrs(1, cq);
        a.max_sge = 5;
        assert!(matches!(
            r.create_qp(1, a),
            Err(Error::InvalidAttribute {
                name: "max sge",
                ..
            })
        ));
        let mut a = attrs(1, cq);
        a.ord = 129;
        assert!(matches!(
            r.create_qp(1, a),
            Err(Error::InvalidAttribute { name: "ord", .. })
        ));
        r.create_qp(1, attrs(1, cq)).unwrap();
        r.create_qp(1, attrs(1, cq)).unwrap();
        assert!(matches!(
            r.create_qp(1, attrs(1, cq)),
            Err(Error::InsufficientResources { .. })
        ));
    }

    #[test]
    fn another_apps_handles_are_invisible() {
        let mut r = Resources::new(Limits::default());
        let pd = r.alloc_pd(1).unwrap();
        let cq = r.create_cq(1, 16).unwrap();
        let qp = r.create_qp(1, attrs(pd, cq)).unwrap();
        assert!(matches!(
            r.create_qp(2, attrs(pd, cq)),
            Err(Error::InvalidHandle {
                what: Resource::Pd,
                ..
            })
        ));
        assert!(r.qp(2, qp).is_err());
        assert!(r.destroy_qp(2, qp).is_err());
        let stag = r
            .reg_mr(1, pd, access::LOCAL_WRITE, 9, 4096, 0, 4096)
            .unwrap();
        assert!(r.dereg_mr(2, stag).is_err());
        assert!(r.reg_mr(2, pd, 0, 9, 4096, 0, 1).is_err());
    }

    #[test]
    fn destroy_order_is_enforced() {
        let mut r = Resources::new(Limits::default());
        let pd = r.alloc_pd(1).unwrap();
        let cq = r.create_cq(1, 16).unwrap();
        let srq = r.create_srq(1, pd, 16).unwrap();
        let mut a = attrs(pd, cq);
        a.srq = Some(SrqId(srq));
        let qp = r.create_qp(1, a).unwrap();
        assert!(matches!(r.dealloc_pd(1, pd), Err(Error::InUse { .. })));
        assert!(matches!(r.destroy_cq(1, cq), Err(Error::InUse { .. })));
        assert!(matches!(r.destroy_srq(1, srq), Err(Error::InUse { .. })));
        r.destroy_qp(1, qp).unwrap();
        r.destroy_cq(1, cq).unwrap();
        r.destroy_srq(1, srq).unwrap();
        r.dealloc_pd(1, pd).unwrap();
        assert_eq!(r.counts(), (0, 0, 0, 0, 0));
    }

    #[test]
    fn srq_of_another_pd_is_a_pd_mismatch() {
        let mut r = Resources::new(Limits::default());
        let pd1 = r.alloc_pd(1).unwrap();
        let pd2 = r.alloc_pd(1).unwrap();
        let cq = r.create_cq(1, 16).unwrap();
        let srq = r.create_srq(1, pd2, 16).unwrap();
        let mut a = attrs(pd1, cq);
        a.srq = Some(SrqId(srq));
        assert_eq!(
            r.create_qp(1, a),
            Err(Error::PdMismatch {
                expected: pd1,
                found: pd2
            })
        );
    }

    #[test]
    fn regions_must_fit_their_segment_and_rights_must_be_coherent() {
        let mut r = Resources::new(small());
        let pd = r.alloc_pd(1).unwrap();
        assert!(matches!(
            r.reg_mr(1, pd, 0, 1, 4096, 4000, 97),
            Err(Error::InvalidRegion { .. })
        ));
        assert!(r.reg_mr(1, pd, 0, 1, 4096, u64::MAX, 2).is_err(), "wraps");
        assert!(r.reg_mr(1, pd, 0, 1, 4096, 0, 0).is_err(), "empty");
        assert_eq!(
            r.reg_mr(1, pd, access::REMOTE_WRITE, 1, 4096, 0, 8),
            Err(Error::InvalidAccess {
                access: access::REMOTE_WRITE
            })
        );
        let s = r
            .reg_mr(
                1,
                pd,
                access::LOCAL_WRITE | access::REMOTE_READ,
                1,
                4096,
                96,
                4000,
            )
            .unwrap();
        let m = r.mr(1, s).unwrap();
        assert_eq!((m.offset, m.len, m.segment), (96, 4000, 1));
        // Re-register: new key, old STag refused, attributes kept.
        let s2 = r.rereg_mr(1, s, access::LOCAL_WRITE).unwrap();
        assert_ne!(s, s2);
        assert!(r.mr(1, s).is_err());
        assert_eq!(r.mr(1, s2).unwrap().access, access::LOCAL_WRITE);
        r.reg_mr(1, pd, 0, 1, 4096, 0, 1).unwrap();
        assert!(matches!(
            r.reg_mr(1, pd, 0, 1, 4096, 0, 1),
            Err(Error::InsufficientResources {
                what: Resource::Mr,
                ..
            })
        ));
        let w = r.alloc_mw(1, pd).unwrap();
        assert!(r.alloc_mw(1, pd).is_err(), "max_mw = 1");
        assert!(r.dereg_mr(1, w).is_err(), "an MW is not an MR");
        r.dealloc_mw(1, w).unwrap();
        r.dereg_mr(1, s2).unwrap();
    }

    #[test]
    fn qp_states_follow_the_verbs_diagram() {
        let mut r = Resources::new(Limits::default());
        let pd = r.alloc_pd(1).unwrap();
        let cq = r.create_cq(1, 16).unwrap();
        let qp = r.create_qp(1, attrs(pd, cq)).unwrap();
        assert_eq!(r.qp(1, qp).unwrap().state, QpState::Idle);
        assert_eq!(
            r.modify_qp(1, qp, QpState::Rts),
            Err(Error::InvalidModify {
                from: "Idle",
                to: "RTS"
            }),
            "Idle to RTS only through connection setup"
        );
        r.set_qp_state(qp, QpState::Rts);
        assert_eq!(r.modify_qp(1, qp, QpState::Closing), Ok(QpState::Rts));
        // Section 6.2.5: any Modify QP in Closing is an immediate error.
        for to in [
            QpState::Rts,
            QpState::Closing,
            QpState::Error,
            QpState::Idle,
        ] {
            assert!(r.modify_qp(1, qp, to).is_err(), "Closing -> {to}");
        }
        r.set_qp_state(qp, QpState::Idle);
        r.modify_qp(1, qp, QpState::Error).unwrap();
        // Section 6.2.4: Error leaves only for Idle.
        assert!(r.modify_qp(1, qp, QpState::Error).is_err());
        r.modify_qp(1, qp, QpState::Idle).unwrap();
        assert_eq!(QpState::Rts.to_string(), "RTS");
    }

    #[test]
    fn cleanup_removes_only_that_apps_resources_in_destroy_order() {
        let mut r = Resources::new(Limits::default());
        let mut mine = Vec::new();
        for app in [1, 2] {
            let pd = r.alloc_pd(app).unwrap();
            let cq = r.create_cq(app, 16).unwrap();
            let srq = r.create_srq(app, pd, 8).unwrap();
            let qp = r.create_qp(app, attrs(pd, cq)).unwrap();
            let mr = r.reg_mr(app, pd, 0, 1, 64, 0, 64).unwrap();
            let mw = r.alloc_mw(app, pd).unwrap();
            let fr = r.alloc_fastreg(app, pd).unwrap();
            mine.push((pd, cq, srq, qp, mr, mw, fr));
        }
        let t = r.cleanup_app(1);
        let (pd, cq, srq, qp, mr, mw, fr) = mine[0];
        assert_eq!(t.qps, vec![qp]);
        // Windows and fast-register STags before the region they may point into.
        assert_eq!(
            t.stags,
            vec![
                (mw, StagKind::Mw),
                (fr, StagKind::FastReg),
                (mr, StagKind::Mr)
            ]
        );
        assert_eq!((t.srqs, t.cqs, t.pds), (vec![srq], vec![cq], vec![pd]));
        assert_eq!(r.counts(), (1, 1, 1, 1, 3));
        let (pd2, _, _, qp2, mr2, _, _) = mine[1];
        assert!(r.qp(2, qp2).is_ok());
        assert!(r.mr(2, mr2).is_ok());
        assert!(r.mr(1, mr).is_err());
        assert_eq!(r.cleanup_app(1), Teardown::default(), "idempotent");
        assert!(r.dealloc_pd(2, pd2).is_err(), "app 2's PD still in use");
    }
}
