/* test_layout.c: the shard arithmetic (src/fsdp/layout.c, note [flat-layout]):
 * shards are equal, 16-float aligned and cover the unit; the segments of all
 * ranks cover every parameter element exactly once and never the padding. */
#include "../src/fsdp/layout.h"
#include "test.h"

#include <string.h>

static sharc_unit_spec odd_unit(void) {
    sharc_unit_spec u;
    memset(&u, 0, sizeof u);
    int64_t a[1] = {37}, b[2] = {5, 13}, c[1] = {1}, d[2] = {48, 7};
    sharc_unit_add_param(&u, "a", 1, a, SHARC_INIT_ZEROS, 0, false);
    sharc_unit_add_param(&u, "b", 2, b, SHARC_INIT_NORMAL, 1, true);
    sharc_unit_add_param(&u, "c", 1, c, SHARC_INIT_ONES, 0, false);
    sharc_unit_add_param(&u, "d", 2, d, SHARC_INIT_NORMAL, 1, true);
    return u;
}

TEST(layout_shards_cover_each_element_once) {
    sharc_unit_spec u = odd_unit();
    ASSERT_EQ(u.numel, 37 + 65 + 1 + 336);
    ASSERT_EQ(u.params[3].offset, 103);
    for (int S = 1; S <= 7; S++) {
        int64_t shard = sharc_layout_numel_shard(u.numel, S);
        ASSERT_EQ(shard % 16, 0);
        ASSERT_TRUE(shard * S >= u.numel);
        ASSERT_TRUE((shard - 16) * S < u.numel); /* no more padding than the alignment needs */
        int seen[4][400];
        memset(seen, 0, sizeof seen);
        for (int r = 0; r < S; r++) {
            sharc_segment segs[SHARC_MAX_UNIT_PARAMS];
            int n = sharc_layout_segments(&u, r * shard, (r + 1) * shard, segs);
            int64_t prev_end = -1;
            for (int k = 0; k < n; k++) {
                const sharc_segment *g = &segs[k];
                ASSERT_TRUE(g->len > 0 && g->shard_off >= 0 && g->shard_off + g->len <= shard);
                ASSERT_TRUE(g->shard_off >= prev_end); /* in order, not overlapping */
                prev_end = g->shard_off + g->len;
                /* the flat position of the segment is the parameter's offset plus param_off */
                ASSERT_EQ(r * shard + g->shard_off, u.params[g->param].offset + g->param_off);
                for (int64_t i = 0; i < g->len; i++) seen[g->param][g->param_off + i]++;
            }
        }
        for (int p = 0; p < 4; p++)
            for (int64_t i = 0; i < u.params[p].numel; i++) ASSERT_EQ(seen[p][i], 1);
    }
}

TEST(layout_segments_of_a_window) {
    sharc_unit_spec u = odd_unit();
    sharc_segment segs[SHARC_MAX_UNIT_PARAMS];
    /* [30, 110): the tail of a, all of b and c, the head of d */
    int n = sharc_layout_segments(&u, 30, 110, segs);
    ASSERT_EQ(n, 4);
    ASSERT_EQ(segs[0].param, 0);
    ASSERT_EQ(segs[0].param_off, 30);
    ASSERT_EQ(segs[0].len, 7);
    ASSERT_EQ(segs[1].shard_off, 7);
    ASSERT_EQ(segs[1].len, 65);
    ASSERT_EQ(segs[3].param, 3);
    ASSERT_EQ(segs[3].param_off, 0);
    ASSERT_EQ(segs[3].len, 7);
    /* entirely in the padding */
    ASSERT_EQ(sharc_layout_segments(&u, u.numel, u.numel + 64, segs), 0);
}
