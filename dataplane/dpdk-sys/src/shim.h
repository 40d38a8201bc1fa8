/* DPDK's fast-path functions are `static inline` in its headers, so bindgen cannot bind
 * them; these thin exported wrappers make them callable from Rust. */
#include <stdint.h>
struct rte_mbuf;
struct rte_mempool;

uint16_t iw_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
uint16_t iw_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
struct rte_mbuf *iw_pktmbuf_alloc(struct rte_mempool *mp);
void iw_pktmbuf_free(struct rte_mbuf *m);
void *iw_pktmbuf_data(struct rte_mbuf *m);
uint16_t iw_pktmbuf_data_len(const struct rte_mbuf *m);
/* The frame's length over all its segments (data_len is the first segment's). */
uint32_t iw_pktmbuf_pkt_len(const struct rte_mbuf *m);
/* RTE_PKTMBUF_HEADROOM, as this DPDK was built. */
uint16_t iw_pktmbuf_headroom_default(void);
char *iw_pktmbuf_append(struct rte_mbuf *m, uint16_t len);
int iw_errno(void);
unsigned iw_lcore_id(void);
