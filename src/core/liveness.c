/* liveness.c: sharc_liveness_*, the probe that names a lost rank and its
 * host (sharc/liveness.h).
 *
 * Note [liveness]. Open MPI 4.1 without ULFM tells the surviving ranks
 * nothing when a rank dies: they wait in a collective until the launcher
 * terminates them (note [rank-death] in src/core/watchdog.c) or the watchdog
 * fires. So each rank makes its own evidence at start-up, without MPI:
 *  - a TCP socket listening on INADDR_ANY, port 0 (SOCK_CLOEXEC, backlog
 *    SOMAXCONN): for a live process the kernel completes the handshake by
 *    itself (whatever the process is doing, blocked in MPI included); once
 *    the process is gone its host answers the port with RST (connection
 *    refused); a host that is down or cut off answers nothing (or "no
 *    route"). The watchdog thread accepts and closes what other ranks'
 *    probes left queued, every tick (sharc_liveness_drain): a queue left to
 *    fill would drop later connects, and a live rank would read as
 *    unreachable;
 *  - a card: hostname, the kernel's boot id, pid, the port, and up to
 *    SHARC_LIVENESS_ADDRS non-loopback IPv4 addresses (getifaddrs);
 * and the command exchanges the cards with one all-gather next to its
 * start-up agreement (src/cli/main.c).
 *
 * A survivor probes when it learns something is wrong: its watchdog fires
 * (deadline 1 s), or the launcher sends SIGTERM (Open MPI sends SIGKILL
 * about a second later, so a deadline of 300 ms). A rank on the same host
 * (same hostname and boot id: the same kernel) is checked with kill(pid,
 * 0) (ESRCH: gone); a rank elsewhere with non-blocking connects to all its
 * addresses at once, except addresses this host has too (a docker0 bridge
 * is 172.17.0.1 everywhere), under one deadline: connected on any address
 * = alive, else refused on any = its host answers but its process is gone,
 * else (timeout, EHOSTUNREACH, ENETUNREACH) = its host is unreachable. The
 * probe uses only socket, connect, poll, getsockopt, kill, close, write and
 * clock_gettime, on tables prepared at start-up (the lines are formatted
 * with snprintf, as note [rank-death] explains), so it runs in the SIGTERM
 * handler.
 *
 * Survivors probe each other too, while each is ending: a survivor that
 * had already exited would read as gone. The SIGTERM handler therefore
 * probes first and keeps its process (and listener) alive until 600 ms
 * after the signal (the watchdog already waits 2 s), longer than any
 * other survivor's probe takes; survivors are signalled within milliseconds
 * of each other.
 *
 * Large worlds: at most SHARC_LIVENESS_PROBED other ranks, this host's
 * first, then the nearest in rank order (r+1, r-1, r+2, ...). Every
 * survivor probes its own neighbourhood, so a lost rank is named by the
 * ranks next to it even when the world is larger; the line says how many
 * were checked. Before relying on other hosts, set-up connects once to the
 * first rank on another host (1 s): when that fails (a firewall drops the
 * port) other hosts are not probed at all rather than all reported lost.
 * A listener that cannot be made (no sockets) leaves port 0 on the card:
 * that rank is only checked from its own host. */
#include "sharc/liveness.h"
#include "sharc/activity.h"
#include "sharc/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static atomic_int listener = -1;
static sharc_liveness_card me;
/* the ranks to probe, prepared at start-up (index i of probe_* is rank probe_rank[i]) */
static sharc_liveness_card probe_card[SHARC_LIVENESS_PROBED];
static bool probe_local[SHARC_LIVENESS_PROBED];
static int probe_rank[SHARC_LIVENESS_PROBED];
static int nprobe, self_rank, tcp_off_rank = -1;
/* written last by sharc_liveness_set_peers: the watchdog thread, which may
 * already run (it starts before MPI_Init), reads the tables above only after
 * it reads this >= 2 */
static atomic_int world_size;
static atomic_flag probing = ATOMIC_FLAG_INIT; /* the report: once per process */
static atomic_bool busy;                       /* a probe runs (the watchdog thread or the report) */
static sharc_liveness verdict[SHARC_LIVENESS_PROBED];
/* what the watchdog thread found during a stall (sharc_liveness_watch) */
static sharc_liveness stall_verdict[SHARC_LIVENESS_PROBED];
static _Atomic uint64_t stall_seq;
static atomic_bool stall_found;
static char json[SHARC_LIVENESS_PROBED * 160 + 256];
static atomic_bool have_json;

/* keep [A-Za-z0-9.-_], so the name goes into JSON and lines as is */
static void clean_name(char *s) {
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '.' ||
              *s == '-' || *s == '_'))
            *s = '?';
}

void sharc_liveness_card_make(sharc_liveness_card *mine) {
    memset(mine, 0, sizeof *mine);
    if (gethostname(mine->host, sizeof mine->host - 1) != 0) snprintf(mine->host, sizeof mine->host, "?");
    mine->host[sizeof mine->host - 1] = 0;
    clean_name(mine->host);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(mine->boot, sizeof mine->boot, f)) mine->boot[0] = 0;
        fclose(f);
        mine->boot[strcspn(mine->boot, "\n")] = 0;
        clean_name(mine->boot);
    }
    mine->pid = (int32_t)getpid();
    if (listener < 0) {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_ANY);
        /* non-blocking: only accept() sees it (sharc_liveness_drain) */
        if (s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 && listen(s, SOMAXCONN) == 0 &&
            fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK) == 0)
            listener = s;
        else if (s >= 0) close(s);
    }
    if (listener >= 0) {
        struct sockaddr_in a;
        socklen_t len = sizeof a;
        if (getsockname(listener, (struct sockaddr *)&a, &len) == 0) mine->port = ntohs(a.sin_port);
    }
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) == 0) {
        for (struct ifaddrs *i = ifs; i && mine->naddr < SHARC_LIVENESS_ADDRS; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
                (i->ifa_flags & IFF_LOOPBACK))
                continue;
            mine->addr[mine->naddr++] = ((const struct sockaddr_in *)(const void *)i->ifa_addr)->sin_addr.s_addr;
        }
        freeifaddrs(ifs);
    }
    me = *mine;
}

static bool same_host(const sharc_liveness_card *a, const sharc_liveness_card *b) {
    return strncmp(a->host, b->host, sizeof a->host) == 0 && strncmp(a->boot, b->boot, sizeof a->boot) == 0;
}

sharc_status sharc_liveness_set_peers(const sharc_liveness_card *cards, int world, int self) {
    if (world < 1 || self < 0 || self >= world)
        return sharc_error(SHARC_ERR_INVALID, "liveness: rank %d of %d", self, world);
    nprobe = 0;
    tcp_off_rank = -1;
    /* this host's ranks, then the others, each nearest first */
    for (int pass = 0; pass < 2; pass++)
        for (int d = 1; d < world && nprobe < SHARC_LIVENESS_PROBED; d++)
            for (int sign = 1; sign >= -1 && nprobe < SHARC_LIVENESS_PROBED; sign -= 2) {
                int q = self + sign * d;
                if (q < 0 || q >= world) continue;
                const bool local = same_host(&cards[q], &cards[self]);
                if (local != (pass == 0)) continue;
                probe_card[nprobe] = cards[q];
                probe_local[nprobe] = local;
                probe_rank[nprobe++] = q;
            }
    /* one rank on another host must answer now, or other hosts are not probed later */
    for (int i = 0; i < nprobe; i++) {
        if (probe_local[i]) continue;
        sharc_liveness v;
        sharc_liveness_probe_cards(&probe_card[i], &probe_local[i], 1, &cards[self], 1000, &v);
        if (v != SHARC_LIVE_ALIVE) {
            tcp_off_rank = probe_rank[i];
            int k = 0;
            for (int j = 0; j < nprobe; j++)
                if (probe_local[j]) {
                    probe_card[k] = probe_card[j], probe_local[k] = true, probe_rank[k] = probe_rank[j];
                    k++;
                }
            nprobe = k;
        }
        break;
    }
    me = cards[self];
    self_rank = self;
    atomic_store(&world_size, world);
    atomic_store(&have_json, false);
    return SHARC_OK;
}

void sharc_liveness_close(void) {
    atomic_store(&world_size, 0);
    nprobe = 0;
    int s = atomic_exchange(&listener, -1);
    if (s >= 0) close(s);
}

int sharc_liveness_drain(void) {
    const int s = atomic_load(&listener);
    int i = 0;
    for (int c; s >= 0 && i < 256 && (c = accept4(s, NULL, NULL, SOCK_CLOEXEC)) >= 0; i++) close(c);
    return i;
}

static double mono_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

void sharc_liveness_probe_cards(const sharc_liveness_card *cards, const bool *same_host_of, int n,
                                const sharc_liveness_card *mine, int timeout_ms, sharc_liveness *out) {
    static struct pollfd pfd[SHARC_LIVENESS_PROBED * SHARC_LIVENESS_ADDRS];
    static int owner[SHARC_LIVENESS_PROBED * SHARC_LIVENESS_ADDRS];
    bool tried[SHARC_LIVENESS_PROBED], connected[SHARC_LIVENESS_PROBED], refused[SHARC_LIVENESS_PROBED];
    const int saved_errno = errno;
    if (n > SHARC_LIVENESS_PROBED) n = SHARC_LIVENESS_PROBED;
    int np = 0, pending = 0;
    for (int i = 0; i < n; i++) {
        tried[i] = connected[i] = refused[i] = false;
        const sharc_liveness_card *c = &cards[i];
        if (same_host_of[i]) {
            out[i] = kill((pid_t)c->pid, 0) == 0 || errno == EPERM ? SHARC_LIVE_ALIVE
                     : errno == ESRCH                              ? SHARC_LIVE_GONE
                                                                   : SHARC_LIVE_UNKNOWN;
            continue;
        }
        out[i] = SHARC_LIVE_UNKNOWN;
        for (int k = 0; c->port && k < c->naddr && k < SHARC_LIVENESS_ADDRS; k++) {
            bool own = false;
            for (int j = 0; mine && j < mine->naddr && j < SHARC_LIVENESS_ADDRS; j++)
                own |= mine->addr[j] == c->addr[k];
            if (own) continue;
            tried[i] = true;
            int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
            if (s < 0) continue;
            struct sockaddr_in a;
            memset(&a, 0, sizeof a);
            a.sin_family = AF_INET;
            a.sin_port = htons(c->port);
            a.sin_addr.s_addr = c->addr[k];
            if (connect(s, (struct sockaddr *)&a, sizeof a) == 0) connected[i] = true;
            else if (errno == EINPROGRESS) {
                pfd[np].fd = s, pfd[np].events = POLLOUT, pfd[np].revents = 0;
                owner[np++] = i;
                pending++;
                continue;
            } else if (errno == ECONNREFUSED) refused[i] = true;
            close(s); /* EHOSTUNREACH, ENETUNREACH, ...: unreachable on this address */
        }
    }
    const double end = mono_ms() + timeout_ms;
    while (pending > 0) {
        const double left = end - mono_ms();
        if (left <= 0) break;
        int r = poll(pfd, (nfds_t)np, (int)left + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        for (int j = 0; j < np; j++) {
            if (pfd[j].fd < 0 || !pfd[j].revents) continue;
            int err = 0;
            socklen_t len = sizeof err;
            if (getsockopt(pfd[j].fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
            if (err == 0) connected[owner[j]] = true;
            else if (err == ECONNREFUSED) refused[owner[j]] = true;
            close(pfd[j].fd);
            pfd[j].fd = -1;
            pending--;
        }
    }
    for (int j = 0; j < np; j++)
        if (pfd[j].fd >= 0) close(pfd[j].fd);
    for (int i = 0; i < n; i++)
        if (!same_host_of[i] && tried[i])
            out[i] = connected[i] ? SHARC_LIVE_ALIVE : refused[i] ? SHARC_LIVE_GONE : SHARC_LIVE_UNREACHABLE;
    errno = saved_errno;
}

static void say(const char *line, int len) {
    if (len > 0) {
        ssize_t w = write(STDERR_FILENO, line, (size_t)len);
        (void)w;
    }
}

#define ADD(...)                                                                                                       \
    do {                                                                                                               \
        if (jl < sizeof json) jl += (size_t)snprintf(json + jl, sizeof json - jl, __VA_ARGS__);                        \
    } while (0)

static bool any_lost(const sharc_liveness *v) {
    for (int i = 0; i < nprobe; i++)
        if (v[i] == SHARC_LIVE_GONE || v[i] == SHARC_LIVE_UNREACHABLE) return true;
    return false;
}

void sharc_liveness_watch(uint64_t seq, double stalled_s) {
    static uint64_t cur = 0;
    static double next = 0;
    if (atomic_load(&world_size) < 2) return;
    if (seq != cur) cur = seq, next = 0, atomic_store(&stall_found, false);
    if (stalled_s < 0.5 || stalled_s < next || atomic_load(&stall_found) || atomic_exchange(&busy, true)) return;
    sharc_liveness_probe_cards(probe_card, probe_local, nprobe, &me, 300, stall_verdict);
    next = stalled_s + 0.5;
    if (any_lost(stall_verdict)) {
        atomic_store(&stall_seq, seq);
        atomic_store(&stall_found, true);
    }
    atomic_store(&busy, false);
}

int sharc_liveness_probe(int timeout_ms, bool *fresh) {
    *fresh = false;
    const int world = atomic_load(&world_size);
    if (world < 2 || atomic_flag_test_and_set(&probing)) return -1;
    const int saved_errno = errno;
    /* a probe of the watchdog thread running now: its result, if it finds one */
    for (int waited = 0; atomic_load(&busy) && waited < timeout_ms; waited += 10) poll(NULL, 0, 10);
    const sharc_liveness *v = verdict;
    if (atomic_load(&stall_found) && atomic_load(&stall_seq) == sharc_activity_seq()) v = stall_verdict;
    else if (!atomic_exchange(&busy, true)) {
        sharc_liveness_probe_cards(probe_card, probe_local, nprobe, &me, timeout_ms, verdict);
        *fresh = true;
    } else
        for (int i = 0; i < nprobe; i++) verdict[i] = SHARC_LIVE_UNKNOWN; /* still busy: nothing to say */
    char line[512];
    const int r = self_rank;
    int lost = 0, len;
    size_t jl = 0;
    ADD("{\"probed\": %d, \"of\": %d, \"lost\": [", nprobe, world - 1);
    for (int i = 0; i < nprobe; i++) {
        const sharc_liveness_card *c = &probe_card[i];
        if (v[i] == SHARC_LIVE_GONE)
            len = snprintf(line, sizeof line, "[rank %d] rank %d (host %s, pid %d) is gone: %s\n", r, probe_rank[i],
                           c->host, (int)c->pid,
                           probe_local[i] ? "its process no longer exists (this rank's host)"
                                          : "its host answers but its process does not");
        else if (v[i] == SHARC_LIVE_UNREACHABLE)
            len = snprintf(line, sizeof line,
                           "[rank %d] rank %d (host %s, pid %d) is lost: host %s is unreachable (network cut or "
                           "host down)\n",
                           r, probe_rank[i], c->host, (int)c->pid, c->host);
        else continue;
        if (len > (int)sizeof line - 1) len = (int)sizeof line - 1;
        say(line, len);
        ADD("%s{\"rank\": %d, \"host\": \"%s\", \"pid\": %d, \"verdict\": \"%s\"}", lost ? ", " : "", probe_rank[i],
            c->host, (int)c->pid, v[i] == SHARC_LIVE_GONE ? "process gone" : "host unreachable");
        lost++;
    }
    ADD("]}");
    if (jl < sizeof json) atomic_store(&have_json, true);
    if (lost == 0) {
        len = snprintf(line, sizeof line, "[rank %d] liveness probe: the %d other rank%s checked %s alive\n", r, nprobe,
                       nprobe == 1 ? "" : "s", nprobe == 1 ? "is" : "are");
        say(line, len < (int)sizeof line ? len : (int)sizeof line - 1);
    }
    if (nprobe < world - 1) {
        char why[160] = "";
        if (tcp_off_rank >= 0)
            snprintf(why, sizeof why, "; other hosts not probed: rank %d did not answer the check at start-up",
                     tcp_off_rank);
        len = snprintf(line, sizeof line,
                       "[rank %d] liveness probe: checked %d of the %d other ranks (this host's, then the nearest "
                       "by rank, at most %d%s)\n",
                       r, nprobe, world - 1, SHARC_LIVENESS_PROBED, why);
        say(line, len < (int)sizeof line ? len : (int)sizeof line - 1);
    }
    errno = saved_errno;
    return lost;
}

const char *sharc_liveness_json(void) { return atomic_load(&have_json) ? json : NULL; }
