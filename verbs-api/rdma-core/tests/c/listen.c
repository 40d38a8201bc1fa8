/* The end of a listen. `listen refuse` (run with IWARP_LISTEN_LINGER_MS=0): destroying a
 * listening identifier closes its port at once: it can be listened on again, and a connect
 * while nobody listens is refused (the kernel's iw_cm reports a refused connection as
 * UNREACHABLE with status -ECONNREFUSED), every time, with no request on the old listener's
 * channel. `listen expire` (the default linger): a connect in the linger time is held, then
 * rejected when it ends and the port closes; the next connect is refused. `listen takeover`
 * (a long linger): a request held after the listener's end goes to the identifier that
 * listens on the port next. */
#include "cm_pair.h"

#define PORT 7475

static struct ibv_qp_init_attr qa = {
	.qp_type = IBV_QPT_RC,
	.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
};
static struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1 };

/* A client on `ch` that asked to connect to PORT. */
static struct rdma_cm_id *connecting(struct rdma_event_channel *ch)
{
	struct rdma_cm_id *c = resolved_client(ch, PORT);
	if (!c || rdma_create_qp(c, NULL, &qa) || rdma_connect(c, &cp))
		return NULL;
	return c;
}

/* Whether the next event on `ch` is a refused connect, as the kernel's iw_cm reports it. */
static int refused(struct rdma_event_channel *ch)
{
	struct rdma_cm_event *ev = next_event(ch);
	if (!ev)
		return 0;
	int ok = ev->event == RDMA_CM_EVENT_UNREACHABLE && ev->status == -ECONNREFUSED;
	if (!ok)
		printf("event %s, status %d\n", rdma_event_str(ev->event), ev->status);
	rdma_ack_cm_event(ev);
	return ok;
}

/* Whether `n` connects in a row are each refused. A refusal comes back within microseconds
 * of the connect's reply, so any window in which it could arrive before its identifier is
 * known (and be lost) is met by some of them. */
static int each_refused(struct rdma_event_channel *ch, int n)
{
	for (int i = 0; i < n; i++) {
		struct rdma_cm_id *c = connecting(ch);
		if (!c || !refused(ch)) {
			printf("connect %d of %d\n", i + 1, n);
			return 0;
		}
		rdma_destroy_qp(c);
		rdma_destroy_id(c);
	}
	return 1;
}

/* Whether no event waits on `ch`. */
static int quiet(struct rdma_event_channel *ch)
{
	struct rdma_cm_event *ev;
	nonblocking(ch->fd);
	errno = 0;
	return rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	const char *mode = argc > 1 ? argv[1] : "";
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *l1 = listener(sch, PORT);
	CHECK("listen", l1 != NULL);
	errno = 0;
	CHECK("a second listener on the port: EADDRINUSE",
	      listener(sch, PORT) == NULL && errno == EADDRINUSE);
	CHECK("destroy the listener", rdma_destroy_id(l1) == 0);

	if (!strcmp(mode, "refuse")) {
		struct rdma_cm_id *l2 = listener(sch, PORT);
		CHECK("listen on the port again", l2 != NULL);
		CHECK("destroy that listener", rdma_destroy_id(l2) == 0);
		CHECK("connect", connecting(cch) != NULL);
		CHECK("refused: UNREACHABLE, ECONNREFUSED", refused(cch));
		CHECK("200 more connects, each refused", each_refused(cch, 200));
		CHECK("no request on the server's channel", quiet(sch));
	} else if (!strcmp(mode, "expire")) {
		CHECK("connect in the linger time", connecting(cch) != NULL);
		CHECK("rejected when it ends", expect_event(cch, RDMA_CM_EVENT_REJECTED));
		CHECK("connect after it", connecting(cch) != NULL);
		CHECK("refused: UNREACHABLE, ECONNREFUSED", refused(cch));
		CHECK("no request on the server's channel", quiet(sch));
	} else if (!strcmp(mode, "takeover")) {
		CHECK("connect in the linger time", connecting(cch) != NULL);
		struct rdma_cm_id *l2 = listener(sch, PORT);
		CHECK("listen on the port again", l2 != NULL);
		struct rdma_cm_event *ev = next_event(sch);
		CHECK("the held request comes to the new listener",
		      ev && ev->event == RDMA_CM_EVENT_CONNECT_REQUEST && ev->listen_id == l2);
		CHECK("reject it", ev && rdma_reject(ev->id, NULL, 0) == 0);
		if (ev)
			rdma_ack_cm_event(ev);
		CHECK("the client hears REJECTED", expect_event(cch, RDMA_CM_EVENT_REJECTED));
	} else {
		printf("mode?\n");
		return 1;
	}
	printf("done\n");
	return 0;
}
