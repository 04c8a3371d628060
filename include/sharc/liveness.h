/* sharc/liveness.h: the liveness probe (note [liveness] in
 * src/core/liveness.c). At start-up each rank opens a TCP listener that it
 * never accepts on and publishes a card (host, pid, port, addresses); the
 * cards of all ranks are exchanged once. When the job goes wrong (the
 * watchdog fires, the launcher terminates the rank) a survivor probes the
 * other ranks and prints one line per rank that is gone, naming its host:
 * what MPI without ULFM does not tell the survivors. */
#ifndef SHARC_LIVENESS_H
#define SHARC_LIVENESS_H

#include <stdbool.h>
#include <stdint.h>

#include "sharc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SHARC_LIVENESS_ADDRS  4  /* IPv4 addresses published per rank */
#define SHARC_LIVENESS_PROBED 64 /* other ranks probed at most: this host's first, then the nearest ranks */

/* One rank's card: plain bytes, exchanged with one all-gather (U8). */
typedef struct {
    char host[64];                       /* gethostname, NUL-terminated, JSON-safe */
    char boot[40];                       /* the kernel's boot id: the same host and boot id is the same kernel */
    int32_t pid;                         /* the rank's process */
    uint16_t port;                       /* its listener's port (host order); 0: none, not probed over TCP */
    uint16_t naddr;                      /* addresses in addr */
    uint32_t addr[SHARC_LIVENESS_ADDRS]; /* non-loopback IPv4 addresses, network order */
} sharc_liveness_card;

typedef enum {
    SHARC_LIVE_ALIVE = 0,   /* the process answers (kill(pid, 0), or its listener connects) */
    SHARC_LIVE_GONE,        /* the process is gone (ESRCH, or its host refuses the port) */
    SHARC_LIVE_UNREACHABLE, /* its host does not answer in time or has no route */
    SHARC_LIVE_UNKNOWN      /* not probed (no listener, no addresses) */
} sharc_liveness;

/* Open this process's listener (once; later calls reuse it) and fill its
 * card. A listener that cannot be made leaves port 0: probing that rank over
 * TCP is off, nothing fails. */
void sharc_liveness_card_make(sharc_liveness_card *mine);
/* Keep every rank's card (`world` of them, this rank is `self`) for the
 * probe, and choose the ranks to probe. Checks once, with a short deadline,
 * that the first rank on another host answers; when it does not (a firewall),
 * other hosts are not probed later. Not signal-safe: call at start-up. */
sharc_status sharc_liveness_set_peers(const sharc_liveness_card *cards, int world, int self);
/* Drop the table and close the listener (the job ended normally). */
void sharc_liveness_close(void);

/* Probe `n` cards (n <= SHARC_LIVENESS_PROBED): those with same_host[i] by
 * kill(pid, 0), the others by non-blocking connects to all their addresses
 * at once (skipping this process's own, mine) under one deadline of
 * `timeout_ms`. Async-signal-safe. */
void sharc_liveness_probe_cards(const sharc_liveness_card *cards, const bool *same_host, int n,
                                const sharc_liveness_card *mine, int timeout_ms, sharc_liveness *out);
/* Called by the watchdog thread every tick: accepts and closes the
 * connections other ranks' probes left queued on this process's listener
 * (a queue never drained would fill after SOMAXCONN probes, and a full queue
 * drops connects: a live rank would read as unreachable). Returns how many
 * it closed. */
int sharc_liveness_drain(void);
/* Called by the watchdog thread every tick while this rank waits in a
 * collective: while the activity record
 * stays at `seq` for 0.5 s or more it probes every 0.5 s (300 ms deadline)
 * until it finds a lost rank, and keeps that verdict for the report: found
 * while every survivor still waits, before the launcher ends any of them. */
void sharc_liveness_watch(uint64_t seq, double stalled_s);
/* Write to stderr one line per rank that is gone or unreachable (or one line
 * saying all that were probed answer): what sharc_liveness_watch found in
 * the current stall, else a fresh probe (`*fresh` set) of the ranks chosen
 * by sharc_liveness_set_peers. Once per process (a second caller returns at
 * once); returns the number of lost ranks, -1 when there is nothing to probe
 * with. Async-signal-safe but for snprintf (note [rank-death] in
 * src/core/watchdog.c). */
int sharc_liveness_probe(int timeout_ms, bool *fresh);
/* The last probe as a JSON object ({"probed": N, "of": M, "lost": [...]}),
 * or NULL when none ran; for the flight record. */
const char *sharc_liveness_json(void);

#ifdef __cplusplus
}
#endif
#endif
