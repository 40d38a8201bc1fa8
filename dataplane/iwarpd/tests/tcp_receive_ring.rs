//! The daemon's smoltcp places a segment that arrives at an empty receive ring at the ring's
//! front (the one change in `vendor/smoltcp`, see `vendor/README.md`). The node drains each
//! ring on every visit, so a stream keeps to the first pages of its 1 MiB ring. Were it to
//! cycle through all of it, fifty streams would walk 50 MiB of rings and every copy into a
//! ring would miss the caches.

use smoltcp::iface::{Config, Interface, SocketSet};
use smoltcp::phy::{Loopback, Medium};
use smoltcp::socket::tcp;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{EthernetAddress, IpAddress, IpCidr};

const RING: usize = 1 << 20;
const CHUNK: usize = 4000;

#[test]
fn a_drained_receive_ring_takes_the_next_segment_at_its_front() {
    let mut dev = Loopback::new(Medium::Ethernet);
    let mut now = Instant::ZERO;
    let cfg = Config::new(EthernetAddress([2, 0, 0, 0, 0, 1]).into());
    let mut iface = Interface::new(cfg, &mut dev, now);
    iface.update_ip_addrs(|a| {
        a.push(IpCidr::new(IpAddress::v4(127, 0, 0, 1), 8))
            .expect("room for an address")
    });
    let ring = |len: usize| tcp::SocketBuffer::new(vec![0u8; len]);
    let mut sockets = SocketSet::new(vec![]);
    let rx = sockets.add(tcp::Socket::new(ring(RING), ring(4096)));
    let tx = sockets.add(tcp::Socket::new(ring(4096), ring(4 * CHUNK)));
    sockets
        .get_mut::<tcp::Socket>(rx)
        .listen(5000)
        .expect("listening");
    sockets
        .get_mut::<tcp::Socket>(tx)
        .connect(iface.context(), (IpAddress::v4(127, 0, 0, 1), 5000), 49152)
        .expect("connecting");

    let mut poll = |sockets: &mut SocketSet, now: &mut Instant| {
        *now += Duration::from_millis(1);
        iface.poll(*now, &mut dev, sockets);
    };
    for _ in 0..100 {
        poll(&mut sockets, &mut now);
    }
    assert!(sockets.get::<tcp::Socket>(tx).may_send(), "connected");

    // Three times the ring's length, a chunk at a time, each drained before the next.
    let chunk = [0x5a_u8; CHUNK];
    let mut front = None;
    let mut places = std::collections::BTreeSet::new();
    for round in 0..3 * RING / CHUNK {
        let sent = sockets
            .get_mut::<tcp::Socket>(tx)
            .send_slice(&chunk)
            .expect("sending");
        assert_eq!(sent, CHUNK, "round {round}: the send ring has room");
        let mut got = 0;
        for _ in 0..100 {
            poll(&mut sockets, &mut now);
            let s = sockets.get_mut::<tcp::Socket>(rx);
            while s.can_recv() {
                let (n, at) = s
                    .recv(|data| (data.len(), (data.len(), data.as_ptr() as usize)))
                    .expect("receiving");
                got += n;
                places.insert(at - *front.get_or_insert(at));
            }
            if got == CHUNK {
                break;
            }
        }
        assert_eq!(got, CHUNK, "round {round}: the chunk arrived");
    }
    // Every chunk was read from where the first was: the ring's front.
    assert_eq!(
        places.len(),
        1,
        "chunks read at {} places, the farthest {:?} octets past the first",
        places.len(),
        places.last()
    );
}
