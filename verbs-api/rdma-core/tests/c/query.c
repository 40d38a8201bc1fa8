/* Opens the first device and queries it the way applications do, through the inline helpers
 * of verbs.h, printing one line per answer for tests/devices.rs to check. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <infiniband/verbs.h>

static void print_gid(const char *what, const uint8_t *r, const char *tail)
{
	printf("%s %02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x%s\n",
	       what, r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11],
	       r[12], r[13], r[14], r[15], tail);
}

int main(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1) {
		printf("no device\n");
		return 1;
	}
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx) {
		printf("open: %s\n", strerror(errno));
		return 1;
	}
	printf("transport=%d node_type=%d\n", ctx->device->transport_type, ctx->device->node_type);

	struct ibv_port_attr pa;
	if (ibv_query_port(ctx, 1, &pa))
		return 1;
	printf("port state=%d link_layer=%d active_mtu=%d gid_tbl_len=%d\n", pa.state,
	       pa.link_layer, pa.active_mtu, pa.gid_tbl_len);
	int rc = ibv_query_port(ctx, 2, &pa);
	printf("bad port: %s\n", rc == EINVAL ? "EINVAL" : "other");

	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 0, &gid))
		return 1;
	print_gid("gid", gid.raw, "");
	printf("bad gid index: %d\n", ibv_query_gid(ctx, 1, 1, &gid));

	struct ibv_gid_entry entry;
	if (ibv_query_gid_ex(ctx, 1, 0, &entry, 0))
		return 1;
	char tail[32];
	snprintf(tail, sizeof(tail), " type=%u", entry.gid_type);
	print_gid("gid_ex", entry.gid.raw, tail);

	struct ibv_device_attr_ex dx;
	if (ibv_query_device_ex(ctx, NULL, &dx))
		return 1;
	printf("device_ex phys_port_cnt=%d atomic_cap=%d\n", dx.orig_attr.phys_port_cnt,
	       dx.orig_attr.atomic_cap);

	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
