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
/* TCP checksum offload over IPv4: the device capability bits (rx/tx offload_capa, and
 * rte_eth_conf's offloads), a frame to send marked for it (l2_len, l3_len: the Ethernet and
 * IPv4 header lengths; the TCP checksum field holds the pseudo-header sum), and what the
 * device said of a received frame's TCP checksum. */
uint64_t iw_tx_offload_tcp_cksum(void);
uint64_t iw_rx_offload_tcp_cksum(void);
void iw_pktmbuf_tx_tcp_cksum(struct rte_mbuf *m, uint16_t l2_len, uint16_t l3_len);
enum {
    IW_L4_CKSUM_UNKNOWN = 0, /* not checked: check it in software */
    IW_L4_CKSUM_BAD = 1,
    IW_L4_CKSUM_GOOD = 2,
    IW_L4_CKSUM_VERIFIED = 3, /* the field is not valid but the data is (virtual devices) */
};
int iw_pktmbuf_rx_l4_cksum(const struct rte_mbuf *m);
/* rte_eth_tx_prepare: a device's own fix-ups of frames marked for offloads. */
uint16_t iw_tx_prepare(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
unsigned iw_lcore_id(void);
