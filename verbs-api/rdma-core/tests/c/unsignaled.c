/* Verbs section 8.1.3.1, Signaled Completions: an unsignaled Send that succeeds generates
 * no completion; the signaled one after it does, and only it is polled. (perftest advances
 * its completion count by its moderation for each completion, so a completion for an
 * unsignaled Send makes it stop sending.) */
#include "cm_pair.h"
#include <sys/mman.h>

#define PORT 7477

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *l = listener(sch, PORT);
	struct rdma_cm_id *c = resolved_client(cch, PORT);
	CHECK("listen and resolve", l && c);
	if (!l || !c)
		return 1;
	struct ibv_qp_init_attr qa = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	CHECK("client QP", rdma_create_qp(c, NULL, &qa) == 0);
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1 };
	CHECK("connect", rdma_connect(c, &cp) == 0);
	struct rdma_cm_event *ev = next_event(sch);
	CHECK("connect request", ev && ev->event == RDMA_CM_EVENT_CONNECT_REQUEST);
	if (!ev)
		return 1;
	struct rdma_cm_id *s = ev->id;
	rdma_ack_cm_event(ev);
	/* rdma_create_qp filled in the client's CQs: the server gets its own. */
	struct ibv_qp_init_attr sa = { .qp_type = IBV_QPT_RC, .cap = qa.cap };
	CHECK("server QP", rdma_create_qp(s, NULL, &sa) == 0);
	/* A mapping each: memory adopted through one context cannot be registered through
	 * another, and two malloc'd buffers may share the heap's pages. */
	char *sbuf = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *cbuf = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *smr = ibv_reg_mr(s->pd, sbuf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *cmr = ibv_reg_mr(c->pd, cbuf, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK("buffers", smr && cmr);
	struct ibv_recv_wr r[4], *rbad;
	struct ibv_sge rs[4];
	for (int i = 0; i < 4; i++) {
		rs[i] = (struct ibv_sge){ .addr = (uintptr_t)sbuf + 256 * i, .length = 256,
					  .lkey = smr->lkey };
		r[i] = (struct ibv_recv_wr){ .wr_id = 11 + i, .sg_list = &rs[i], .num_sge = 1,
					     .next = i < 3 ? &r[i + 1] : NULL };
	}
	CHECK("post four receives", ibv_post_recv(s->qp, r, &rbad) == 0);
	CHECK("accept", rdma_accept(s, &cp) == 0);
	CHECK("server established", expect_event(sch, RDMA_CM_EVENT_ESTABLISHED));
	CHECK("client established", expect_event(cch, RDMA_CM_EVENT_ESTABLISHED));

	struct ibv_sge sge = { .addr = (uintptr_t)cbuf, .length = 64, .lkey = cmr->lkey };
	int posted = 0;
	for (int k = 0; k < 4; k++) {
		struct ibv_send_wr wr = {
			.wr_id = k, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
			.send_flags = k == 3 ? IBV_SEND_SIGNALED : 0,
		}, *bad;
		posted += ibv_post_send(c->qp, &wr, &bad) == 0;
	}
	CHECK("three unsignaled Sends and a signaled one", posted == 4);
	/* All four arrive (the receives complete in order), and the Sends complete in order
	 * before the last one's completion is written. */
	struct ibv_wc wc[8];
	int got = 0;
	for (int i = 0; i < 20000 && got < 4; i++) {
		int n = ibv_poll_cq(s->recv_cq, 8 - got, wc + got);
		if (n < 0)
			break;
		got += n;
		if (got < 4)
			poll(NULL, 0, 1);
	}
	CHECK("four receives complete", got == 4 && wc[3].wr_id == 14);
	got = 0;
	for (int i = 0; i < 20000 && got == 0; i++) {
		got = ibv_poll_cq(c->send_cq, 8, wc);
		if (got == 0)
			poll(NULL, 0, 1);
	}
	CHECK("one send completion, the signaled one's", got == 1 && wc[0].wr_id == 3 &&
	      wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_SEND);
	CHECK("no other", ibv_poll_cq(c->send_cq, 8, wc) == 0);
	printf("done\n");
	return 0;
}
