/* The extended verbs between two of our endpoints, in one process: every operation posted
 * through the ibv_wr_* API (ibv_wr_post(3)) and every completion read through ibv_cq_ex
 * (ibv_create_cq_ex(3)). The client is on the second device (10.42.0.2), the server on the
 * first (10.42.0.1); they connect with rdma_cm. Each check prints "<what>: ok". */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define CHECK(what, cond) printf("%s: %s\n", what, (cond) ? "ok" : "FAILED")
#define LEN 65536

struct side {
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq_ex *cq;
	struct ibv_qp_ex *qpx;
	char *buf;
	struct ibv_mr *mr;
};

struct got {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	uint32_t byte_len, qp_num, vendor_err, imm;
	unsigned int flags;
};

static void read_current(struct ibv_cq_ex *cq, struct got *g)
{
	g->wr_id = cq->wr_id;
	g->status = cq->status;
	g->opcode = ibv_wc_read_opcode(cq);
	g->byte_len = ibv_wc_read_byte_len(cq);
	g->qp_num = ibv_wc_read_qp_num(cq);
	g->vendor_err = ibv_wc_read_vendor_err(cq);
	g->flags = ibv_wc_read_wc_flags(cq);
	g->imm = (g->flags & IBV_WC_WITH_INV) ? ibv_wc_read_invalidated_rkey(cq)
					       : ntohl(ibv_wc_read_imm_data(cq));
	/* On stderr, which the test shows when a check fails. */
	fprintf(stderr, "completion wr_id %llu status %d opcode %d len %u flags %#x imm %#x\n",
		(unsigned long long)g->wr_id, g->status, g->opcode, g->byte_len, g->flags, g->imm);
}

/* Up to n completions into g: waits (at most 20 s) for the first, then takes what
 * ibv_next_poll has in the same poll. Returns how many. */
static int poll_some(struct ibv_cq_ex *cq, struct got *g, int n)
{
	struct ibv_poll_cq_attr attr = { 0 };
	int r = ENOENT;
	for (int tries = 0; tries < 400000 && r == ENOENT; tries++) {
		r = ibv_start_poll(cq, &attr);
		if (r == ENOENT)
			usleep(50);
	}
	if (r) {
		fprintf(stderr, "no completion: %s\n", strerror(r));
		return 0;
	}
	int k = 0;
	do {
		read_current(cq, &g[k++]);
	} while (k < n && ibv_next_poll(cq) == 0);
	ibv_end_poll(cq);
	return k;
}

/* Exactly n completions (several polls if need be). */
static int poll_n(struct ibv_cq_ex *cq, struct got *g, int n)
{
	int k = 0;
	while (k < n) {
		int m = poll_some(cq, g + k, n - k);
		if (!m)
			break;
		k += m;
	}
	return k;
}

/* Whether `want` appears at `at` within 20 s: a Write's completion at its sender says the
 * data left, not that the peer placed it. */
static int lands(const char *at, const char *want, size_t n)
{
	for (int tries = 0; tries < 400000; tries++) {
		__sync_synchronize();
		if (memcmp(at, want, n) == 0)
			return 1;
		usleep(50);
	}
	return 0;
}

static int one(struct ibv_cq_ex *cq, struct got *g)
{
	return poll_n(cq, g, 1) == 1;
}

static int wait_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
		      struct rdma_cm_id **id)
{
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ch, &ev))
		return 0;
	int ok = ev->event == want;
	if (!ok)
		fprintf(stderr, "event %s, wanted %s\n", rdma_event_str(ev->event),
			rdma_event_str(want));
	if (id)
		*id = ev->id;
	rdma_ack_cm_event(ev);
	return ok;
}

static int setup(struct side *s, int access)
{
	struct ibv_context *ctx = s->id->verbs;
	s->pd = ibv_alloc_pd(ctx);
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 64,
		.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM,
	};
	s->cq = ibv_create_cq_ex(ctx, &ca);
	s->buf = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	s->mr = ibv_reg_mr(s->pd, s->buf, LEN, access);
	struct ibv_qp_init_attr_ex qa = {
		.send_cq = ibv_cq_ex_to_cq(s->cq),
		.recv_cq = ibv_cq_ex_to_cq(s->cq),
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 2,
			 .max_recv_sge = 2, .max_inline_data = 64 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = s->pd,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
				  IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_RDMA_WRITE |
				  IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
				  IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
				  IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV |
				  IBV_QP_EX_WITH_BIND_MW,
	};
	if (!s->pd || !s->cq || s->buf == MAP_FAILED || !s->mr ||
	    rdma_create_qp_ex(s->id, &qa))
		return 0;
	s->qpx = ibv_qp_to_qp_ex(s->id->qp);
	return s->qpx != NULL;
}

static int post_recvs(struct side *s, int n)
{
	for (int i = 0; i < n; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)s->buf + 1024 * i, .length = 1024,
				       .lkey = s->mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 1000 + i, .sg_list = &sge, .num_sge = 1 }, *bad;
		if (ibv_post_recv(s->id->qp, &wr, &bad))
			return 0;
	}
	return 1;
}

/* Before any connection: what creation refuses. */
static void refusals(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq_ex *cq)
{
	struct ibv_cq_init_attr_ex ts = { .cqe = 4,
					  .wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP };
	errno = 0;
	CHECK("cq_ex with completion timestamps refused",
	      !ibv_create_cq_ex(ctx, &ts) && errno == EOPNOTSUPP);
	struct ibv_qp_init_attr_ex qa = {
		.send_cq = ibv_cq_ex_to_cq(cq), .recv_cq = ibv_cq_ex_to_cq(cq),
		.qp_type = IBV_QPT_RC, .cap = { .max_send_wr = 4, .max_recv_wr = 4 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_TSO,
	};
	errno = 0;
	CHECK("qp_ex asking for TSO refused", !ibv_create_qp_ex(ctx, &qa) && errno == EOPNOTSUPP);
	qa.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &qa);
	CHECK("ibv_create_qp_ex", qp && ibv_qp_to_qp_ex(qp) &&
	      (void *)ibv_qp_to_qp_ex(qp) == (void *)qp);
	/* An error found while building is reported by wr_complete, and nothing is posted. */
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
	ibv_wr_start(x);
	x->wr_id = 1;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_ud_addr(x, NULL, 1, 1);
	CHECK("UD address on an RC QP: wr_complete EINVAL", ibv_wr_complete(x) == EINVAL);
	ibv_wr_start(x);
	ibv_wr_send(x);
	ibv_wr_set_sge(x, 0xdead, 0, 8);
	CHECK("unregistered lkey: wr_complete EINVAL", ibv_wr_complete(x) == EINVAL);
	ibv_destroy_qp(qp);
}

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listen_id;
	struct side c = { 0 }, s = { 0 };
	CHECK("create ids", ch && rdma_create_id(ch, &listen_id, NULL, RDMA_PS_TCP) == 0 &&
	      rdma_create_id(ch, &c.id, NULL, RDMA_PS_TCP) == 0);
	struct sockaddr_in srv = { .sin_family = AF_INET, .sin_port = htons(7490) };
	struct sockaddr_in cli = { .sin_family = AF_INET };
	inet_pton(AF_INET, "10.42.0.1", &srv.sin_addr);
	inet_pton(AF_INET, "10.42.0.2", &cli.sin_addr);
	CHECK("listen", rdma_bind_addr(listen_id, (struct sockaddr *)&srv) == 0 &&
	      rdma_listen(listen_id, 1) == 0);
	CHECK("resolve", rdma_resolve_addr(c.id, (struct sockaddr *)&cli,
					   (struct sockaddr *)&srv, 2000) == 0 &&
	      wait_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL) &&
	      rdma_resolve_route(c.id, 2000) == 0 &&
	      wait_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL));
	int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		  IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND;
	CHECK("client: cq_ex, qp_ex, region", setup(&c, all));
	refusals(c.id->verbs, c.pd, c.cq);
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1 };
	CHECK("connect", rdma_connect(c.id, &cp) == 0);
	CHECK("connect request", wait_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, &s.id));
	CHECK("server: cq_ex, qp_ex, region", setup(&s, all) && post_recvs(&s, 24));
	CHECK("accept", rdma_accept(s.id, &cp) == 0);
	CHECK("established", wait_event(ch, RDMA_CM_EVENT_ESTABLISHED, NULL) &&
	      wait_event(ch, RDMA_CM_EVENT_ESTABLISHED, NULL));

	struct ibv_qp_ex *x = c.qpx;
	uint32_t srk = s.mr->rkey, clk = c.mr->lkey;
	uint64_t sva = (uintptr_t)s.buf, cva = (uintptr_t)c.buf;
	struct got g[8];

	/* Send, inline. */
	ibv_wr_start(x);
	x->wr_id = 1;
	x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_send(x);
	ibv_wr_set_inline_data(x, "inline hello", 12);
	CHECK("send inline: wr_complete", ibv_wr_complete(x) == 0);
	CHECK("send inline: sender's completion", one(c.cq, g) && g[0].wr_id == 1 &&
	      g[0].status == IBV_WC_SUCCESS && g[0].opcode == IBV_WC_SEND &&
	      g[0].vendor_err == 0);
	CHECK("send inline: received", one(s.cq, g) && g[0].wr_id == 1000 &&
	      g[0].opcode == IBV_WC_RECV && g[0].byte_len == 12 &&
	      g[0].qp_num == s.id->qp->qp_num && !(g[0].flags & IBV_WC_WITH_IMM) &&
	      memcmp(s.buf, "inline hello", 12) == 0);

	/* Send from two SGEs. (Send with Immediate needs RDMAP version 2, which rdma_cm
	 * connections do not negotiate: the QP would fail it as ibv_post_send does.) */
	memcpy(c.buf, "abcd", 4);
	memcpy(c.buf + 100, "efgh", 4);
	struct ibv_sge two[2] = { { cva, 4, clk }, { cva + 100, 4, clk } };
	ibv_wr_start(x);
	x->wr_id = 2;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_sge_list(x, 2, two);
	CHECK("send, SGE list", ibv_wr_complete(x) == 0 && one(c.cq, g) &&
	      g[0].wr_id == 2 && g[0].status == IBV_WC_SUCCESS);
	CHECK("send, SGE list: received", one(s.cq, g) && g[0].wr_id == 1001 &&
	      g[0].byte_len == 8 && !(g[0].flags & IBV_WC_WITH_IMM) &&
	      memcmp(s.buf + 1024, "abcdefgh", 8) == 0);

	/* RDMA Write and Write with Immediate in one critical region. */
	memset(c.buf, 'w', 300);
	ibv_wr_start(x);
	x->wr_id = 3;
	x->wr_flags = 0;
	ibv_wr_rdma_write(x, srk, sva + 40000);
	ibv_wr_set_sge(x, clk, cva, 300);
	x->wr_id = 4;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write_imm(x, srk, sva + 41000, htonl(77));
	ibv_wr_set_sge(x, clk, cva, 10);
	CHECK("write + write with imm: one wr_complete", ibv_wr_complete(x) == 0);
	CHECK("only the signaled one completes", one(c.cq, g) && g[0].wr_id == 4 &&
	      g[0].opcode == IBV_WC_RDMA_WRITE && g[0].status == IBV_WC_SUCCESS);
	CHECK("write with imm: received", one(s.cq, g) &&
	      g[0].opcode == IBV_WC_RECV_RDMA_WITH_IMM && g[0].imm == 77 &&
	      (g[0].flags & IBV_WC_WITH_IMM) && lands(s.buf + 40299, "w", 1) &&
	      lands(s.buf + 41009, "w", 1));

	/* Inline RDMA Write from a list of buffers. */
	ibv_wr_start(x);
	x->wr_id = 5;
	x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_rdma_write(x, srk, sva + 42000);
	struct ibv_data_buf bufs[2] = { { "left-", 5 }, { "right", 5 } };
	ibv_wr_set_inline_data_list(x, 2, bufs);
	CHECK("inline write, buffer list", ibv_wr_complete(x) == 0 && one(c.cq, g) &&
	      g[0].wr_id == 5 && g[0].status == IBV_WC_SUCCESS &&
	      lands(s.buf + 42000, "left-right", 10));

	/* RDMA Read. */
	memcpy(s.buf + 43000, "read me", 7);
	ibv_wr_start(x);
	x->wr_id = 6;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(x, srk, sva + 43000);
	ibv_wr_set_sge(x, clk, cva + 2000, 7);
	CHECK("rdma read", ibv_wr_complete(x) == 0 && one(c.cq, g) && g[0].wr_id == 6 &&
	      g[0].opcode == IBV_WC_RDMA_READ && g[0].status == IBV_WC_SUCCESS &&
	      memcmp(c.buf + 2000, "read me", 7) == 0);

	/* Atomics. */
	uint64_t *target = (uint64_t *)(s.buf + 44000), *orig = (uint64_t *)(c.buf + 3000);
	*target = 40;
	ibv_wr_start(x);
	x->wr_id = 7;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_fetch_add(x, srk, sva + 44000, 2);
	ibv_wr_set_sge(x, clk, cva + 3000, 8);
	CHECK("fetch and add", ibv_wr_complete(x) == 0 && one(c.cq, g) && g[0].wr_id == 7 &&
	      g[0].opcode == IBV_WC_FETCH_ADD && g[0].status == IBV_WC_SUCCESS &&
	      *orig == 40 && *(volatile uint64_t *)target == 42);
	ibv_wr_start(x);
	x->wr_id = 8;
	ibv_wr_atomic_cmp_swp(x, srk, sva + 44000, 42, 99);
	ibv_wr_set_sge(x, clk, cva + 3000, 8);
	CHECK("compare and swap", ibv_wr_complete(x) == 0 && one(c.cq, g) && g[0].wr_id == 8 &&
	      g[0].opcode == IBV_WC_COMP_SWAP && g[0].status == IBV_WC_SUCCESS &&
	      *orig == 42 && *(volatile uint64_t *)target == 99);

	/* wr_abort drops what was built; the next region posts only its own. */
	ibv_wr_start(x);
	x->wr_id = 9;
	ibv_wr_send(x);
	ibv_wr_set_inline_data(x, "dropped", 7);
	ibv_wr_abort(x);
	ibv_wr_start(x);
	x->wr_id = 10;
	x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_send(x);
	ibv_wr_set_inline_data(x, "kept", 4);
	CHECK("after wr_abort", ibv_wr_complete(x) == 0 && one(c.cq, g) && g[0].wr_id == 10);
	CHECK("the aborted send never arrives", one(s.cq, g) && g[0].byte_len == 4 &&
	      memcmp(s.buf + 3 * 1024, "kept", 4) == 0);

	/* Server: bind a type 2 window through its own wr API; the client writes through it,
	 * then invalidates it with Send with Invalidate. */
	struct ibv_mw *mw = ibv_alloc_mw(s.pd, IBV_MW_TYPE_2);
	struct ibv_mw_bind_info bi = { .mr = s.mr, .addr = sva + 50000, .length = 4096,
				       .mw_access_flags = IBV_ACCESS_REMOTE_WRITE };
	ibv_wr_start(s.qpx);
	s.qpx->wr_id = 20;
	s.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(s.qpx, mw, mw->rkey, &bi);
	CHECK("bind window", mw && ibv_wr_complete(s.qpx) == 0 && one(s.cq, g) &&
	      g[0].wr_id == 20 && g[0].opcode == IBV_WC_BIND_MW && g[0].status == IBV_WC_SUCCESS);
	memset(c.buf + 5000, 'm', 16);
	ibv_wr_start(x);
	x->wr_id = 11;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, mw->rkey, sva + 50000);
	ibv_wr_set_sge(x, clk, cva + 5000, 16);
	CHECK("write through the window", ibv_wr_complete(x) == 0 && one(c.cq, g) &&
	      g[0].status == IBV_WC_SUCCESS && lands(s.buf + 50015, "m", 1));
	ibv_wr_start(x);
	x->wr_id = 12;
	x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED;
	ibv_wr_send_inv(x, mw->rkey);
	CHECK("send with invalidate", ibv_wr_complete(x) == 0 && one(c.cq, g) &&
	      g[0].wr_id == 12 && g[0].status == IBV_WC_SUCCESS);
	CHECK("receiver sees the invalidated rkey", one(s.cq, g) &&
	      (g[0].flags & IBV_WC_WITH_INV) && g[0].imm == mw->rkey);

	/* Client: bind its own window, then Local Invalidate it. */
	struct ibv_mw *cmw = ibv_alloc_mw(c.pd, IBV_MW_TYPE_2);
	struct ibv_mw_bind_info cbi = { .mr = c.mr, .addr = cva, .length = 4096,
					.mw_access_flags = IBV_ACCESS_REMOTE_READ };
	ibv_wr_start(x);
	x->wr_id = 13;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(x, cmw, cmw->rkey, &cbi);
	x->wr_id = 14;
	ibv_wr_local_inv(x, cmw->rkey);
	CHECK("bind + local invalidate", cmw && ibv_wr_complete(x) == 0 && poll_n(c.cq, g, 2) == 2 &&
	      g[0].wr_id == 13 && g[0].opcode == IBV_WC_BIND_MW && g[1].wr_id == 14 &&
	      g[1].opcode == IBV_WC_LOCAL_INV && g[1].status == IBV_WC_SUCCESS);

	/* Several in one region, read back with ibv_next_poll. */
	ibv_wr_start(x);
	for (int i = 0; i < 4; i++) {
		x->wr_id = 30 + i;
		x->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(x, srk, sva + 60000 + 8 * i);
		ibv_wr_set_sge(x, clk, cva, 8);
	}
	CHECK("four in one region", ibv_wr_complete(x) == 0 && poll_n(c.cq, g, 4) == 4 &&
	      g[0].wr_id == 30 && g[1].wr_id == 31 && g[2].wr_id == 32 && g[3].wr_id == 33);

	/* The same CQ through the classic ibv_poll_cq. */
	ibv_wr_start(x);
	x->wr_id = 40;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, srk, sva + 61000);
	ibv_wr_set_sge(x, clk, cva, 8);
	struct ibv_wc wc;
	int n = 0;
	if (ibv_wr_complete(x) == 0)
		for (int tries = 0; tries < 400000 && n == 0; tries++) {
			n = ibv_poll_cq(ibv_cq_ex_to_cq(c.cq), 1, &wc);
			if (!n)
				usleep(50);
		}
	CHECK("ibv_poll_cq on ibv_cq_ex_to_cq", n == 1 && wc.wr_id == 40 &&
	      wc.opcode == IBV_WC_RDMA_WRITE && wc.status == IBV_WC_SUCCESS);

	/* The invalidated window refuses the peer: its Terminate (RFC 5040 section 7) takes the
	 * client's QP to error, so the Read behind the Write does not succeed. */
	ibv_wr_start(x);
	x->wr_id = 50;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, mw->rkey, sva + 50000);
	ibv_wr_set_sge(x, clk, cva, 8);
	x->wr_id = 51;
	ibv_wr_rdma_read(x, srk, sva);
	ibv_wr_set_sge(x, clk, cva + 8000, 8);
	CHECK("access through the invalidated window is refused", ibv_wr_complete(x) == 0 &&
	      poll_n(c.cq, g, 2) == 2 && g[1].wr_id == 51 && g[1].status != IBV_WC_SUCCESS);

	rdma_disconnect(c.id);
	printf("done\n");
	return 0;
}
