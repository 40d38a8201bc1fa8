/*
 * extensions.c — the rest of the C ABI between two processes: a shared receive queue with its
 * limit event, a memory window bound and written through, a fast-registered STag read through,
 * Local Invalidate, and the Terminate a stale STag earns, seen as asynchronous events on both
 * sides.
 *
 *   extensions server RUNTIME_DIR PORT
 *   extensions client RUNTIME_DIR IPV4 PORT
 *
 * Build: cc -o extensions extensions.c -I../include -L<target dir> -liwarpverbs
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "iwarp_verbs.h"

#define BUF (1 << 20)
#define SLOT 4096
#define OUT 65536          /* what we send from */
#define WINDOW 8192        /* the window covers [WINDOW, WINDOW + 4096) of the server's region */
#define FAST 16384         /* the fast-registered STag covers [FAST, FAST + 4096) */
#define SINK 32768         /* where the client's Reads land */
/* The regions are VA-based, their first octet addressed as VA: windows bind only to such
 * regions (Verbs figure 19). */
#define VA 0x40000000ull

static const char *who = "extensions";

static void die(const char *what) {
    fprintf(stderr, "%s: %s: %s\n", who, what, iwv_last_error());
    exit(1);
}

static void fail(const char *what) {
    fprintf(stderr, "%s: %s\n", who, what);
    exit(1);
}

struct side {
    iwv_context *ctx;
    iwv_pd *pd;
    iwv_cq *cq;
    iwv_qp *qp;
    iwv_buffer *buf;
    iwv_mr *mr;
    uint8_t *mem;
};

static void open_side(struct side *s, const char *dir) {
    if (!(s->ctx = iwv_open(dir))) die("open");
    if (!(s->pd = iwv_alloc_pd(s->ctx))) die("alloc_pd");
    if (!(s->cq = iwv_create_cq(s->ctx, 32))) die("create_cq");
    if (!(s->buf = iwv_alloc_buffer(s->ctx, BUF))) die("alloc_buffer");
    s->mem = iwv_buffer_ptr(s->buf);
    s->mr = iwv_reg_mr_va(s->pd, s->buf, 0, BUF,
                          IWV_ACCESS_LOCAL_WRITE | IWV_ACCESS_REMOTE_READ |
                              IWV_ACCESS_REMOTE_WRITE | IWV_ACCESS_BIND,
                          VA);
    if (!s->mr) die("reg_mr");
}

/* What open_side made, in reverse, once the QP (and what else used the region) is gone:
 * the region must deregister, so nothing may still point into it. */
static void close_side(struct side *s) {
    if (iwv_dereg_mr(s->mr)) die("dereg_mr");
    iwv_free_buffer(s->buf);
    iwv_destroy_cq(s->cq);
    iwv_dealloc_pd(s->pd);
    iwv_close(s->ctx);
}

static struct iwv_wc wait_wc(struct side *s) {
    struct iwv_wc wc;
    int n = iwv_wait_cq(s->cq, 20000, &wc);
    if (n < 0) die("wait_cq");
    if (n == 0) fail("no completion in 20 s");
    return wc;
}

static struct iwv_wc expect(struct side *s, uint64_t wr_id, int opcode) {
    struct iwv_wc wc = wait_wc(s);
    if (wc.wr_id != wr_id || wc.status != IWV_WC_SUCCESS || wc.opcode != opcode) {
        fprintf(stderr, "%s: completion wr_id %" PRIu64 " status %d opcode %d, wanted %" PRIu64
                        " success opcode %d\n", who, wc.wr_id, wc.status, wc.opcode, wr_id, opcode);
        exit(1);
    }
    return wc;
}

static void send_msg(struct side *s, uint64_t wr_id, const void *msg, uint32_t len) {
    memcpy(s->mem + OUT, msg, len);
    struct iwv_sge sge = {s->mr, OUT, len};
    struct iwv_send_wr wr = {.wr_id = wr_id, .opcode = IWV_WR_SEND, .sg_list = &sge,
                             .num_sge = 1, .signaled = 1};
    if (iwv_post_send(s->qp, &wr)) die("post_send");
    expect(s, wr_id, IWV_WC_SEND);
}

static struct iwv_async_event async_event(struct side *s, int type) {
    struct iwv_async_event ev;
    for (;;) {
        int n = iwv_get_async_event(s->ctx, 20000, &ev);
        if (n < 0) die("get_async_event");
        if (n == 0) fail("no asynchronous event in 20 s");
        if (ev.type == type) return ev;
        printf("%s: (event %d on %u, not the one awaited)\n", who, ev.type, ev.id);
    }
}

static void print_terminate(const struct iwv_async_event *ev) {
    printf("%s: Terminate %s on QP %u: layer %u type %u code %u\n", who,
           ev->received ? "received" : "sent", ev->id, ev->layer, ev->etype, ev->code);
}

static int server(const char *dir, uint16_t port) {
    who = "server";
    struct side s;
    open_side(&s, dir);
    /* The QP takes its receives from an S-RQ of 4, armed at 3. */
    iwv_srq *srq = iwv_create_srq(s.pd, 8);
    if (!srq) die("create_srq");
    for (int i = 0; i < 4; i++) {
        struct iwv_sge sge = {s.mr, (uint64_t)i * SLOT + 196608, SLOT};
        if (iwv_post_srq_recv(srq, 100 + (uint64_t)i, &sge, 1)) die("post_srq_recv");
    }
    if (iwv_arm_srq_limit(srq, 9) == 0) fail("a limit above the depth was accepted");
    if (iwv_arm_srq_limit(srq, 3)) die("arm_srq_limit");
    uint32_t depth, limit;
    if (iwv_query_srq(srq, &depth, &limit) || depth != 8 || limit != 3) die("query_srq");
    if (!(s.qp = iwv_create_qp_srq(s.pd, s.cq, s.cq, srq, 16))) die("create_qp_srq");
    if (iwv_listen(s.ctx, port)) die("listen");
    printf("server: listening on %u\n", port);
    fflush(stdout);
    if (iwv_accept(s.ctx, s.qp, NULL, 0, 20000, NULL)) die("accept");

    /* Two Sends leave 2 receives: fewer than 3, one limit event. */
    expect(&s, 100, IWV_WC_RECV);
    expect(&s, 101, IWV_WC_RECV);
    struct iwv_async_event ev = async_event(&s, IWV_EVENT_SRQ_LIMIT);
    if (ev.id != iwv_srq_num(srq)) fail("the limit event names another S-RQ");
    printf("server: S-RQ limit event ok\n");

    /* A window over [WINDOW, +4096) for remote writes; a fast-registered STag over
     * [FAST, +4096) for remote reads, addressed from 0. */
    iwv_mw *mw = iwv_alloc_mw(s.pd);
    if (!mw) die("alloc_mw");
    if (iwv_post_bind_mw(s.qp, 1, mw, s.mr, VA + WINDOW, 4096, IWV_ACCESS_REMOTE_WRITE)) die("bind_mw");
    expect(&s, 1, IWV_WC_BIND_MW);
    iwv_fastreg *fr = iwv_alloc_fastreg_stag(s.pd);
    if (!fr) die("alloc_fastreg_stag");
    memcpy(s.mem + FAST, "fast-registered", 15);
    if (iwv_post_fast_reg(s.qp, 2, fr, s.mr, FAST, 4096, IWV_ACCESS_REMOTE_READ)) die("fast_reg");
    expect(&s, 2, IWV_WC_FAST_REG);
    /* While the window is bound into it, the region stays registered. */
    if (iwv_dereg_mr(s.mr) == 0) fail("a region with a bound window was deregistered");
    uint32_t stags[2] = {iwv_mw_stag(mw), iwv_fastreg_stag(fr)};
    send_msg(&s, 3, stags, sizeof stags);
    printf("server: window %#x and fast-register %#x sent\n", stags[0], stags[1]);

    /* "done": the client wrote through the window and read through the STag. */
    expect(&s, 102, IWV_WC_RECV);
    if (memcmp(s.mem + WINDOW + 16, "through the window", 18)) fail("the window write is missing");
    printf("server: write through the window ok\n");

    /* Invalidate the fast-registered STag; the client's next Read through it is refused. */
    if (iwv_post_local_inv(s.qp, 4, stags[1])) die("local_inv");
    expect(&s, 4, IWV_WC_LOCAL_INV);
    send_msg(&s, 5, "invalidated", 11);
    ev = async_event(&s, IWV_EVENT_QP_TERMINATED);
    print_terminate(&ev);
    if (ev.received || ev.id != iwv_qp_num(s.qp)) fail("the server should have sent it");
    printf("server: ok\n");

    iwv_destroy_qp(s.qp);
    iwv_dealloc_mw(mw);
    iwv_dealloc_fastreg_stag(fr);
    iwv_destroy_srq(srq);
    close_side(&s);
    return 0;
}

static int client(const char *dir, const char *ip, uint16_t port) {
    who = "client";
    struct side s;
    open_side(&s, dir);
    if (!(s.qp = iwv_create_qp(s.pd, s.cq, s.cq, 16))) die("create_qp");
    for (int i = 0; i < 2; i++) {
        struct iwv_sge sge = {s.mr, (uint64_t)i * SLOT, SLOT};
        if (iwv_post_recv(s.qp, 200 + (uint64_t)i, &sge, 1)) die("post_recv");
    }
    /* The server may not listen yet: a refused connection leaves the QP ready for another. */
    int tries = 0;
    while (iwv_connect(s.ctx, s.qp, ip, port, NULL, 0, 20000, NULL)) {
        if (++tries > 100) die("connect");
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    send_msg(&s, 1, "one", 3);
    send_msg(&s, 2, "two", 3);

    struct iwv_wc wc = expect(&s, 200, IWV_WC_RECV);
    if (wc.byte_len != 8) fail("the STag message has the wrong length");
    uint32_t stags[2];
    memcpy(stags, s.mem, sizeof stags);

    /* Write through the window, read through the fast-registered STag. */
    memcpy(s.mem + OUT, "through the window", 18);
    struct iwv_sge wsge = {s.mr, OUT, 18};
    struct iwv_send_wr w = {.wr_id = 3, .opcode = IWV_WR_RDMA_WRITE, .sg_list = &wsge,
                            .num_sge = 1, .rkey = stags[0], .remote_addr = VA + WINDOW + 16,
                            .signaled = 1};
    if (iwv_post_send(s.qp, &w)) die("post_send write");
    expect(&s, 3, IWV_WC_RDMA_WRITE);
    struct iwv_sge rsge = {s.mr, SINK, 15};
    struct iwv_send_wr r = {.wr_id = 4, .opcode = IWV_WR_RDMA_READ, .sg_list = &rsge,
                            .num_sge = 1, .rkey = stags[1], .remote_addr = 0, .signaled = 1};
    if (iwv_post_send(s.qp, &r)) die("post_send read");
    expect(&s, 4, IWV_WC_RDMA_READ);
    if (memcmp(s.mem + SINK, "fast-registered", 15)) fail("the read brought the wrong octets");
    printf("client: read through the fast-registered STag ok\n");
    send_msg(&s, 5, "done", 4);

    /* Once invalidated, the same Read is refused: an error completion and a Terminate. */
    expect(&s, 201, IWV_WC_RECV);
    r.wr_id = 6;
    if (iwv_post_send(s.qp, &r)) die("post_send read");
    wc = wait_wc(&s);
    if (wc.wr_id != 6 || wc.status == IWV_WC_SUCCESS) fail("a Read through an invalidated STag succeeded");
    printf("client: read after invalidate completed with status %d\n", wc.status);
    struct iwv_async_event ev = async_event(&s, IWV_EVENT_QP_TERMINATED);
    print_terminate(&ev);
    if (!ev.received || ev.id != iwv_qp_num(s.qp)) fail("the client should have received it");
    printf("client: ok\n");

    iwv_destroy_qp(s.qp);
    close_side(&s);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "server")) return server(argv[2], (uint16_t)atoi(argv[3]));
    if (argc == 5 && !strcmp(argv[1], "client"))
        return client(argv[2], argv[3], (uint16_t)atoi(argv[4]));
    fprintf(stderr, "usage: extensions server DIR PORT | extensions client DIR IPV4 PORT\n");
    return 2;
}
