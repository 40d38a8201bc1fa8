/* ibv_req_notify_cq(cq, 1), solicited only (Verbs section 8.3.4; man ibv_req_notify_cq): the
 * completion channel fires for a received message with the Solicited Event bit (a Send with
 * IBV_SEND_SOLICITED, a Write with Immediate and IBV_SEND_SOLICITED) or an error completion,
 * and not for an unsolicited Send, whose completion is there all the same. The two QPs are
 * connected through rdma_cm in this one process. */
#include "cm_pair.h"
#include <sys/mman.h>

#define PORT 7476

/* The next completion of `cq`, polled for up to 20 s; 0 when there was none. */
static int one_wc(struct ibv_cq *cq, struct ibv_wc *wc)
{
	for (int i = 0; i < 20000; i++) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n != 0)
			return n == 1;
		poll(NULL, 0, 1);
	}
	return 0;
}

/* Posts a signaled `op` of 64 octets from `mr` on `qp`; waits for its completion on `cq`. */
static int send_one(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mr *mr,
		    enum ibv_wr_opcode op, unsigned flags, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)mr->addr, .length = 64, .lkey = mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = 100 + op, .sg_list = &sge, .num_sge = 1, .opcode = op,
		.send_flags = IBV_SEND_SIGNALED | flags,
		.imm_data = htonl(0x5e),
		.wr.rdma = { .remote_addr = raddr, .rkey = rkey },
	}, *bad;
	struct ibv_wc wc;
	return ibv_post_send(qp, &wr, &bad) == 0 && one_wc(cq, &wc) &&
	       wc.status == IBV_WC_SUCCESS;
}

/* Whether one event for `cq` is waiting on `ch` (within `ms`); it is taken and acknowledged. */
static int event_for(struct ibv_comp_channel *ch, struct ibv_cq *cq, int ms)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	if (poll(&p, 1, ms) != 1 || ibv_get_cq_event(ch, &ev_cq, &ev_ctx) != 0)
		return 0;
	ibv_ack_cq_events(ev_cq, 1);
	return ev_cq == cq;
}

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

	/* The server: a CQ on a completion channel, receives posted before accepting. */
	struct ibv_context *sctx = s->verbs;
	struct ibv_pd *spd = ibv_alloc_pd(sctx);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(sctx);
	struct ibv_cq *cq = ibv_create_cq(sctx, 16, NULL, ch, 0);
	struct ibv_qp_init_attr sa = qa;
	sa.send_cq = sa.recv_cq = cq;
	CHECK("server QP on a channel's CQ", ch && cq && rdma_create_qp(s, spd, &sa) == 0);
	/* A mapping each: memory adopted through one context cannot be registered through
	 * another, and two malloc'd buffers may share the heap's pages. */
	char *sbuf = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *smr = ibv_reg_mr(spd, sbuf, 4096,
					IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_recv_wr r[4], *bad;
	struct ibv_sge rs[4];
	for (int i = 0; i < 4; i++) {
		rs[i] = (struct ibv_sge){ .addr = (uintptr_t)sbuf + 256 * i, .length = 256,
					  .lkey = smr->lkey };
		r[i] = (struct ibv_recv_wr){ .wr_id = 11 + i, .sg_list = &rs[i], .num_sge = 1,
					     .next = i < 3 ? &r[i + 1] : NULL };
	}
	CHECK("post four receives", smr && ibv_post_recv(s->qp, r, &bad) == 0);
	CHECK("accept", rdma_accept(s, &cp) == 0);
	CHECK("server established", expect_event(sch, RDMA_CM_EVENT_ESTABLISHED));
	CHECK("client established", expect_event(cch, RDMA_CM_EVENT_ESTABLISHED));
	char *cbuf = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	memset(cbuf, 0x5a, 4096);
	struct ibv_mr *cmr = ibv_reg_mr(c->pd, cbuf, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK("client buffer", cmr != NULL);

	CHECK("arm solicited only", ibv_req_notify_cq(cq, 1) == 0);
	CHECK("unsolicited Send", send_one(c->qp, c->send_cq, cmr, IBV_WR_SEND, 0, 0, 0));
	struct ibv_wc wc;
	CHECK("its receive completes", one_wc(cq, &wc) && wc.wr_id == 11 &&
	      wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.byte_len == 64);
	/* An event, were one wrongly raised, follows the completion within microseconds;
	 * the decisive check is the single event counted below. */
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	CHECK("no event for it", poll(&p, 1, 200) == 0);
	CHECK("solicited Send", send_one(c->qp, c->send_cq, cmr, IBV_WR_SEND,
					 IBV_SEND_SOLICITED, 0, 0));
	CHECK("event for the solicited Send", event_for(ch, cq, 20000));
	CHECK("its receive completes", one_wc(cq, &wc) && wc.wr_id == 12 &&
	      wc.status == IBV_WC_SUCCESS);
	nonblocking(ch->fd);
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	errno = 0;
	CHECK("exactly one event", ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == -1 &&
	      errno == EAGAIN);

	/* Write with Immediate and SE: the Immediate Data carries the SE bit. */
	CHECK("arm solicited only again", ibv_req_notify_cq(cq, 1) == 0);
	CHECK("Write with Immediate, solicited",
	      send_one(c->qp, c->send_cq, cmr, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_SEND_SOLICITED,
		       (uintptr_t)sbuf + 2048, smr->rkey));
	CHECK("event for it", event_for(ch, cq, 20000));
	CHECK("its receive completes with the immediate", one_wc(cq, &wc) && wc.wr_id == 13 &&
	      wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
	      (wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htonl(0x5e));
	CHECK("the Write placed", memcmp(sbuf + 2048, cbuf, 64) == 0);

	/* An error completion fires a solicited-only request too: the last receive is
	 * flushed when the QP goes to ERR. */
	CHECK("arm solicited only once more", ibv_req_notify_cq(cq, 1) == 0);
	struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
	CHECK("server QP to ERR", ibv_modify_qp(s->qp, &err, IBV_QP_STATE) == 0);
	CHECK("event for the flushed receive", event_for(ch, cq, 20000));
	CHECK("the receive flushed", one_wc(cq, &wc) && wc.wr_id == 14 &&
	      wc.status == IBV_WC_WR_FLUSH_ERR);
	printf("done\n");
	return 0;
}
