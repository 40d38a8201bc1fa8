/* Both ends of an rdma_cm connection in one process: the server on the device of 10.42.0.1,
 * the client on that of 10.42.0.2 (IWARP_RUNTIME_DIR names both endpoints), each with its
 * own event channel, so the order in which the two sides hear their events does not matter. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define CHECK(what, cond) printf("%s: %s\n", what, (cond) ? "ok" : "FAILED")

static inline struct sockaddr_in addr_of(const char *ip, int port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port) };
	inet_pton(AF_INET, ip, &sin.sin_addr);
	return sin;
}

/* The next event on `ch` (waiting up to 20 s), or NULL; the caller acknowledges it. */
static inline struct rdma_cm_event *next_event(struct rdma_event_channel *ch)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	if (poll(&p, 1, 20000) != 1 || rdma_get_cm_event(ch, &ev) != 0)
		return NULL;
	return ev;
}

/* Whether the next event on `ch` is `want`; it is acknowledged. */
static inline int expect_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev = next_event(ch);
	if (!ev) {
		printf("no event (wanted %s)\n", rdma_event_str(want));
		return 0;
	}
	int ok = ev->event == want;
	if (!ok)
		printf("event %s (wanted %s)\n", rdma_event_str(ev->event), rdma_event_str(want));
	rdma_ack_cm_event(ev);
	return ok;
}

/* A client identifier on `ch` with address and route resolved towards 10.42.0.1:`port`. */
static inline struct rdma_cm_id *resolved_client(struct rdma_event_channel *ch, int port)
{
	struct rdma_cm_id *id;
	struct sockaddr_in src = addr_of("10.42.0.2", 0), dst = addr_of("10.42.0.1", port);
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000) ||
	    !expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED) || rdma_resolve_route(id, 2000) ||
	    !expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED))
		return NULL;
	return id;
}

/* A listening identifier on `ch` at 10.42.0.1:`port`, or NULL (errno says why). */
static inline struct rdma_cm_id *listener(struct rdma_event_channel *ch, int port)
{
	struct rdma_cm_id *id;
	struct sockaddr_in sin = addr_of("10.42.0.1", port);
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		return NULL;
	if (rdma_bind_addr(id, (struct sockaddr *)&sin) || rdma_listen(id, 4)) {
		int e = errno;
		rdma_destroy_id(id);
		errno = e;
		return NULL;
	}
	return id;
}

/* Sets `fd` to O_NONBLOCK. */
static inline void nonblocking(int fd)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}
