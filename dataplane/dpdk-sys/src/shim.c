#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include "shim.h"

uint16_t iw_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n) {
    return rte_eth_rx_burst(port, queue, pkts, n);
}
uint16_t iw_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n) {
    return rte_eth_tx_burst(port, queue, pkts, n);
}
struct rte_mbuf *iw_pktmbuf_alloc(struct rte_mempool *mp) { return rte_pktmbuf_alloc(mp); }
void iw_pktmbuf_free(struct rte_mbuf *m) { rte_pktmbuf_free(m); }
void *iw_pktmbuf_data(struct rte_mbuf *m) { return rte_pktmbuf_mtod(m, void *); }
uint16_t iw_pktmbuf_data_len(const struct rte_mbuf *m) { return rte_pktmbuf_data_len(m); }
uint32_t iw_pktmbuf_pkt_len(const struct rte_mbuf *m) { return rte_pktmbuf_pkt_len(m); }
uint16_t iw_pktmbuf_headroom_default(void) { return RTE_PKTMBUF_HEADROOM; }
char *iw_pktmbuf_append(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_append(m, len); }
int iw_errno(void) { return rte_errno; }
unsigned iw_lcore_id(void) { return rte_lcore_id(); }

/* TCP checksum offload (IPv4). */
uint64_t iw_tx_offload_tcp_cksum(void) { return RTE_ETH_TX_OFFLOAD_TCP_CKSUM; }
uint64_t iw_rx_offload_tcp_cksum(void) { return RTE_ETH_RX_OFFLOAD_TCP_CKSUM; }
void iw_pktmbuf_tx_tcp_cksum(struct rte_mbuf *m, uint16_t l2_len, uint16_t l3_len) {
    m->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_TCP_CKSUM;
    m->l2_len = l2_len;
    m->l3_len = l3_len;
}
int iw_pktmbuf_rx_l4_cksum(const struct rte_mbuf *m) {
    switch (m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK) {
    case RTE_MBUF_F_RX_L4_CKSUM_BAD: return IW_L4_CKSUM_BAD;
    case RTE_MBUF_F_RX_L4_CKSUM_GOOD: return IW_L4_CKSUM_GOOD;
    case RTE_MBUF_F_RX_L4_CKSUM_NONE: return IW_L4_CKSUM_VERIFIED;
    default: return IW_L4_CKSUM_UNKNOWN;
    }
}
uint16_t iw_tx_prepare(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n) {
    return rte_eth_tx_prepare(port, queue, pkts, n);
}
