/*
 * pair.c — two C applications over libiwarpverbs: the client runs Send, Send with Immediate,
 * RDMA Write, Write with Immediate, RDMA Read, FetchAdd and CmpSwap against the server and
 * checks every result; the server answers each check with a Send.
 *
 *   pair server RUNTIME_DIR PORT
 *   pair client RUNTIME_DIR IPV4 PORT
 *
 * Build: cc -o pair pair.c -I../include -L<target dir> -liwarpverbs
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "iwarp_verbs.h"

#define BUF (1 << 20)
#define RECV_AT 0          /* 8 receive slots of 4 KiB */
#define SLOT 4096
#define SRC 65536          /* what we send or write from */
#define DST 131072         /* where the peer writes / what it reads */
#define WORD 262144        /* the atomic target */
#define RESULT 270336      /* where atomics return the old value */

static void die(const char *what) {
    fprintf(stderr, "pair: %s: %s\n", what, iwv_last_error());
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

static void post_recv(struct side *s, int slot) {
    struct iwv_sge sge = {s->mr, RECV_AT + (uint64_t)slot * SLOT, SLOT};
    if (iwv_post_recv(s->qp, (uint64_t)slot, &sge, 1)) die("post_recv");
}

static void open_side(struct side *s, const char *dir) {
    if (!(s->ctx = iwv_open(dir))) die("open");
    if (!(s->pd = iwv_alloc_pd(s->ctx))) die("alloc_pd");
    if (!(s->cq = iwv_create_cq(s->ctx, 32))) die("create_cq");
    /* Modify CQ before use: twice the size, and Query CQ says so. */
    if (iwv_resize_cq(s->cq, 64) != 0 || iwv_query_cq(s->cq) != 64) die("resize_cq");
    if (!(s->qp = iwv_create_qp(s->pd, s->cq, s->cq, 32))) die("create_qp");
    if (!(s->buf = iwv_alloc_buffer(s->ctx, BUF))) die("alloc_buffer");
    s->mem = iwv_buffer_ptr(s->buf);
    s->mr = iwv_reg_mr(s->pd, s->buf, 0, BUF,
                       IWV_ACCESS_LOCAL_WRITE | IWV_ACCESS_REMOTE_READ |
                           IWV_ACCESS_REMOTE_WRITE | IWV_ACCESS_REMOTE_ATOMIC);
    if (!s->mr) die("reg_mr");
    for (int i = 0; i < 8; i++) post_recv(s, i);
}

static void close_side(struct side *s) {
    iwv_destroy_qp(s->qp);
    if (iwv_dereg_mr(s->mr)) die("dereg_mr");
    iwv_free_buffer(s->buf);
    iwv_destroy_cq(s->cq);
    iwv_dealloc_pd(s->pd);
    iwv_close(s->ctx);
}

static struct iwv_wc wait_wc(struct side *s) {
    struct iwv_wc wc;
    /* Asleep until the daemon writes the completion (no spinning). */
    int n = iwv_wait_cq(s->cq, 20000, &wc);
    if (n < 0) die("wait_cq");
    if (n == 0) {
        fprintf(stderr, "pair: no completion in 20 s\n");
        exit(1);
    }
    if (wc.status != IWV_WC_SUCCESS) {
        fprintf(stderr, "pair: wr %" PRIu64 " completed with status %d\n", wc.wr_id, wc.status);
        exit(1);
    }
    return wc;
}

static void post(struct side *s, struct iwv_send_wr *wr, uint64_t at, uint32_t len) {
    struct iwv_sge sge = {s->mr, at, len};
    wr->sg_list = &sge;
    wr->num_sge = 1;
    wr->signaled = 1;
    if (iwv_post_send(s->qp, wr)) die("post_send");
    struct iwv_wc wc = wait_wc(s);
    if (wc.wr_id != wr->wr_id) {
        fprintf(stderr, "pair: completion for wr %" PRIu64 ", expected %" PRIu64 "\n", wc.wr_id,
                wr->wr_id);
        exit(1);
    }
}

static void say(struct side *s, const char *text) {
    memcpy(s->mem + SRC, text, strlen(text));
    struct iwv_send_wr wr = {.wr_id = 1, .opcode = IWV_WR_SEND};
    post(s, &wr, SRC, (uint32_t)strlen(text));
}

/* Waits for a receive; returns its completion and copies its text to `text`. */
static struct iwv_wc hear(struct side *s, char *text, size_t cap) {
    struct iwv_wc wc = wait_wc(s);
    if (wc.opcode != IWV_WC_RECV && wc.opcode != IWV_WC_RECV_IMM) {
        fprintf(stderr, "pair: expected a receive, got opcode %d\n", wc.opcode);
        exit(1);
    }
    size_t n = wc.byte_len < cap - 1 ? wc.byte_len : cap - 1;
    memcpy(text, s->mem + RECV_AT + wc.wr_id * SLOT, n);
    text[n] = 0;
    post_recv(s, (int)wc.wr_id);
    return wc;
}

static void fill(uint8_t *p, size_t n, uint8_t seed) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(i * 13 + seed);
}

static int same(const uint8_t *p, size_t n, uint8_t seed) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != (uint8_t)(i * 13 + seed)) return 0;
    return 1;
}

static int server(const char *dir, uint16_t port) {
    struct side s;
    open_side(&s, dir);
    fill(s.mem + DST, 4096, 9); /* what the client will read */
    uint64_t start = 500;
    memcpy(s.mem + WORD, &start, 8);
    uint32_t token[2] = {iwv_mr_stag(s.mr), BUF};
    struct iwv_conn_info info;
    if (iwv_listen(s.ctx, port)) die("listen");
    if (iwv_accept(s.ctx, s.qp, token, sizeof token, 60000, &info)) die("accept");
    char text[256];
    for (;;) {
        struct iwv_wc wc = hear(&s, text, sizeof text);
        int ok = 1;
        if (wc.has_imm && wc.imm_data == 0xABCD) { /* Send with Immediate */
            ok = wc.byte_len == 64 && same(s.mem + RECV_AT + wc.wr_id * SLOT, 64, 1);
        } else if (wc.has_imm) { /* Write with Immediate: the length written */
            ok = same(s.mem + DST + 8192, (size_t)wc.imm_data, 3);
        } else if (!strncmp(text, "wrote", 5)) {
            ok = same(s.mem + DST + 16384, 20000, 2);
        } else if (!strcmp(text, "atomic")) {
            uint64_t v;
            memcpy(&v, s.mem + WORD, 8);
            ok = v == 7;
        } else if (!strcmp(text, "bye")) {
            say(&s, "bye");
            break;
        } else if (strcmp(text, "hello")) {
            ok = 0;
        }
        say(&s, ok ? "ok" : "bad");
        if (!ok) return 1;
    }
    close_side(&s);
    printf("pair server: every check passed\n");
    return 0;
}

static void expect_ok(struct side *s, const char *what) {
    char text[64];
    hear(s, text, sizeof text);
    if (strcmp(text, "ok")) {
        fprintf(stderr, "pair: %s: server says %s\n", what, text);
        exit(1);
    }
    printf("pair client: %-22s ok\n", what);
}

static int client(const char *dir, const char *ip, uint16_t port) {
    struct side s;
    open_side(&s, dir);
    uint32_t token[2] = {iwv_mr_stag(s.mr), BUF};
    struct iwv_conn_info info;
    int tries = 0;
    while (iwv_connect(s.ctx, s.qp, ip, port, token, sizeof token, 20000, &info)) {
        if (++tries > 100) die("connect");
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    uint32_t rkey;
    memcpy(&rkey, info.private_data, 4);
    printf("pair client: connected (IRD %u, ORD %u, RDMAP v%u), peer STag 0x%08x\n", info.ird,
           info.ord, info.rdmap_version, rkey);

    say(&s, "hello");
    expect_ok(&s, "Send");

    fill(s.mem + SRC, 64, 1);
    struct iwv_send_wr si = {.wr_id = 2, .opcode = IWV_WR_SEND_WITH_IMM, .imm_data = 0xABCD};
    post(&s, &si, SRC, 64);
    expect_ok(&s, "Send with Immediate");

    fill(s.mem + SRC, 20000, 2);
    struct iwv_send_wr w = {
        .wr_id = 3, .opcode = IWV_WR_RDMA_WRITE, .rkey = rkey, .remote_addr = DST + 16384};
    post(&s, &w, SRC, 20000);
    say(&s, "wrote");
    expect_ok(&s, "RDMA Write");

    fill(s.mem + SRC, 3000, 3);
    struct iwv_send_wr wi = {.wr_id = 4,
                             .opcode = IWV_WR_RDMA_WRITE_WITH_IMM,
                             .rkey = rkey,
                             .remote_addr = DST + 8192,
                             .imm_data = 3000};
    post(&s, &wi, SRC, 3000);
    expect_ok(&s, "Write with Immediate");

    struct iwv_send_wr r = {
        .wr_id = 5, .opcode = IWV_WR_RDMA_READ, .rkey = rkey, .remote_addr = DST};
    post(&s, &r, DST, 4096);
    if (!same(s.mem + DST, 4096, 9)) {
        fprintf(stderr, "pair: RDMA Read returned other data\n");
        return 1;
    }
    printf("pair client: %-22s ok\n", "RDMA Read");

    uint64_t old;
    struct iwv_send_wr fa = {.wr_id = 6,
                             .opcode = IWV_WR_ATOMIC_FETCH_AND_ADD,
                             .rkey = rkey,
                             .remote_addr = WORD,
                             .compare_add = 10};
    post(&s, &fa, RESULT, 8);
    memcpy(&old, s.mem + RESULT, 8);
    if (old != 500) {
        fprintf(stderr, "pair: FetchAdd returned %" PRIu64 "\n", old);
        return 1;
    }
    printf("pair client: %-22s ok\n", "FetchAdd");
    struct iwv_send_wr cs = {.wr_id = 7,
                             .opcode = IWV_WR_ATOMIC_CMP_AND_SWP,
                             .rkey = rkey,
                             .remote_addr = WORD,
                             .compare_add = 510,
                             .swap = 7};
    post(&s, &cs, RESULT, 8);
    memcpy(&old, s.mem + RESULT, 8);
    if (old != 510) {
        fprintf(stderr, "pair: CmpSwap returned %" PRIu64 "\n", old);
        return 1;
    }
    say(&s, "atomic");
    expect_ok(&s, "CmpSwap");

    say(&s, "bye");
    char text[16];
    hear(&s, text, sizeof text);
    close_side(&s);
    printf("pair client: every operation checked\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "server")) return server(argv[2], (uint16_t)atoi(argv[3]));
    if (argc == 5 && !strcmp(argv[1], "client"))
        return client(argv[2], argv[3], (uint16_t)atoi(argv[4]));
    fprintf(stderr, "usage: pair server DIR PORT | pair client DIR IPV4 PORT\n");
    return 2;
}
