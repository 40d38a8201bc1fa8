/* Destroying a listening rdma_cm identifier stops listening on its port: the port can be
 * listened on again, and a connect to it, while nobody listens, is refused at once (the
 * kernel's iw_cm reports a refused connection as UNREACHABLE) without a CONNECT_REQUEST on
 * the destroyed listener's channel. */
#include "cm_pair.h"

#define PORT 7475

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *l1 = listener(sch, PORT);
	CHECK("listen", l1 != NULL);
	errno = 0;
	CHECK("a second listener on the port: EADDRINUSE",
	      listener(sch, PORT) == NULL && errno == EADDRINUSE);
	CHECK("destroy the listener", rdma_destroy_id(l1) == 0);
	struct rdma_cm_id *l2 = listener(sch, PORT);
	CHECK("listen on the port again", l2 != NULL);
	CHECK("destroy that listener", rdma_destroy_id(l2) == 0);

	struct rdma_cm_id *c = resolved_client(cch, PORT);
	CHECK("client resolved", c != NULL);
	struct ibv_qp_init_attr qa = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	CHECK("client QP", rdma_create_qp(c, NULL, &qa) == 0);
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1 };
	CHECK("connect", rdma_connect(c, &cp) == 0);
	CHECK("connect refused: UNREACHABLE", expect_event(cch, RDMA_CM_EVENT_UNREACHABLE));
	nonblocking(sch->fd);
	struct rdma_cm_event *ev;
	errno = 0;
	CHECK("no request on the server's channel",
	      rdma_get_cm_event(sch, &ev) == -1 && errno == EAGAIN);
	rdma_destroy_qp(c);
	rdma_destroy_id(c);

	/* Listening again, a connect arrives as a request. */
	struct rdma_cm_id *l3 = listener(sch, PORT);
	CHECK("listen a third time", l3 != NULL);
	c = resolved_client(cch, PORT);
	CHECK("second client resolved", c && rdma_create_qp(c, NULL, &qa) == 0);
	CHECK("connect again", rdma_connect(c, &cp) == 0);
	struct pollfd p = { .fd = sch->fd, .events = POLLIN };
	CHECK("connect request arrives", poll(&p, 1, 20000) == 1 &&
	      rdma_get_cm_event(sch, &ev) == 0 && ev->event == RDMA_CM_EVENT_CONNECT_REQUEST &&
	      ev->listen_id == l3);
	CHECK("reject it", rdma_reject(ev->id, NULL, 0) == 0);
	rdma_ack_cm_event(ev);
	printf("done\n");
	return 0;
}
