/* test_liveness.c: the liveness probe's classifier (note [liveness] in
 * src/core/liveness.c) against sockets and processes made here: a listening
 * port connects (alive), a closed port is refused (gone), a port whose
 * full accept queue drops SYNs is unreachable (as a cut-off host), a reaped
 * child's pid is gone; and the lines sharc_liveness_probe prints for a made-up world.
 * The tables set at start-up while the watchdog's thread already watches:
 * the probe after them right (and, under make tsan, no data race). */
#include "sharc/liveness.h"
#include "test.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* A TCP socket bound to `ip` (port 0), listening when backlog >= 0; its port. */
static int bound(const char *ip, int backlog, uint16_t *port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = inet_addr(ip);
    socklen_t len = sizeof a;
    ASSERT_TRUE(s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0);
    ASSERT_TRUE(backlog < 0 || listen(s, backlog) == 0);
    ASSERT_TRUE(getsockname(s, (struct sockaddr *)&a, &len) == 0);
    *port = ntohs(a.sin_port);
    return s;
}

/* A port on 127.0.0.1 that nothing listens on: bound, then closed. */
static uint16_t closed_port(void) {
    uint16_t p;
    close(bound("127.0.0.1", -1, &p));
    return p;
}

/* A port on `ip` that answers nothing, as a cut-off host: a listener with
 * backlog 0 whose queue one connection fills (Linux then drops SYNs). */
static uint16_t deaf_port(const char *ip) {
    uint16_t p;
    bound(ip, 0, &p);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons(p);
    a.sin_addr.s_addr = inet_addr(ip);
    ASSERT_TRUE(c >= 0 && connect(c, (struct sockaddr *)&a, sizeof a) == 0);
    return p;
}

static sharc_liveness_card card(uint16_t port, const char *a0, const char *a1) {
    sharc_liveness_card c;
    memset(&c, 0, sizeof c);
    snprintf(c.host, sizeof c.host, "elsewhere");
    snprintf(c.boot, sizeof c.boot, "another-kernel");
    c.pid = 1;
    c.port = port;
    if (a0) c.addr[c.naddr++] = inet_addr(a0);
    if (a1) c.addr[c.naddr++] = inet_addr(a1);
    return c;
}

static pid_t dead_pid(void) {
    pid_t p = fork();
    if (p == 0) _exit(0);
    ASSERT_TRUE(p > 0 && waitpid(p, NULL, 0) == p);
    return p;
}

TEST(liveness_classifies_ports_and_pids) {
    sharc_liveness_card me;
    sharc_liveness_card_make(&me);
    ASSERT_TRUE(me.port != 0); /* this process's listener */
    ASSERT_EQ(me.pid, getpid());
    uint16_t live4;
    bound("127.0.0.4", 8, &live4);
    const uint16_t closed = closed_port(), deaf = deaf_port("127.0.0.2");
    sharc_liveness_card c[8];
    bool local[8] = {false, false, false, false, false, false, true, true};
    c[0] = card(me.port, "127.0.0.1", NULL);                    /* listening: alive */
    c[1] = card(closed, "127.0.0.1", NULL);                     /* refused: gone */
    c[2] = card(deaf, "127.0.0.2", NULL);                       /* no answer: unreachable */
    c[3] = card(live4, "127.0.0.5", "127.0.0.4");               /* one address answers: alive */
    c[4] = card(deaf, "127.0.0.2", "127.0.0.3");                /* refused beats no answer: gone */
    c[5] = card(0, "127.0.0.1", NULL);                          /* no listener: unknown */
    c[6] = card(0, NULL, NULL), c[6].pid = (int32_t)getpid();   /* this host, alive */
    c[7] = card(0, NULL, NULL), c[7].pid = (int32_t)dead_pid(); /* this host, reaped */
    sharc_liveness v[8];
    sharc_liveness_probe_cards(c, local, 8, &me, 300, v);
    ASSERT_EQ(v[0], SHARC_LIVE_ALIVE);
    ASSERT_EQ(v[1], SHARC_LIVE_GONE);
    ASSERT_EQ(v[2], SHARC_LIVE_UNREACHABLE);
    ASSERT_EQ(v[3], SHARC_LIVE_ALIVE);
    ASSERT_EQ(v[4], SHARC_LIVE_GONE);
    ASSERT_EQ(v[5], SHARC_LIVE_UNKNOWN);
    ASSERT_EQ(v[6], SHARC_LIVE_ALIVE);
    ASSERT_EQ(v[7], SHARC_LIVE_GONE);
    /* an address this host has is skipped (a bridge every host has) */
    sharc_liveness_card mine = me;
    mine.naddr = 1, mine.addr[0] = inet_addr("127.0.0.1");
    sharc_liveness_probe_cards(c, local, 1, &mine, 300, v);
    ASSERT_EQ(v[0], SHARC_LIVE_UNKNOWN);
}

/* Probes leave connections queued on the listener; the watchdog's drain
 * takes them off (a full queue would make this live rank read as
 * unreachable), and the listener still answers afterwards. */
TEST(liveness_drain_empties_the_accept_queue) {
    sharc_liveness_card me;
    sharc_liveness_card_make(&me);
    ASSERT_TRUE(me.port != 0);
    sharc_liveness_drain();
    sharc_liveness_card c = card(me.port, "127.0.0.1", NULL);
    bool local = false;
    sharc_liveness v;
    for (int i = 0; i < 3; i++) {
        sharc_liveness_probe_cards(&c, &local, 1, &me, 300, &v);
        ASSERT_EQ(v, SHARC_LIVE_ALIVE);
    }
    ASSERT_EQ(sharc_liveness_drain(), 3);
    ASSERT_EQ(sharc_liveness_drain(), 0);
    sharc_liveness_probe_cards(&c, &local, 1, &me, 300, &v);
    ASSERT_EQ(v, SHARC_LIVE_ALIVE);
    ASSERT_EQ(sharc_liveness_drain(), 1);
}

/* sharc_liveness_probe with this process's stderr captured into the test
 * directory's file NAME and read back into text (n bytes): the ranks lost,
 * or -2 when the capture itself failed */
static int probe_captured(const char *name, bool *fresh, char *text, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", sharc_test_tmpdir(), name);
    fflush(stderr);
    const int saved = dup(STDERR_FILENO), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (saved < 0 || fd < 0 || dup2(fd, STDERR_FILENO) < 0) return -2;
    const int lost = sharc_liveness_probe(300, fresh);
    dup2(saved, STDERR_FILENO);
    close(fd);
    close(saved);
    memset(text, 0, n);
    FILE *f = fopen(path, "r");
    const size_t got = f ? fread(text, 1, n - 1, f) : 0;
    if (f) fclose(f);
    return got > 0 ? lost : -2;
}

TEST(liveness_probe_names_the_lost_ranks) {
    /* a world of 4: rank 0 is this process; rank 1 on this host, dead; rank
     * 2 elsewhere, alive; rank 3 elsewhere, its port refused */
    sharc_liveness_card w[4];
    sharc_liveness_card_make(&w[0]);
    w[1] = w[0], w[1].pid = (int32_t)dead_pid();
    w[2] = card(w[0].port, "127.0.0.1", NULL), snprintf(w[2].host, sizeof w[2].host, "node2");
    w[3] = card(closed_port(), "127.0.0.1", NULL), snprintf(w[3].host, sizeof w[3].host, "node3");
    w[3].pid = 4242;
    ASSERT_OK(sharc_liveness_set_peers(w, 4, 0));
    bool fresh;
    char text[2048], want[512];
    ASSERT_EQ(probe_captured("liveness-err.txt", &fresh, text, sizeof text), 2);
    ASSERT_TRUE(fresh);
    ASSERT_EQ(sharc_liveness_probe(300, &fresh), -1); /* once per process */
    snprintf(want, sizeof want,
             "[rank 0] rank 1 (host %s, pid %d) is gone: its process no longer exists (this rank's host)\n"
             "[rank 0] rank 3 (host node3, pid 4242) is gone: its host answers but its process does not\n",
             w[0].host, (int)w[1].pid);
    if (strcmp(text, want) != 0) TEST_FAIL_AT("lines:\n%s\nexpected:\n%s", text, want);
    snprintf(want, sizeof want,
             "{\"probed\": 3, \"of\": 3, \"lost\": [{\"rank\": 1, \"host\": \"%s\", \"pid\": %d, \"verdict\": "
             "\"process gone\"}, {\"rank\": 3, \"host\": \"node3\", \"pid\": 4242, \"verdict\": \"process gone\"}]}",
             w[0].host, (int)w[1].pid);
    ASSERT_TRUE(sharc_liveness_json() != NULL);
    if (strcmp(sharc_liveness_json(), want) != 0) TEST_FAIL_AT("json %s\nexpected %s", sharc_liveness_json(), want);
    sharc_liveness_close();
}

/* the watchdog thread's calls during a stall, until told to stop */
static atomic_bool watch_stop;
static atomic_int watch_calls;
static void *watch_loop(void *arg) {
    (void)arg;
    for (uint64_t seq = 1; !atomic_load(&watch_stop); seq++) {
        sharc_liveness_watch(seq, 1.0);
        atomic_fetch_add(&watch_calls, 1);
    }
    return NULL;
}

TEST(liveness_peers_set_while_the_watchdog_watches) {
    /* note [liveness]: sharc_liveness_set_peers runs after MPI_Init, when
     * the watchdog's thread (started before it) may already call
     * sharc_liveness_watch; a world of 2, rank 1 this process itself */
    sharc_liveness_card w[2];
    sharc_liveness_card_make(&w[0]);
    w[1] = w[0];
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, watch_loop, NULL), 0);
    while (atomic_load(&watch_calls) < 100) sched_yield();
    ASSERT_OK(sharc_liveness_set_peers(w, 2, 0));
    for (int seen = atomic_load(&watch_calls); atomic_load(&watch_calls) < seen + 100;) sched_yield();
    atomic_store(&watch_stop, true);
    ASSERT_EQ(pthread_join(t, NULL), 0);
    bool fresh;
    char text[512];
    ASSERT_EQ(probe_captured("liveness-watch.txt", &fresh, text, sizeof text), 0);
    const char *want = "[rank 0] liveness probe: the 1 other rank checked is alive\n";
    if (strcmp(text, want) != 0) TEST_FAIL_AT("lines:\n%s\nexpected:\n%s", text, want);
    sharc_liveness_close();
}
