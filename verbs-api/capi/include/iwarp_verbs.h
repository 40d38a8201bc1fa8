/*
 * iwarp_verbs.h — the C ABI of the iWARP verbs library (libiwarpverbs).
 *
 * Shaped by the RDMA Verbs specification and named as libibverbs users expect, with an
 * `iwv_` prefix. Every object is an opaque handle; every function that can fail returns
 * NULL or a negative value and leaves a message for iwv_last_error() (per thread).
 *
 * Slow path (a Unix socket to iwarp-control): iwv_open, PDs, CQs, S-RQs, QPs, buffers,
 * memory registration, windows, connections, asynchronous events. Fast path (shared rings;
 * a system call only to wake an idle daemon): iwv_post_*, iwv_poll_cq.
 *
 * Lifetimes: destroy a QP before its CQs and PD, deregister regions before freeing their
 * buffer, close the context last. A region used by a posted work request stays registered
 * until that request's completion is polled.
 */
#ifndef IWARP_VERBS_H
#define IWARP_VERBS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct iwv_context iwv_context;
typedef struct iwv_pd iwv_pd;
typedef struct iwv_cq iwv_cq;
typedef struct iwv_qp iwv_qp;
typedef struct iwv_buffer iwv_buffer;
typedef struct iwv_mr iwv_mr;
typedef struct iwv_srq iwv_srq;
typedef struct iwv_mw iwv_mw;
typedef struct iwv_fastreg iwv_fastreg;

/* Memory access rights (Verbs section 7.2.3). */
enum iwv_access {
    IWV_ACCESS_LOCAL_WRITE = 1,
    IWV_ACCESS_REMOTE_READ = 2,
    IWV_ACCESS_REMOTE_WRITE = 4,
    IWV_ACCESS_REMOTE_ATOMIC = 8,
    IWV_ACCESS_BIND = 16,          /* memory windows may be bound to the region */
};

enum iwv_wr_opcode {
    IWV_WR_SEND = 0,
    IWV_WR_SEND_WITH_IMM = 1,       /* RDMAP version 2 (negotiated) */
    IWV_WR_RDMA_WRITE = 2,
    IWV_WR_RDMA_WRITE_WITH_IMM = 3, /* RFC 7306 */
    IWV_WR_RDMA_READ = 4,
    IWV_WR_ATOMIC_FETCH_AND_ADD = 5, /* RFC 7306; one 8-octet SGE receives the old value */
    IWV_WR_ATOMIC_CMP_AND_SWP = 6,
    IWV_WR_SEND_WITH_INV = 7,       /* invalidates the peer's STag in `rkey` (RFC 5040) */
    IWV_WR_IMMEDIATE = 8,           /* RFC 7306 Immediate Data alone (`imm_data`) */
};

/* Completion status (Verbs section 8.3.2). */
enum iwv_wc_status {
    IWV_WC_SUCCESS = 0,
    IWV_WC_LOC_LEN_ERR = 1,
    IWV_WC_LOC_PROT_ERR = 2,
    IWV_WC_LOC_QP_OP_ERR = 3,
    IWV_WC_WR_FLUSH_ERR = 4,
    IWV_WC_REM_ACCESS_ERR = 5,
    IWV_WC_REM_OP_ERR = 6,
    IWV_WC_LLP_ERR = 7,
};

enum iwv_wc_opcode {
    IWV_WC_SEND = 0,
    IWV_WC_RDMA_WRITE = 1,
    IWV_WC_RDMA_READ = 2,
    IWV_WC_FETCH_ADD = 3,
    IWV_WC_CMP_SWAP = 4,
    IWV_WC_IMMEDIATE = 5,
    IWV_WC_LOCAL_INV = 6,
    IWV_WC_BIND_MW = 7,
    IWV_WC_FAST_REG = 8,
    IWV_WC_RECV = 9,
    IWV_WC_RECV_IMM = 10,
};

/* One local scatter/gather element: `length` octets at `offset` of `mr`. */
struct iwv_sge {
    iwv_mr *mr;
    uint64_t offset;
    uint32_t length;
};

struct iwv_send_wr {
    uint64_t wr_id;
    int opcode;                   /* enum iwv_wr_opcode */
    const struct iwv_sge *sg_list;
    int num_sge;
    uint32_t rkey;                /* the peer's STag (RDMA and atomics) */
    uint64_t remote_addr;         /* tagged offset in the peer's region */
    uint64_t imm_data;            /* SEND_WITH_IMM (low 32 bits), RDMA_WRITE_WITH_IMM */
    uint64_t compare_add;         /* FETCH_AND_ADD: the addend; CMP_AND_SWP: the compare value */
    uint64_t swap;                /* CMP_AND_SWP */
    int signaled;                 /* nonzero: a completion is written */
};

struct iwv_wc {
    uint64_t wr_id;
    int status;                   /* enum iwv_wc_status */
    int opcode;                   /* enum iwv_wc_opcode */
    uint32_t byte_len;
    uint32_t qp_num;
    uint64_t imm_data;
    int has_imm;
};

/* What connection setup (MPA, RFC 5044 / RFC 6581) settled. */
struct iwv_conn_info {
    uint32_t conn;
    uint16_t ird;
    uint16_t ord;
    uint8_t rdmap_version;
    uint8_t private_data_len;
    uint8_t private_data[255];    /* the peer's, truncated to 255 octets */
};

/* Asynchronous events (Verbs section 8.3.3), from iwv_get_async_event. */
enum iwv_event_type {
    IWV_EVENT_DISCONNECTED = 1,    /* id: connection; reason: why */
    IWV_EVENT_QP_TERMINATED = 2,   /* id: QP number; a Terminate sent or received, its cause */
    IWV_EVENT_QP_ERROR = 3,        /* id: QP number */
    IWV_EVENT_CQ_OVERFLOW = 4,     /* id: iwv_cq_num */
    IWV_EVENT_SRQ_LIMIT = 5,       /* id: iwv_srq_num; arm again with iwv_arm_srq_limit */
};

struct iwv_async_event {
    int type;                     /* enum iwv_event_type */
    uint32_t id;
    int received;                 /* QP_TERMINATED: 1 received from the peer, 0 sent */
    uint8_t layer, etype, code;   /* QP_TERMINATED: the cause (RFC 5040 section 7.2) */
    char reason[128];             /* DISCONNECTED: NUL-terminated */
};

/* The last error of this thread, or "" (valid until the next call on this thread). */
const char *iwv_last_error(void);

/* Opens the RNIC of the endpoint whose runtime directory is `runtime_dir` (NULL: the
 * default, or $IWARP_RUNTIME_DIR). */
iwv_context *iwv_open(const char *runtime_dir);
void iwv_close(iwv_context *ctx);

iwv_pd *iwv_alloc_pd(iwv_context *ctx);
void iwv_dealloc_pd(iwv_pd *pd);

iwv_cq *iwv_create_cq(iwv_context *ctx, uint32_t depth);
void iwv_destroy_cq(iwv_cq *cq);
/* Query CQ: the CQ's size, or -1. */
int64_t iwv_query_cq(iwv_cq *cq);
/* Modify CQ: resizes to `depth` with work outstanding; no completion is lost or reordered.
 * Fails (nothing changes) when more completions are present than `depth` holds. */
int iwv_resize_cq(iwv_cq *cq, uint32_t depth);
/* Polls up to `n` completions into `wc`; returns how many, or -1. */
int iwv_poll_cq(iwv_cq *cq, int n, struct iwv_wc *wc);
/* Waits up to `timeout_ms` for one completion, asleep in the kernel (the daemon wakes the CQ
 * when it writes one): 1 with `*wc` filled, 0 at the timeout, -1 on error. */
int iwv_wait_cq(iwv_cq *cq, int timeout_ms, struct iwv_wc *wc);

uint32_t iwv_cq_num(const iwv_cq *cq);

/* Both queues `depth` deep, 4 SGEs, 64 octets inline, IRD/ORD 16. */
iwv_qp *iwv_create_qp(iwv_pd *pd, iwv_cq *send_cq, iwv_cq *recv_cq, uint32_t depth);
/* The same, taking its receives from `srq` (same PD; post them with iwv_post_srq_recv). */
iwv_qp *iwv_create_qp_srq(iwv_pd *pd, iwv_cq *send_cq, iwv_cq *recv_cq, iwv_srq *srq,
                          uint32_t depth);
void iwv_destroy_qp(iwv_qp *qp);
uint32_t iwv_qp_num(const iwv_qp *qp);
int iwv_post_send(iwv_qp *qp, const struct iwv_send_wr *wr);
int iwv_post_recv(iwv_qp *qp, uint64_t wr_id, const struct iwv_sge *sg_list, int num_sge);

/* Shared receive queues (Verbs section 6.3): one ring of receives for several QPs of a PD.
 * Destroy the QPs that use one before it. */
iwv_srq *iwv_create_srq(iwv_pd *pd, uint32_t depth);
void iwv_destroy_srq(iwv_srq *srq);
uint32_t iwv_srq_num(const iwv_srq *srq);
int iwv_post_srq_recv(iwv_srq *srq, uint64_t wr_id, const struct iwv_sge *sg_list, int num_sge);
/* Modify S-RQ: when fewer than `limit` receives remain, one IWV_EVENT_SRQ_LIMIT (0 disarms). */
int iwv_arm_srq_limit(iwv_srq *srq, uint32_t limit);
/* Query S-RQ: its depth and the limit last armed. */
int iwv_query_srq(iwv_srq *srq, uint32_t *depth, uint32_t *limit);

/* Shared memory the daemon can map; zeroed. The pointer stays valid until iwv_free_buffer. */
iwv_buffer *iwv_alloc_buffer(iwv_context *ctx, size_t len);
void *iwv_buffer_ptr(iwv_buffer *buf);
void iwv_free_buffer(iwv_buffer *buf);

/* Registers `len` octets at `offset` of `buf` (zero-based: the peer addresses them from 0). */
iwv_mr *iwv_reg_mr(iwv_pd *pd, iwv_buffer *buf, uint64_t offset, uint64_t len, uint32_t access);
/* The same, VA-based: the peer addresses the first octet as `va` (non-zero). Memory windows
 * bind only to VA-based regions (Verbs figure 19). */
iwv_mr *iwv_reg_mr_va(iwv_pd *pd, iwv_buffer *buf, uint64_t offset, uint64_t len,
                      uint32_t access, uint64_t va);
uint32_t iwv_mr_stag(const iwv_mr *mr);
/* Fails (and keeps the region) while posted work requests still use it, or while memory
 * windows still point into it. */
int iwv_dereg_mr(iwv_mr *mr);

/* Memory windows (Verbs section 7.2.7): valid once bound by iwv_post_bind_mw; a bound
 * window keeps its region from being deregistered. */
iwv_mw *iwv_alloc_mw(iwv_pd *pd);
void iwv_dealloc_mw(iwv_mw *mw);
uint32_t iwv_mw_stag(const iwv_mw *mw);
/* Fast-register STags (Verbs section 9.2.6.1), given meaning by iwv_post_fast_reg. */
iwv_fastreg *iwv_alloc_fastreg_stag(iwv_pd *pd);
void iwv_dealloc_fastreg_stag(iwv_fastreg *f);
uint32_t iwv_fastreg_stag(const iwv_fastreg *f);

/* Work requests without a scatter/gather list; each completes on the send CQ (opcodes
 * IWV_WC_BIND_MW, IWV_WC_FAST_REG, IWV_WC_LOCAL_INV). Bind: `len` octets at tagged offset
 * `offset` of `mr` (which needs IWV_ACCESS_BIND) with `access`. Fast-register: `len`
 * octets at `offset` of `mr`, addressed from 0 through the new STag. Local Invalidate: a
 * window's or fast-registered STag. */
int iwv_post_bind_mw(iwv_qp *qp, uint64_t wr_id, const iwv_mw *mw, const iwv_mr *mr,
                     uint64_t offset, uint64_t len, uint32_t access);
int iwv_post_fast_reg(iwv_qp *qp, uint64_t wr_id, const iwv_fastreg *f, const iwv_mr *mr,
                      uint64_t offset, uint64_t len, uint32_t access);
int iwv_post_local_inv(iwv_qp *qp, uint64_t wr_id, uint32_t stag);

/* Waits up to `timeout_ms` for the next asynchronous event: 1 with `*ev` filled, 0 at the
 * timeout, -1 on error. Connection requests and replies are left for iwv_accept and
 * iwv_connect. */
int iwv_get_async_event(iwv_context *ctx, int timeout_ms, struct iwv_async_event *ev);

/* Connection management. Private data goes with the MPA Request/Reply (at most 508 octets).
 * RDMAP version 2 is asked for (Send with Immediate needs both sides to ask). */
int iwv_listen(iwv_context *ctx, uint16_t port);
int iwv_connect(iwv_context *ctx, iwv_qp *qp, const char *ipv4, uint16_t port,
                const void *private_data, size_t private_data_len, int timeout_ms,
                struct iwv_conn_info *info);
/* Waits for the next connection request on a listened port and accepts it for `qp`. */
int iwv_accept(iwv_context *ctx, iwv_qp *qp, const void *private_data, size_t private_data_len,
               int timeout_ms, struct iwv_conn_info *info);
int iwv_disconnect(iwv_context *ctx, uint32_t conn);

#ifdef __cplusplus
}
#endif

#endif /* IWARP_VERBS_H */
