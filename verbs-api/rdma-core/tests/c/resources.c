/* Resources through rdma-core's API and verbs.h's inline fast path, on one device, without a
 * connection: prints one line per check for tests/resources.rs. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#define CHECK(what, cond) printf("%s: %s\n", what, (cond) ? "ok" : "FAILED")

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0])
		return 1;
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		return 1;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK("alloc_pd", pd != NULL);

	/* malloc'd, unaligned, with live data before and after in the same pages. */
	size_t len = 10000;
	unsigned char *block = malloc(1 << 20);
	for (size_t i = 0; i < (1 << 20); i++)
		block[i] = (unsigned char)(i * 7 + 3);
	unsigned char *buf = block + 4099;
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE |
				       IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	CHECK("reg_mr", mr && mr->lkey && mr->lkey == mr->rkey && mr->addr == buf &&
	      mr->length == len);
	int intact = 1;
	for (size_t i = 0; i < (1 << 20); i++)
		intact &= block[i] == (unsigned char)(i * 7 + 3);
	CHECK("data intact after reg_mr", intact);
	errno = 0;
	struct ibv_mr *bad = ibv_reg_mr(pd, buf, len, IBV_ACCESS_REMOTE_WRITE);
	CHECK("remote write without local write refused", !bad && errno == EINVAL);
	struct ibv_mr *mr2 = ibv_reg_mr_iova2(pd, block + 200000, 4096, 0x1000,
					      IBV_ACCESS_LOCAL_WRITE);
	CHECK("reg_mr_iova2", mr2 != NULL);

	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK("create_cq", cq != NULL);
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 2,
			 .max_recv_sge = 2, .max_inline_data = 64 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK("create_qp", qp && qp->qp_num && qp->state == IBV_QPS_RESET);
	struct ibv_qp_init_attr ud = ia;
	ud.qp_type = IBV_QPT_UD;
	errno = 0;
	CHECK("UD QP refused", !ibv_create_qp(pd, &ud) && errno == EOPNOTSUPP);
	struct ibv_ah_attr ah = { .port_num = 1 };
	errno = 0;
	CHECK("address handle refused", !ibv_create_ah(pd, &ah) && errno == EOPNOTSUPP);

	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_INIT };
	CHECK("modify to INIT", ibv_modify_qp(qp, &qa, IBV_QP_STATE) == 0);
	qa.qp_state = IBV_QPS_RTS;
	CHECK("RTS without a connection refused", ibv_modify_qp(qp, &qa, IBV_QP_STATE) == EINVAL);
	struct ibv_qp_init_attr qi;
	CHECK("query_qp", ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi) == 0 &&
	      qa.qp_state == IBV_QPS_INIT && qi.send_cq == cq);

	struct ibv_sge sge = { .addr = (uintptr_t)buf + 100, .length = 200, .lkey = mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad_rwr = NULL;
	CHECK("post_recv", ibv_post_recv(qp, &rwr, &bad_rwr) == 0);
	struct ibv_sge wrong = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey + 1 };
	struct ibv_recv_wr rwr2 = { .wr_id = 2, .sg_list = &wrong, .num_sge = 1 };
	CHECK("post_recv with an unknown lkey refused",
	      ibv_post_recv(qp, &rwr2, &bad_rwr) == EINVAL && bad_rwr == &rwr2);
	struct ibv_wc wc[4];
	CHECK("poll_cq empty", ibv_poll_cq(cq, 4, wc) == 0);

	struct ibv_srq_init_attr si = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &si);
	CHECK("create_srq", srq != NULL);
	struct ibv_recv_wr swr = { .wr_id = 3, .sg_list = &sge, .num_sge = 1 };
	CHECK("post_srq_recv", ibv_post_srq_recv(srq, &swr, &bad_rwr) == 0);

	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK("alloc_mw", mw && mw->rkey);
	CHECK("dealloc_mw", ibv_dealloc_mw(mw) == 0);

	CHECK("destroy_qp", ibv_destroy_qp(qp) == 0);
	CHECK("destroy_srq", ibv_destroy_srq(srq) == 0);
	CHECK("destroy_cq", ibv_destroy_cq(cq) == 0);
	CHECK("dereg_mr", ibv_dereg_mr(mr) == 0 && ibv_dereg_mr(mr2) == 0);
	intact = 1;
	for (size_t i = 0; i < (1 << 20); i++)
		intact &= block[i] == (unsigned char)(i * 7 + 3);
	CHECK("data intact after dereg_mr", intact);
	buf[0] ^= 0xff;
	CHECK("memory writable after dereg_mr", buf[0] == (unsigned char)((4099 * 7 + 3) ^ 0xff));
	free(block);
	CHECK("dealloc_pd", ibv_dealloc_pd(pd) == 0);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	printf("done\n");
	return 0;
}
