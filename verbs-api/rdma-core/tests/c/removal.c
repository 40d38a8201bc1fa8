/* The endpoint goes away under an open context and a bound rdma_cm identifier: the context's
 * async_fd reports IBV_EVENT_DEVICE_FATAL and the identifier's channel DEVICE_REMOVAL. The
 * test stops the endpoint between "ready" and the line it then writes to stdin. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define CHECK(what, cond) printf("%s: %s\n", what, (cond) ? "ok" : "FAILED")

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	CHECK("create_id", ch && rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(7471) };
	inet_pton(AF_INET, "10.42.0.1", &sin.sin_addr);
	CHECK("bind_addr", rdma_bind_addr(id, (struct sockaddr *)&sin) == 0 && id->verbs);
	CHECK("listen", rdma_listen(id, 1) == 0);
	printf("ready\n");
	char line[8];
	if (!fgets(line, sizeof(line), stdin))
		return 1;

	struct pollfd p = { .fd = id->verbs->async_fd, .events = POLLIN };
	CHECK("async_fd readable", poll(&p, 1, 20000) == 1);
	struct ibv_async_event ev;
	CHECK("device fatal", ibv_get_async_event(id->verbs, &ev) == 0 &&
	      ev.event_type == IBV_EVENT_DEVICE_FATAL);
	ibv_ack_async_event(&ev);
	struct pollfd q = { .fd = ch->fd, .events = POLLIN };
	CHECK("cm channel readable", poll(&q, 1, 20000) == 1);
	struct rdma_cm_event *cev;
	CHECK("device removal", rdma_get_cm_event(ch, &cev) == 0 &&
	      cev->event == RDMA_CM_EVENT_DEVICE_REMOVAL && cev->id == id);
	rdma_ack_cm_event(cev);
	printf("done\n");
	return 0;
}
