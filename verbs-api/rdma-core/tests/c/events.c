/* A completion channel as a file descriptor: non-blocking (EAGAIN), poll(2) readable once a
 * completion comes after ibv_req_notify_cq, and the event names the CQ. The completions
 * come from moving a QP with posted receives to ERR (they are flushed). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <infiniband/verbs.h>

#define CHECK(what, cond) printf("%s: %s\n", what, (cond) ? "ok" : "FAILED")

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0])
		return 1;
	struct ibv_context *ctx = ibv_open_device(list[0]);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK("create_comp_channel", ch && ch->fd >= 0);
	int fl = fcntl(ch->fd, F_GETFL);
	fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
	int token;
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, &token, ch, 0);
	CHECK("create_cq on the channel", cq != NULL);
	CHECK("destroy of a channel in use refused", ibv_destroy_comp_channel(ch) == EBUSY);
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	char *buf = malloc(4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_recv_wr r2 = { .wr_id = 2, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr r1 = { .wr_id = 1, .sg_list = &sge, .num_sge = 1, .next = &r2 }, *bad;
	CHECK("post_recv", ibv_post_recv(qp, &r1, &bad) == 0);

	struct ibv_cq *ev_cq;
	void *ev_ctx;
	errno = 0;
	CHECK("no event yet: EAGAIN", ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == -1 &&
	      errno == EAGAIN);
	CHECK("req_notify_cq", ibv_req_notify_cq(cq, 0) == 0);
	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_ERR };
	CHECK("modify to ERR", ibv_modify_qp(qp, &qa, IBV_QP_STATE) == 0);
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	CHECK("channel fd readable", poll(&p, 1, 20000) == 1 && (p.revents & POLLIN));
	CHECK("get_cq_event names the CQ", ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 &&
	      ev_cq == cq && ev_ctx == &token);
	ibv_ack_cq_events(cq, 1);
	errno = 0;
	CHECK("one event only", ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == -1 && errno == EAGAIN);
	struct ibv_wc wc[4];
	int n = 0;
	for (int tries = 0; n < 2 && tries < 2000; tries++) {
		int k = ibv_poll_cq(cq, 4 - n, wc + n);
		if (k < 0)
			break;
		n += k;
		if (n < 2)
			poll(NULL, 0, 10);
	}
	CHECK("both receives flushed", n == 2 && wc[0].wr_id == 1 && wc[1].wr_id == 2 &&
	      wc[0].status == IBV_WC_WR_FLUSH_ERR && wc[1].status == IBV_WC_WR_FLUSH_ERR);

	CHECK("destroy_qp", ibv_destroy_qp(qp) == 0);
	CHECK("destroy_cq", ibv_destroy_cq(cq) == 0);
	CHECK("destroy_comp_channel", ibv_destroy_comp_channel(ch) == 0);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	printf("done\n");
	return 0;
}
