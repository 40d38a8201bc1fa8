//! librdmacm on the connection manager of `iwarp-verbs` (MPA over the endpoint's TCP):
//! event channels as file descriptors, identifiers, address and route resolution against
//! the devices of `IWARP_RUNTIME_DIR`, listen/connect/accept/reject/disconnect, and
//! `rdma_getaddrinfo`.
//!
//! Connection events come from each device context's control session; one thread per
//! process (started with the first identifier) collects them every millisecond and turns
//! them into `rdma_cm_event`s on the identifier's channel, with the kernel iw_cm's meanings:
//! CONNECT_REQUEST carries a new identifier for the request, ESTABLISHED the negotiated
//! IRD/ORD (`responder_resources`/`initiator_depth`) and the peer's private data unchanged,
//! REJECTED the peer's reject data, UNREACHABLE a connection that failed, DISCONNECTED the
//! end (also for the side that called `rdma_disconnect`).
#![cfg_attr(test, allow(dead_code))]

use crate::abi::*;
use crate::device;
use crate::events::EventQueue;
use crate::stub::set_errno;
use crate::verbs;
use core::ffi::{c_char, c_int, c_void};
use iwarp_verbs::{ConnSettings, ConnectFailure, ConnectRequest, Event};
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::{Mutex, MutexGuard, Once};
use std::time::Duration;

/// An event channel: an eventfd counting the events queued here.
#[repr(C)]
struct Channel {
    ibv: rdma_event_channel,
    queue: EventQueue<usize>,
}

/// An event and the private data it points to.
#[repr(C)]
struct EventBox {
    ev: rdma_cm_event,
    data: Vec<u8>,
}

/// An identifier and what the connection manager knows of it.
#[repr(C)]
struct Id {
    ibv: rdma_cm_id,
    /// The connection (control's id) once connecting, accepting or established.
    conn: Option<u32>,
    /// The request this identifier was made for (passive side), until accepted or rejected.
    req: Option<ConnectRequest>,
    /// The port listened on (listening identifiers).
    listen: Option<u16>,
}

/// Everything the collecting thread dispatches by.
#[derive(Default)]
struct State {
    /// One context per device, opened for the connection manager (the contexts
    /// applications reach through `id->verbs`).
    contexts: Vec<(usize, usize)>,
    /// Identifier by (context, connection).
    conns: HashMap<(usize, u32), usize>,
    /// Listening identifier by (context, port).
    listeners: HashMap<(usize, u16), usize>,
    /// Ports whose listener was destroyed less than [`linger`] ago, by (context, port):
    /// still open in control, their requests held for a listener that comes back.
    lingering: HashMap<(usize, u16), Lingering>,
    /// A PD per context for `rdma_create_qp` without one.
    pds: HashMap<usize, usize>,
    /// Every open context, whose events are collected (until its control is gone).
    watched: Vec<usize>,
    /// Every identifier, for DEVICE_REMOVAL.
    ids: Vec<usize>,
}

/// How long a port stays open after its listening identifier is destroyed. Programs
/// listen again on the port they just closed (perftest closes the listener of its setup
/// connection and, after a handshake over that connection, listens on the same port for
/// the test's connections, while its client connects as soon as the handshake ends); a
/// connect that came in between would otherwise be refused, which the kernel's rdma_cm
/// makes unlikely by listening in a system call, and perftest's client does not survive.
/// A request held this long without a new listener is rejected, and the port closes.
/// `IWARP_LISTEN_LINGER_MS` in the environment sets it (0: close at once, as the kernel
/// does).
fn linger() -> Duration {
    static LINGER: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *LINGER.get_or_init(|| {
        let ms = std::env::var("IWARP_LISTEN_LINGER_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1000);
        Duration::from_millis(ms)
    })
}

/// A port in its [`linger`] time.
struct Lingering {
    until: std::time::Instant,
    /// Requests that came meanwhile, in order.
    held: Vec<ConnectRequest>,
}

/// Held by the collector for each pass, so that closing a context can wait until no pass
/// uses it, and so that a call whose identifier is registered only from its reply (a
/// connection's id, a listened port) registers it before the collector can see an event for
/// it ([`between_passes`]).
static PASS: Mutex<()> = Mutex::new(());

/// Runs `f` while no collector pass runs. An event may come on the control session as soon
/// as the reply before it (a refused connect's within microseconds): dispatched before its
/// identifier is in the table, it would find nobody and be dropped.
fn between_passes<T>(f: impl FnOnce() -> T) -> T {
    let _pass = PASS.lock().unwrap_or_else(|p| p.into_inner());
    f()
}

/// Collects the events of context `c` from now on.
pub(crate) fn watch(c: *mut ibv_context) {
    with_state(|s| s.watched.push(c as usize));
    start_collector();
}

/// Stops collecting for context `c`, which is about to be closed.
pub(crate) fn unwatch(c: *mut ibv_context) {
    with_state(|s| s.watched.retain(|w| *w != c as usize));
    let _pass = PASS.lock().unwrap_or_else(|p| p.into_inner());
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn state() -> MutexGuard<'static, Option<State>> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

fn with_state<T>(f: impl FnOnce(&mut State) -> T) -> T {
    let mut g = state();
    f(g.get_or_insert_with(State::default))
}

/// The context of `dev`, opened once for the process.
fn context_for(dev: *mut ibv_device) -> *mut ibv_context {
    let known = |s: &mut State| {
        s.contexts
            .iter()
            .find(|(d, _)| *d == dev as usize)
            .map(|(_, c)| *c as *mut ibv_context)
    };
    if let Some(c) = with_state(known) {
        return c;
    }
    // Opened without the state's lock: opening registers the context with the collector,
    // which takes it.
    // SAFETY: a device of ibv_get_device_list.
    let c = unsafe { device::ibv_open_device(dev) };
    if c.is_null() {
        return c;
    }
    let (kept, spare) = with_state(|s| match known(s) {
        Some(other) => (other, Some(c)),
        None => {
            s.contexts.push((dev as usize, c as usize));
            (c, None)
        }
    });
    if let Some(spare) = spare {
        // Another thread opened one meanwhile.
        // SAFETY: the context opened above, used by nobody.
        unsafe { device::ibv_close_device(spare) };
    }
    kept
}

/// The device with address `ip` (any device for 0.0.0.0), or the one whose subnet holds it
/// when `route`.
fn device_for(ip: Ipv4Addr, route: bool) -> Option<*mut ibv_device> {
    let mut n = 0;
    // SAFETY: ibv_get_device_list's array, freed below.
    let list = unsafe { device::ibv_get_device_list(&mut n) };
    if list.is_null() {
        return None;
    }
    let mut found = None;
    let mut first = None;
    for i in 0..n as usize {
        // SAFETY: `n` entries.
        let d = unsafe { *list.add(i) };
        first.get_or_insert(d);
        let port = device::port_of(d);
        let mask = u32::MAX.checked_shl(32 - port.prefix as u32).unwrap_or(0);
        let same_net = u32::from(port.ipv4) & mask == u32::from(ip) & mask;
        if port.ipv4 == ip || (route && same_net) {
            found = Some(d);
            break;
        }
    }
    // SAFETY: the array from above.
    unsafe { device::ibv_free_device_list(list) };
    if ip.is_unspecified() {
        return first;
    }
    found.or(if route { first } else { None })
}

fn sin(a: *const sockaddr) -> Option<SocketAddrV4> {
    if a.is_null() {
        return None;
    }
    // SAFETY: the caller's address; only AF_INET is read as sockaddr_in.
    unsafe {
        if (*a).sa_family as c_int != libc::AF_INET {
            return None;
        }
        let s = &*a.cast::<libc::sockaddr_in>();
        Some(SocketAddrV4::new(
            Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)),
            u16::from_be(s.sin_port),
        ))
    }
}

fn write_sin(dst: *mut sockaddr_storage, a: SocketAddrV4) {
    let s = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: a sockaddr_storage has room for a sockaddr_in.
    unsafe { dst.cast::<libc::sockaddr_in>().write(s) };
}

fn src_of(id: &Id) -> Option<SocketAddrV4> {
    // SAFETY: reading the union as the generic sockaddr it starts with.
    sin(unsafe { &id.ibv.route.addr.__bindgen_anon_1.src_addr })
}

fn dst_of(id: &Id) -> Option<SocketAddrV4> {
    // SAFETY: as above.
    sin(unsafe { &id.ibv.route.addr.__bindgen_anon_2.dst_addr })
}

fn set_src(id: &mut Id, a: SocketAddrV4) {
    // SAFETY: the storage member of the union.
    write_sin(
        unsafe { &mut id.ibv.route.addr.__bindgen_anon_1.src_storage },
        a,
    );
}

fn set_dst(id: &mut Id, a: SocketAddrV4) {
    // SAFETY: as above.
    write_sin(
        unsafe { &mut id.ibv.route.addr.__bindgen_anon_2.dst_storage },
        a,
    );
}

/// Queues an event for `id` on its channel.
fn post(
    id: *mut Id,
    kind: rdma_cm_event_type,
    status: c_int,
    conn: Option<(u8, u8, Vec<u8>)>,
    listen_id: *mut Id,
) {
    // SAFETY: a live identifier of this library.
    let ch = unsafe { (*id).ibv.channel };
    if ch.is_null() {
        return;
    }
    let mut b = Box::new(EventBox {
        // SAFETY: an all-zero rdma_cm_event is a valid one (NULL pointers, zero numbers).
        ev: unsafe { core::mem::zeroed() },
        data: Vec::new(),
    });
    b.ev.id = id.cast();
    b.ev.listen_id = listen_id.cast();
    b.ev.event = kind;
    b.ev.status = status;
    if let Some((responder, initiator, data)) = conn {
        b.data = data;
        // Writing union fields is safe: the conn member is the one CONNECT_REQUEST,
        // ESTABLISHED and REJECTED carry.
        b.ev.param.conn.private_data = if b.data.is_empty() {
            core::ptr::null()
        } else {
            b.data.as_ptr().cast()
        };
        b.ev.param.conn.private_data_len = b.data.len().min(255) as u8;
        b.ev.param.conn.responder_resources = responder;
        b.ev.param.conn.initiator_depth = initiator;
    }
    // SAFETY: the identifier's channel, of rdma_create_event_channel.
    let c = unsafe { &*ch.cast::<Channel>() };
    c.queue.post(Box::into_raw(b) as usize);
}

/// Starts the thread that collects connection events, once per process.
fn start_collector() {
    static START: Once = Once::new();
    START.call_once(|| {
        let _ = std::thread::Builder::new()
            .name("rdma-cm-events".into())
            .spawn(|| loop {
                {
                    let _pass = PASS.lock().unwrap_or_else(|p| p.into_inner());
                    for c in with_state(|s| s.watched.clone()) {
                        collect(c);
                    }
                    close_lingering();
                }
                std::thread::sleep(Duration::from_millis(1));
            });
    });
}

/// Dispatches the events waiting on context `c`.
fn collect(c: usize) {
    // SAFETY: the connection manager's contexts are never closed.
    let Some(ctx) = (unsafe { device::Ctx::from_ibv(c as *mut ibv_context) }) else {
        return;
    };
    loop {
        let e = match ctx.rnic.poll_event() {
            Ok(Some(e)) => e,
            Ok(None) => return,
            Err(_) => {
                device_gone(c, ctx);
                return;
            }
        };
        match e {
            Event::ConnectRequest(req) => {
                let key = (c, req.port);
                let to = with_state(|s| match s.listeners.get(&key) {
                    Some(l) => Ok(*l),
                    None => Err(match s.lingering.get_mut(&key) {
                        Some(l) => {
                            l.held.push(req.clone());
                            true
                        }
                        None => false,
                    }),
                });
                match to {
                    Ok(listener) => deliver(ctx, listener as *mut Id, req),
                    // Held for a listener that may come back.
                    Err(true) => {}
                    Err(false) => {
                        let _ = ctx.rnic.reject(&req, &[]);
                    }
                }
            }
            Event::Established(est) => {
                if let Some(id) = with_state(|s| s.conns.get(&(c, est.conn)).copied()) {
                    let id = id as *mut Id;
                    // SAFETY: a live identifier with a QP (it connected or accepted).
                    verbs::set_rts(unsafe { (*id).ibv.qp });
                    let (ird, ord) = (est.ird.min(255) as u8, est.ord.min(255) as u8);
                    post(
                        id,
                        RDMA_CM_EVENT_ESTABLISHED,
                        0,
                        Some((ird, ord, est.private_data)),
                        core::ptr::null_mut(),
                    );
                }
            }
            Event::Rejected { conn, private_data } => {
                if let Some(id) = with_state(|s| s.conns.remove(&(c, conn))) {
                    // The kernel reports a consumer reject with status ECONNREFUSED.
                    post(
                        id as *mut Id,
                        RDMA_CM_EVENT_REJECTED,
                        -libc::ECONNREFUSED,
                        Some((0, 0, private_data)),
                        core::ptr::null_mut(),
                    );
                }
            }
            Event::ConnectFailed { conn, cause, .. } => {
                if let Some(id) = with_state(|s| s.conns.remove(&(c, conn))) {
                    // As the kernel's iw_cm reports a failed connect: UNREACHABLE, its errno
                    // in the status.
                    let status = match cause {
                        ConnectFailure::Refused => -libc::ECONNREFUSED,
                        ConnectFailure::Reset => -libc::ECONNRESET,
                        ConnectFailure::TimedOut | ConnectFailure::Other => -libc::ETIMEDOUT,
                    };
                    post(
                        id as *mut Id,
                        RDMA_CM_EVENT_UNREACHABLE,
                        status,
                        None,
                        core::ptr::null_mut(),
                    );
                }
            }
            Event::Disconnected { conn, .. } => {
                if let Some(id) = with_state(|s| s.conns.remove(&(c, conn))) {
                    post(
                        id as *mut Id,
                        RDMA_CM_EVENT_DISCONNECTED,
                        0,
                        None,
                        core::ptr::null_mut(),
                    );
                }
            }
            Event::QpError { qp } | Event::QpTerminated(iwarp_abi::qp::Terminated { qp, .. }) => {
                // A Terminate, sent or received, leaves the QP in error (siw reports both as
                // a fatal QP event).
                if let Some(p) = ctx.object(device::Object::Qp, qp.into()) {
                    ctx.post_async(async_event(IBV_EVENT_QP_FATAL, |e| e.qp = p as *mut ibv_qp));
                }
            }
            Event::CqOverflow { cq } => {
                if let Some(p) = ctx.object(device::Object::Cq, cq.into()) {
                    ctx.post_async(async_event(IBV_EVENT_CQ_ERR, |e| e.cq = p as *mut ibv_cq));
                }
            }
            Event::SrqLimit { srq } => {
                if let Some(p) = ctx.object(device::Object::Srq, srq.into()) {
                    ctx.post_async(async_event(IBV_EVENT_SRQ_LIMIT_REACHED, |e| {
                        e.srq = p as *mut ibv_srq
                    }));
                }
            }
        }
    }
}

/// Hands the connection request `req` of context `ctx` to the listening identifier
/// `parent`: CONNECT_REQUEST with a new identifier for the request, offering the endpoint's
/// IRD/ORD.
fn deliver(ctx: &device::Ctx, parent: *mut Id, req: ConnectRequest) {
    // SAFETY: a live listening identifier (rdma_destroy_id takes it out of the table first).
    let p = unsafe { &*parent };
    let mut child = Box::new(Id {
        ibv: rdma_cm_id {
            verbs: p.ibv.verbs,
            channel: p.ibv.channel,
            context: p.ibv.context,
            ps: p.ibv.ps,
            port_num: 1,
            qp_type: p.ibv.qp_type,
            ..Default::default()
        },
        conn: Some(req.conn),
        req: None,
        listen: None,
    });
    if let Some(src) = src_of(p) {
        set_src(&mut child, SocketAddrV4::new(ctx.port().ipv4, src.port()));
    }
    if let SocketAddr::V4(peer) = req.peer {
        set_dst(&mut child, peer);
    }
    let data = req.private_data.clone();
    child.req = Some(req);
    let limits = &ctx.limits;
    let (ird, ord) = (limits.max_ird.min(255) as u8, limits.max_ord.min(255) as u8);
    let id = Box::into_raw(child);
    post(
        id,
        RDMA_CM_EVENT_CONNECT_REQUEST,
        0,
        Some((ird, ord, data)),
        parent,
    );
}

/// Closes the ports whose [`linger`] time is over: control stops listening on each, then
/// the requests held for it are rejected.
fn close_lingering() {
    let now = std::time::Instant::now();
    let due: Vec<((usize, u16), Lingering)> = with_state(|s| {
        let keys: Vec<(usize, u16)> = s
            .lingering
            .iter()
            .filter(|(_, l)| l.until <= now)
            .map(|(k, _)| *k)
            .collect();
        keys.into_iter()
            .filter_map(|k| s.lingering.remove(&k).map(|l| (k, l)))
            .collect()
    });
    for ((c, port), l) in due {
        // SAFETY: the connection manager's contexts are never closed.
        let Some(ctx) = (unsafe { device::Ctx::from_ibv(c as *mut ibv_context) }) else {
            continue;
        };
        // A control that is gone listens on nothing, so its error changes nothing.
        let _ = ctx.rnic.unlisten(port);
        for req in l.held {
            let _ = ctx.rnic.reject(&req, &[]);
        }
    }
}

fn async_event(
    kind: ibv_event_type,
    element: impl FnOnce(&mut ibv_async_event__bindgen_ty_1),
) -> ibv_async_event {
    let mut e = ibv_async_event {
        element: ibv_async_event__bindgen_ty_1 { port_num: 0 },
        event_type: kind,
    };
    element(&mut e.element);
    e
}

/// The control session of context `c` ended (control exited, or found iwarpd gone): every
/// identifier on it hears DEVICE_REMOVAL, the context a fatal device event, and its events
/// are no longer collected.
fn device_gone(c: usize, ctx: &device::Ctx) {
    let ids = with_state(|s| {
        s.watched.retain(|w| *w != c);
        s.conns.retain(|(k, _), _| *k != c);
        s.lingering.retain(|(k, _), _| *k != c);
        s.ids.clone()
    });
    for id in ids {
        // SAFETY: identifiers in the list are live (rdma_destroy_id takes them out).
        if unsafe { (*(id as *const Id)).ibv.verbs } as usize == c {
            post(
                id as *mut Id,
                RDMA_CM_EVENT_DEVICE_REMOVAL,
                0,
                None,
                core::ptr::null_mut(),
            );
        }
    }
    ctx.post_async(async_event(IBV_EVENT_DEVICE_FATAL, |e| e.port_num = 1));
}

pub(crate) unsafe extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    let Some(queue) = EventQueue::new() else {
        return core::ptr::null_mut();
    };
    Box::into_raw(Box::new(Channel {
        ibv: rdma_event_channel { fd: queue.fd() },
        queue,
    }))
    .cast()
}

pub(crate) unsafe extern "C" fn rdma_destroy_event_channel(ch: *mut rdma_event_channel) {
    if ch.is_null() {
        return;
    }
    // SAFETY: a channel of rdma_create_event_channel, destroyed once.
    let c = unsafe { Box::from_raw(ch.cast::<Channel>()) };
    for e in c.queue.drain() {
        // SAFETY: events queued here and never handed out.
        drop(unsafe { Box::from_raw(e as *mut EventBox) });
    }
}

pub(crate) unsafe extern "C" fn rdma_get_cm_event(
    ch: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    if ch.is_null() || event.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: a channel of rdma_create_event_channel.
    let c = unsafe { &*ch.cast::<Channel>() };
    let Some(e) = c.queue.take() else {
        return -1;
    };
    // SAFETY: the caller's out-parameter; the event stays until rdma_ack_cm_event.
    unsafe { *event = e as *mut rdma_cm_event };
    0
}

pub(crate) unsafe extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    if event.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: an event of rdma_get_cm_event (an EventBox), acknowledged once.
    drop(unsafe { Box::from_raw(event.cast::<EventBox>()) });
    0
}

pub(crate) unsafe extern "C" fn rdma_create_id(
    ch: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: rdma_port_space,
) -> c_int {
    if id.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    if ps != RDMA_PS_TCP && ps != RDMA_PS_IB {
        // iWARP carries reliable connections only (siw's answer to UD).
        set_errno(libc::EOPNOTSUPP);
        return -1;
    }
    start_collector();
    let b = Box::new(Id {
        ibv: rdma_cm_id {
            channel: ch,
            context,
            ps,
            qp_type: IBV_QPT_RC,
            ..Default::default()
        },
        conn: None,
        req: None,
        listen: None,
    });
    let p = Box::into_raw(b);
    with_state(|s| s.ids.push(p as usize));
    // SAFETY: the caller's out-parameter.
    unsafe { *id = p.cast() };
    0
}

pub(crate) unsafe extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    if id.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    let key = id as usize;
    with_state(|s| {
        s.conns.retain(|_, v| *v != key);
        s.listeners.retain(|_, v| *v != key);
        s.ids.retain(|v| *v != key);
    });
    // SAFETY: an identifier of rdma_create_id (or of a request), destroyed once.
    let i = unsafe { Box::from_raw(id.cast::<Id>()) };
    if let Some(port) = i.listen {
        // The port closes once its linger time is over (the collector closes it), unless
        // an identifier listens on it again before.
        if linger().is_zero() {
            // SAFETY: a listening identifier's context is one of the connection manager's,
            // never closed.
            if let Some(ctx) = unsafe { device::Ctx::from_ibv(i.ibv.verbs) } {
                // A control that is gone listens on nothing, so its error changes nothing.
                let _ = ctx.rnic.unlisten(port);
            }
        } else {
            let key = (i.ibv.verbs as usize, port);
            let until = std::time::Instant::now() + linger();
            let held = Vec::new();
            with_state(|s| s.lingering.insert(key, Lingering { until, held }));
        }
    }
    0
}

/// The identifier's own state.
///
/// # Safety
/// `id` must be a live identifier of this library.
unsafe fn id_of<'a>(id: *mut rdma_cm_id) -> Option<&'a mut Id> {
    // A pointer that cannot be an identifier (NULL, misaligned) is refused rather than
    // dereferenced.
    let ok = !id.is_null() && id.cast::<Id>().is_aligned();
    // SAFETY: the caller's contract; Id starts with the rdma_cm_id.
    ok.then(|| unsafe { &mut *id.cast::<Id>() })
}

fn bind(i: &mut Id, ip: Ipv4Addr, port: u16, route: bool) -> bool {
    let Some(dev) = device_for(ip, route) else {
        return false;
    };
    let ctx = context_for(dev);
    if ctx.is_null() {
        return false;
    }
    i.ibv.verbs = ctx;
    i.ibv.port_num = 1;
    set_src(i, SocketAddrV4::new(device::port_of(dev).ipv4, port));
    true
}

pub(crate) unsafe extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    // SAFETY: the caller's identifier.
    let (Some(i), Some(a)) = (unsafe { id_of(id) }, sin(addr)) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if !bind(i, *a.ip(), a.port(), false) {
        set_errno(libc::EADDRNOTAVAIL);
        return -1;
    }
    0
}

pub(crate) unsafe extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src: *mut sockaddr,
    dst: *mut sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    // SAFETY: the caller's identifier.
    let (Some(i), Some(d)) = (unsafe { id_of(id) }, sin(dst)) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    let ok = match sin(src) {
        Some(s) if !s.ip().is_unspecified() => bind(i, *s.ip(), s.port(), false),
        _ => bind(i, *d.ip(), 0, true),
    };
    set_dst(i, d);
    let ev = if ok {
        RDMA_CM_EVENT_ADDR_RESOLVED
    } else {
        RDMA_CM_EVENT_ADDR_ERROR
    };
    post(
        i,
        ev,
        if ok { 0 } else { -libc::EADDRNOTAVAIL },
        None,
        core::ptr::null_mut(),
    );
    0
}

pub(crate) unsafe extern "C" fn rdma_resolve_route(
    id: *mut rdma_cm_id,
    _timeout_ms: c_int,
) -> c_int {
    // SAFETY: the caller's identifier.
    let Some(i) = (unsafe { id_of(id) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if i.ibv.verbs.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    post(
        i,
        RDMA_CM_EVENT_ROUTE_RESOLVED,
        0,
        None,
        core::ptr::null_mut(),
    );
    0
}

/// Whether connections ask for MPA CRCs: yes unless `IWARP_MPA_CRC` is `0`. rdma_cm has no
/// parameter for it (the kernel's providers take it from a module parameter, as siw's
/// `mpa_crc_required`), so unmodified programs get it from the environment.
fn crc_wanted() -> bool {
    std::env::var_os("IWARP_MPA_CRC").is_none_or(|v| v != "0")
}

/// MPA settings from an application's connection parameters: its IRD
/// (`responder_resources`) and ORD (`initiator_depth`), as iw_cm maps them, and its private
/// data unchanged; CRCs as [`crc_wanted`] says.
///
/// # Safety
/// `p` must be NULL or the application's parameters.
unsafe fn settings(ctx: &device::Ctx, p: *const rdma_conn_param) -> ConnSettings {
    let mut s = ConnSettings {
        ird: ctx.limits.max_ird,
        ord: ctx.limits.max_ord,
        crc: crc_wanted(),
        ..Default::default()
    };
    if !p.is_null() {
        // SAFETY: the caller's parameters.
        let p = unsafe { &*p };
        s.ird = (p.responder_resources as u16).min(ctx.limits.max_ird);
        s.ord = (p.initiator_depth as u16).min(ctx.limits.max_ord);
        if !p.private_data.is_null() && p.private_data_len > 0 {
            // SAFETY: `private_data_len` octets at `private_data`.
            s.private_data = unsafe {
                core::slice::from_raw_parts(
                    p.private_data.cast::<u8>(),
                    p.private_data_len as usize,
                )
            }
            .to_vec();
        }
    }
    s
}

pub(crate) unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, _backlog: c_int) -> c_int {
    // SAFETY: the caller's identifier.
    let Some(i) = (unsafe { id_of(id) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    let Some(src) = src_of(i).filter(|_| !i.ibv.verbs.is_null()) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    // SAFETY: the identifier's context is one of ours.
    let Some(ctx) = (unsafe { device::Ctx::from_ibv(i.ibv.verbs) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    let key = (i.ibv.verbs as usize, src.port());
    if i.listen == Some(src.port()) {
        // Listening already (the kernel's rdma_cm answers a second call the same way).
        return 0;
    }
    // A port whose listener was destroyed moments ago is still open: this identifier takes
    // it over with the requests held meanwhile, in one step, so that the collector finds
    // either the lingering port or its new listener.
    let Ok(held) = with_state(|st| {
        if st.listeners.contains_key(&key) {
            return Err(());
        }
        let held = st.lingering.remove(&key).map(|l| l.held);
        if held.is_some() {
            st.listeners.insert(key, id as usize);
        }
        Ok(held)
    }) else {
        set_errno(libc::EADDRINUSE);
        return -1;
    };
    if held.is_none() {
        // SAFETY: no parameters: the endpoint's limits.
        let s = unsafe { settings(ctx, core::ptr::null()) };
        let listening = between_passes(|| {
            ctx.rnic.listen(src.port(), &s)?;
            with_state(|st| st.listeners.insert(key, id as usize));
            Ok::<_, iwarp_verbs::Error>(())
        });
        if listening.is_err() {
            set_errno(libc::EADDRINUSE);
            return -1;
        }
    }
    i.listen = Some(src.port());
    for req in held.into_iter().flatten() {
        deliver(ctx, id.cast(), req);
    }
    0
}

/// What connecting and accepting start from: the caller's identifier with a QP, its
/// context, the QP, and the MPA settings of `param`. `None` (with errno `EINVAL`) when the
/// identifier is not one or has no QP yet.
///
/// # Safety
/// `id` must be NULL or a live identifier of this library, `param` NULL or the caller's
/// parameters.
unsafe fn connection_start<'a>(
    id: *mut rdma_cm_id,
    param: *const rdma_conn_param,
) -> Option<(
    &'a mut Id,
    &'a device::Ctx,
    &'a iwarp_verbs::QueuePair,
    ConnSettings,
)> {
    // SAFETY: the caller's identifier.
    let i = unsafe { id_of(id) }.filter(|i| !i.ibv.qp.is_null());
    // SAFETY: an identifier's context, when set, is one of ours.
    let ctx = i
        .as_ref()
        .and_then(|i| unsafe { device::Ctx::from_ibv(i.ibv.verbs) });
    let (Some(i), Some(ctx)) = (i, ctx) else {
        set_errno(libc::EINVAL);
        return None;
    };
    // SAFETY: the identifier's QP, made by rdma_create_qp.
    let qp = unsafe { verbs::queue_pair(i.ibv.qp) };
    // SAFETY: the caller's parameters.
    let s = unsafe { settings(ctx, param) };
    Some((i, ctx, qp, s))
}

pub(crate) unsafe extern "C" fn rdma_connect(
    id: *mut rdma_cm_id,
    param: *mut rdma_conn_param,
) -> c_int {
    // SAFETY: the caller's identifier and parameters.
    let Some((i, ctx, qp, s)) = (unsafe { connection_start(id, param) }) else {
        return -1;
    };
    let Some(dst) = dst_of(i) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    let connected = between_passes(|| {
        let conn = ctx.rnic.connect(qp, SocketAddr::V4(dst), &s)?;
        let key = (i.ibv.verbs as usize, conn);
        with_state(|st| st.conns.insert(key, id as usize));
        Ok::<_, iwarp_verbs::Error>(conn)
    });
    match connected {
        Ok(conn) => {
            i.conn = Some(conn);
            0
        }
        Err(_) => {
            set_errno(libc::ECONNREFUSED);
            -1
        }
    }
}

pub(crate) unsafe extern "C" fn rdma_accept(
    id: *mut rdma_cm_id,
    param: *mut rdma_conn_param,
) -> c_int {
    // SAFETY: the caller's identifier and parameters.
    let Some((i, ctx, qp, s)) = (unsafe { connection_start(id, param) }) else {
        return -1;
    };
    let Some(req) = i.req.take() else {
        set_errno(libc::EINVAL);
        return -1;
    };
    let key = (i.ibv.verbs as usize, req.conn);
    with_state(|st| st.conns.insert(key, id as usize));
    match ctx.rnic.accept(&req, qp, &s) {
        Ok(()) => 0,
        Err(_) => {
            with_state(|st| st.conns.remove(&key));
            set_errno(libc::EINVAL);
            -1
        }
    }
}

pub(crate) unsafe extern "C" fn rdma_reject(
    id: *mut rdma_cm_id,
    data: *const c_void,
    len: u8,
) -> c_int {
    // SAFETY: the caller's identifier.
    let Some(i) = (unsafe { id_of(id) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    let Some(req) = i.req.take() else {
        set_errno(libc::EINVAL);
        return -1;
    };
    // SAFETY: the identifier's context is ours.
    let Some(ctx) = (unsafe { device::Ctx::from_ibv(i.ibv.verbs) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    let pd = if data.is_null() {
        Vec::new()
    } else {
        // SAFETY: `len` octets of the caller's reject data.
        unsafe { core::slice::from_raw_parts(data.cast::<u8>(), len as usize) }.to_vec()
    };
    match ctx.rnic.reject(&req, &pd) {
        Ok(()) => 0,
        Err(_) => {
            set_errno(libc::EINVAL);
            -1
        }
    }
}

pub(crate) unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    // SAFETY: the caller's identifier.
    let Some(i) = (unsafe { id_of(id) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    let Some(conn) = i.conn.take() else {
        set_errno(libc::EINVAL);
        return -1;
    };
    // SAFETY: the identifier's context is ours.
    if let Some(ctx) = unsafe { device::Ctx::from_ibv(i.ibv.verbs) } {
        let _ = ctx.rnic.disconnect(conn, false);
    }
    // The side that disconnects is told too, once (control's own notice is then dropped).
    let key = (i.ibv.verbs as usize, conn);
    if with_state(|st| st.conns.remove(&key)).is_some() {
        post(
            i,
            RDMA_CM_EVENT_DISCONNECTED,
            0,
            None,
            core::ptr::null_mut(),
        );
    }
    0
}

/// The default PD of a context, for `rdma_create_qp` without one.
fn default_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    with_state(|s| {
        if let Some(p) = s.pds.get(&(ctx as usize)) {
            return *p as *mut ibv_pd;
        }
        // SAFETY: one of our contexts.
        let p = unsafe { verbs::ibv_alloc_pd(ctx) };
        if !p.is_null() {
            s.pds.insert(ctx as usize, p as usize);
        }
        p
    })
}

pub(crate) unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: the caller's identifier.
    let Some(i) = (unsafe { id_of(id) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if i.ibv.verbs.is_null() || attr.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    let pd = if pd.is_null() {
        default_pd(i.ibv.verbs)
    } else {
        pd
    };
    // SAFETY: the caller's attributes; CQs made here when the application gives none.
    let a = unsafe { &mut *attr };
    for cq in [&mut a.send_cq, &mut a.recv_cq] {
        if cq.is_null() {
            let depth = (a.cap.max_send_wr + a.cap.max_recv_wr).max(1) as c_int;
            // SAFETY: one of our contexts.
            *cq = unsafe {
                verbs::ibv_create_cq(
                    i.ibv.verbs,
                    depth,
                    core::ptr::null_mut(),
                    core::ptr::null_mut(),
                    0,
                )
            };
        }
    }
    // SAFETY: forwarded.
    let qp = unsafe { verbs::ibv_create_qp(pd, attr) };
    if qp.is_null() {
        return -1;
    }
    i.ibv.qp = qp;
    i.ibv.pd = pd;
    i.ibv.send_cq = a.send_cq;
    i.ibv.recv_cq = a.recv_cq;
    0
}

pub(crate) unsafe extern "C" fn rdma_create_qp_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_init_attr_ex,
) -> c_int {
    if attr.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: the caller's attributes; their head is an ibv_qp_init_attr.
    let a = unsafe { &mut *attr };
    let mut plain = crate::ex::plain_init_attr(a);
    let pd = if a.comp_mask & IBV_QP_INIT_ATTR_PD != 0 {
        a.pd
    } else {
        core::ptr::null_mut()
    };
    // SAFETY: forwarded.
    let r = unsafe { rdma_create_qp(id, pd, &mut plain) };
    a.cap = plain.cap;
    a.send_cq = plain.send_cq;
    a.recv_cq = plain.recv_cq;
    r
}

pub(crate) unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    // SAFETY: the caller's identifier.
    if let Some(i) = unsafe { id_of(id) } {
        if !i.ibv.qp.is_null() {
            // SAFETY: the QP rdma_create_qp made.
            unsafe { verbs::ibv_destroy_qp(i.ibv.qp) };
            i.ibv.qp = core::ptr::null_mut();
        }
    }
}

pub(crate) unsafe extern "C" fn rdma_migrate_id(
    id: *mut rdma_cm_id,
    ch: *mut rdma_event_channel,
) -> c_int {
    // SAFETY: the caller's identifier.
    let Some(i) = (unsafe { id_of(id) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    i.ibv.channel = ch;
    0
}

pub(crate) unsafe extern "C" fn rdma_set_option(
    _id: *mut rdma_cm_id,
    _level: c_int,
    _name: c_int,
    _val: *mut c_void,
    _len: usize,
) -> c_int {
    // Type of service, address reuse, ACK timeout: nothing here depends on them.
    0
}

pub(crate) unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_attr,
    mask: *mut c_int,
) -> c_int {
    if id.is_null() || attr.is_null() || mask.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: the caller's out-parameters. The QP is taken to RTS by the connection.
    unsafe {
        *attr = ibv_qp_attr {
            qp_state: IBV_QPS_RTS,
            ..Default::default()
        };
        *mask = IBV_QP_STATE as c_int;
    }
    0
}

pub(crate) unsafe extern "C" fn rdma_establish(_id: *mut rdma_cm_id) -> c_int {
    // On iWARP the connection is in RTS once ESTABLISHED is reported.
    0
}

pub(crate) unsafe extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    // SAFETY: the caller's identifier.
    unsafe { id_of(id) }
        .and_then(|i| src_of(i))
        .map_or(0, |a| a.port().to_be())
}

pub(crate) unsafe extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    // SAFETY: the caller's identifier.
    unsafe { id_of(id) }
        .and_then(|i| dst_of(i))
        .map_or(0, |a| a.port().to_be())
}

pub(crate) unsafe extern "C" fn rdma_event_str(e: rdma_cm_event_type) -> *const c_char {
    let s: &'static [u8] = match e {
        RDMA_CM_EVENT_ADDR_RESOLVED => b"RDMA_CM_EVENT_ADDR_RESOLVED\0",
        RDMA_CM_EVENT_ADDR_ERROR => b"RDMA_CM_EVENT_ADDR_ERROR\0",
        RDMA_CM_EVENT_ROUTE_RESOLVED => b"RDMA_CM_EVENT_ROUTE_RESOLVED\0",
        RDMA_CM_EVENT_ROUTE_ERROR => b"RDMA_CM_EVENT_ROUTE_ERROR\0",
        RDMA_CM_EVENT_CONNECT_REQUEST => b"RDMA_CM_EVENT_CONNECT_REQUEST\0",
        RDMA_CM_EVENT_CONNECT_RESPONSE => b"RDMA_CM_EVENT_CONNECT_RESPONSE\0",
        RDMA_CM_EVENT_CONNECT_ERROR => b"RDMA_CM_EVENT_CONNECT_ERROR\0",
        RDMA_CM_EVENT_UNREACHABLE => b"RDMA_CM_EVENT_UNREACHABLE\0",
        RDMA_CM_EVENT_REJECTED => b"RDMA_CM_EVENT_REJECTED\0",
        RDMA_CM_EVENT_ESTABLISHED => b"RDMA_CM_EVENT_ESTABLISHED\0",
        RDMA_CM_EVENT_DISCONNECTED => b"RDMA_CM_EVENT_DISCONNECTED\0",
        RDMA_CM_EVENT_DEVICE_REMOVAL => b"RDMA_CM_EVENT_DEVICE_REMOVAL\0",
        RDMA_CM_EVENT_MULTICAST_JOIN => b"RDMA_CM_EVENT_MULTICAST_JOIN\0",
        RDMA_CM_EVENT_MULTICAST_ERROR => b"RDMA_CM_EVENT_MULTICAST_ERROR\0",
        RDMA_CM_EVENT_ADDR_CHANGE => b"RDMA_CM_EVENT_ADDR_CHANGE\0",
        RDMA_CM_EVENT_TIMEWAIT_EXIT => b"RDMA_CM_EVENT_TIMEWAIT_EXIT\0",
        _ => b"UNKNOWN EVENT\0",
    };
    s.as_ptr().cast()
}

pub(crate) unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    if res.is_null() || (node.is_null() && service.is_null()) {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: the caller's hints, or NULL.
    let passive = !hints.is_null() && unsafe { (*hints).ai_flags } & RAI_PASSIVE as c_int != 0;
    // SAFETY: an all-zero addrinfo is an empty set of hints.
    let mut h: libc::addrinfo = unsafe { core::mem::zeroed() };
    h.ai_family = libc::AF_INET;
    h.ai_socktype = libc::SOCK_STREAM;
    if passive {
        h.ai_flags = libc::AI_PASSIVE;
    }
    let mut out: *mut libc::addrinfo = core::ptr::null_mut();
    // SAFETY: C strings or NULL from the caller; `out` freed below.
    if unsafe { libc::getaddrinfo(node, service, &h, &mut out) } != 0 || out.is_null() {
        set_errno(libc::EADDRNOTAVAIL);
        return -1;
    }
    // SAFETY: the first result, an IPv4 address (family asked for above).
    let a = unsafe { sin((*out).ai_addr.cast()) };
    // SAFETY: from getaddrinfo above.
    unsafe { libc::freeaddrinfo(out) };
    let Some(a) = a else {
        set_errno(libc::EADDRNOTAVAIL);
        return -1;
    };
    // SAFETY: zeroed allocations, freed by rdma_freeaddrinfo.
    unsafe {
        let ai = libc::calloc(1, core::mem::size_of::<rdma_addrinfo>()).cast::<rdma_addrinfo>();
        let sa =
            libc::calloc(1, core::mem::size_of::<sockaddr_storage>()).cast::<sockaddr_storage>();
        if ai.is_null() || sa.is_null() {
            libc::free(ai.cast());
            libc::free(sa.cast());
            set_errno(libc::ENOMEM);
            return -1;
        }
        write_sin(sa, a);
        (*ai).ai_family = libc::AF_INET;
        (*ai).ai_qp_type = IBV_QPT_RC as c_int;
        (*ai).ai_port_space = RDMA_PS_TCP as c_int;
        let len = core::mem::size_of::<libc::sockaddr_in>() as socklen_t;
        if passive {
            (*ai).ai_flags = RAI_PASSIVE as c_int;
            (*ai).ai_src_addr = sa.cast();
            (*ai).ai_src_len = len;
        } else {
            (*ai).ai_dst_addr = sa.cast();
            (*ai).ai_dst_len = len;
        }
        *res = ai;
    }
    0
}

pub(crate) unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    let mut p = res;
    while !p.is_null() {
        // SAFETY: a list of rdma_getaddrinfo, each node and address from calloc.
        unsafe {
            let next = (*p).ai_next;
            libc::free((*p).ai_src_addr.cast());
            libc::free((*p).ai_dst_addr.cast());
            libc::free(p.cast());
            p = next;
        }
    }
}
