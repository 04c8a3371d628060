/* test_plan.c: the engine's memory plan (src/fsdp/plan.c, note
 * [gathered-bound]) against the formula written out here from the shard
 * arithmetic, and against what an engine allocates (the byte counters of
 * sharc/alloc.h). */
#include "../src/fsdp/plan.h"
#include "../src/fsdp/layout.h"
#include "sharc/model.h"
#include "test.h"

#include <string.h>

/* three units of odd sizes, the first a root (a tied embedding) */
static void specs(sharc_unit_spec *u) {
    memset(u, 0, 3 * sizeof *u);
    int64_t a[2] = {37, 5}, b[2] = {61, 7}, c[1] = {29};
    sharc_unit_add_param(&u[0], "wte", 2, a, SHARC_INIT_NORMAL, 0.02f, true);
    u[0].root = true;
    sharc_unit_add_param(&u[1], "w", 2, b, SHARC_INIT_NORMAL, 0.02f, true);
    sharc_unit_add_param(&u[1], "b", 1, c, SHARC_INIT_ZEROS, 0, false);
    sharc_unit_add_param(&u[2], "n", 1, c, SHARC_INIT_ONES, 0, false);
}

static int64_t sum_i64(const int64_t *v, int n) {
    int64_t s = 0;
    for (int i = 0; i < n; i++) s += v[i];
    return s;
}

TEST(plan_follows_the_gathered_bound) {
    sharc_unit_spec u[3];
    specs(u);
    for (int S = 1; S <= 4; S++)
        for (int variant = 0; variant < 7; variant++) {
            sharc_fsdp_config c;
            sharc_fsdp_config_default(&c);
            int max_live = 1;
            if (variant == 1) c.backward_prefetch = SHARC_BACKWARD_PREFETCH_NONE;
            if (variant == 2) c.limit_all_gathers = 1;
            if (variant == 3) c.strategy = SHARC_SHARDING_SHARD_GRAD_OP;
            if (variant == 4) c.no_sync = true;
            if (variant == 5) c.param_dtype = SHARC_DT_BF16;
            if (variant == 6) max_live = 2;
            sharc_fsdp_plan_in in = {.S = S,
                                     .shard_rank = S - 1,
                                     .max_live = max_live,
                                     .params_in_place = S == 1 && c.param_dtype == SHARC_DT_F32,
                                     .grads_in_place = S == 1};
            sharc_fsdp_plan p;
            ASSERT_OK(sharc_fsdp_plan_make(&p, u, 3, &c, &in));
            /* the formula, from the shard arithmetic alone */
            int64_t padded[3], shard[3], off = 0, shards = 0;
            for (int k = 0; k < 3; k++) {
                shard[k] = sharc_layout_numel_shard(u[k].numel, S);
                padded[k] = shard[k] * S;
                ASSERT_EQ(p.units[k].numel_shard, shard[k]);
                ASSERT_EQ(p.units[k].shard_lo, shard[k] * (S - 1));
                ASSERT_EQ(p.units[k].global_off, off);
                off += padded[k];
                shards += shard[k];
            }
            int64_t max_plain = padded[1] > padded[2] ? padded[1] : padded[2], roots = padded[0];
            int prefetch = variant == 1 ? 0 : 1;
            int64_t params = 0, grads = 0;
            if (!in.params_in_place) {
                if (variant == 3) params = padded[0] + padded[1] + padded[2];
                else if (variant == 2) params = 1 * max_plain + roots;
                else params = (max_live + prefetch) * max_plain + roots;
            }
            if (!in.grads_in_place)
                grads = variant == 4 ? padded[0] + padded[1] + padded[2] : max_live * max_plain + roots;
            ASSERT_EQ(sum_i64(p.param_slot_numel, p.n_param_slots), params);
            ASSERT_EQ(p.grad_slots_numel, grads);
            ASSERT_EQ(p.bytes[SHARC_MEM_GATHERED], 4 * (params + grads));
            ASSERT_EQ(p.bytes[SHARC_MEM_PARAMS], 4 * shards);
            ASSERT_EQ(p.bytes[SHARC_MEM_GRADS], 4 * shards);
            ASSERT_EQ(p.total_padded, off);
            bool staging = S > 1 || variant == 5;
            int64_t max_shard = shard[0] > shard[1] ? shard[0] : shard[1];
            max_shard = max_shard > shard[2] ? max_shard : shard[2];
            int64_t max_padded = max_shard * S;
            ASSERT_EQ(p.bytes[SHARC_MEM_COMM], staging ? 2 * max_shard + 2 * max_padded + 4 * max_shard : 0);
            /* a root unit's slots are its own */
            bool root_param_slot = false, root_grad_slot = false;
            for (int i = 0; i < p.n_param_slots; i++) root_param_slot |= p.param_slot_owner[i] == 0;
            for (int i = 0; i < p.n_grad_slots; i++) root_grad_slot |= p.grad_slot_owner[i] == 0;
            ASSERT_EQ(root_param_slot, !in.params_in_place);
            ASSERT_EQ(root_grad_slot, !in.grads_in_place);
            sharc_fsdp_plan_free(&p);
        }
}

/* What an engine allocates per category is what its plan says, at one
 * process in fp32 (no slots) and bf16 (parameter slots and staging). */
TEST(plan_is_what_the_engine_allocates) {
    sharc_model_config mc;
    sharc_model_config_default(&mc, SHARC_FAMILY_GPT2);
    mc.num_layers = 2;
    mc.embed_dim = 48;
    mc.num_heads = 3;
    mc.vocab_size = 61;
    mc.max_seq_len = 16;
    sharc_model *m;
    ASSERT_OK(sharc_model_init(&m, &mc, NULL));
    for (int dt = 0; dt < 2; dt++) {
        sharc_fsdp_config fc;
        sharc_fsdp_config_default(&fc);
        fc.param_dtype = dt ? SHARC_DT_BF16 : SHARC_DT_F32;
        sharc_mem_stats a, b;
        sharc_mem_get(&a);
        sharc_fsdp *e;
        ASSERT_OK(sharc_fsdp_init(&e, sharc_model_units(m), sharc_model_num_units(m), sharc_model_schedule(m), &fc,
                                  NULL, NULL));
        sharc_mem_get(&b);
        for (int cat = 0; cat < SHARC_MEM_NCAT; cat++)
            if (b.current[cat] - a.current[cat] != sharc_fsdp_planned_bytes(e, (sharc_mem_cat)cat))
                TEST_FAIL_AT("%s: allocated %lld bytes, planned %lld (%s)", sharc_mem_cat_name((sharc_mem_cat)cat),
                             (long long)(b.current[cat] - a.current[cat]),
                             (long long)sharc_fsdp_planned_bytes(e, (sharc_mem_cat)cat), dt ? "bf16" : "fp32");
        ASSERT_TRUE(sharc_fsdp_planned_bytes(e, SHARC_MEM_GATHERED) ==
                    (dt ? sharc_fsdp_gathered_capacity_bytes(e) : 0));
        const char *reduce;
        ASSERT_TRUE(strcmp(sharc_fsdp_strategy_names(e, &reduce), dt ? "16-bit all-gather" : "direct") == 0);
        ASSERT_TRUE(strcmp(reduce, "direct") == 0);
        sharc_fsdp_free(e);
        sharc_mem_get(&b);
        for (int cat = 0; cat < SHARC_MEM_NCAT; cat++) ASSERT_EQ(b.current[cat], a.current[cat]);
    }
    sharc_model_free(m);
}

/* Note [post-forward] (src/fsdp/plan.c): an int reshard_after_forward N gives
 * every unit backward gathers again (not the root, not one whose backward
 * reads no parameters, not the last in forward order) a slice of numel_padded / N in param_dtype, FULL_SHARD's slots
 * otherwise, and nothing with parameters in place; N that does not divide
 * the shard group, or exceeds it, is refused with the arithmetic. */
TEST(plan_keeps_post_forward_slices) {
    sharc_unit_spec u[3];
    specs(u);
    bool needs[3] = {true, true, true};
    int order[3] = {0, 1, 2};
    sharc_unit_schedule sch = {.n = 3, .order = order, .backward_needs_params = needs, .max_live = 1};
    for (int variant = 0; variant < 5; variant++) {
        sharc_fsdp_config c, full;
        sharc_fsdp_config_default(&c);
        c.reshard_after_forward = 2;
        if (variant == 1) c.param_dtype = SHARC_DT_BF16;
        if (variant == 2) c.strategy = SHARC_SHARDING_SHARD_GRAD_OP; /* the int overrides the strategy */
        needs[1] = variant != 4; /* variant 4: unit 1's backward reads no parameters, no slice */
        full = c;
        full.reshard_after_forward = 1;
        const int S = 4;
        sharc_fsdp_plan_in in = {
            .S = S, .shard_rank = 3, .max_live = 1, .params_in_place = variant == 3, .schedule = &sch};
        sharc_fsdp_plan p, pf;
        ASSERT_OK(sharc_fsdp_plan_make(&p, u, 3, &c, &in));
        ASSERT_OK(sharc_fsdp_plan_make(&pf, u, 3, &full, &in));
        ASSERT_EQ(p.post, 2);
        int64_t padded1 = sharc_layout_numel_shard(u[1].numel, S) * S;
        int64_t es = variant == 1 ? 2 : 4;
        int64_t want = variant >= 3 ? 0 : padded1 / 2 * es; /* unit 0 is the root, unit 2 the last */
        ASSERT_EQ(p.post_bytes, want);
        ASSERT_EQ(p.units[0].numel_post, 0);
        ASSERT_EQ(p.units[1].numel_post, variant >= 3 ? 0 : padded1 / 2);
        ASSERT_EQ(p.units[2].numel_post, 0);
        ASSERT_EQ(p.bytes[SHARC_MEM_GATHERED], pf.bytes[SHARC_MEM_GATHERED] + want);
        ASSERT_EQ(sum_i64(p.param_slot_numel, p.n_param_slots), sum_i64(pf.param_slot_numel, pf.n_param_slots));
        sharc_fsdp_plan_free(&p);
        sharc_fsdp_plan_free(&pf);
    }
    /* the refusals, each with its arithmetic */
    const struct {
        int n, S;
        const char *msg;
    } bad[] = {{3, 4, "3 does not divide the shard group of 4 ranks (4 % 3 = 1"},
               {8, 4, "8 ranks is more than the shard group's 4"},
               {2, 1, "the shard group has 1 rank"},
               {4, 6,
                "4 does not divide the shard group of 6 ranks (6 % 4 = 2, 6 / 4 = 1.50 groups); set it to a "
                "divisor of 6 greater than 1 (2, 3, 6)"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sharc_fsdp_config c;
        sharc_fsdp_config_default(&c);
        c.reshard_after_forward = bad[i].n;
        int post = -7;
        ASSERT_EQ(sharc_fsdp_post_forward_size(&c, bad[i].S, &post), SHARC_ERR_INVALID);
        if (!strstr(sharc_last_error(), bad[i].msg))
            TEST_FAIL_AT("N %d, S %d: '%s' lacks '%s'", bad[i].n, bad[i].S, sharc_last_error(), bad[i].msg);
        ASSERT_EQ(post, -7);
    }
    /* true, false, auto by strategy, N = S is true */
    const struct {
        int v;
        sharc_sharding s;
        int want;
    } ok[] = {{1, SHARC_SHARDING_FULL_SHARD, 4},    {0, SHARC_SHARDING_FULL_SHARD, 1},
              {-1, SHARC_SHARDING_FULL_SHARD, 4},   {-1, SHARC_SHARDING_SHARD_GRAD_OP, 1},
              {4, SHARC_SHARDING_SHARD_GRAD_OP, 4}, {2, SHARC_SHARDING_HYBRID_SHARD, 2}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        sharc_fsdp_config c;
        sharc_fsdp_config_default(&c);
        c.reshard_after_forward = ok[i].v;
        c.strategy = ok[i].s;
        int post = 0;
        ASSERT_OK(sharc_fsdp_post_forward_size(&c, 4, &post));
        ASSERT_EQ(post, ok[i].want);
    }
}

/* Note [gathered16] (src/fsdp/collectives.c): a unit the model reads in
 * 16-bit has a parameter slot of half its padded floats (rounded up) under a
 * 16-bit param_dtype, none of that in fp32; the engine at one process
 * allocates that plan and gathers the unit as the shard rounded to bf16
 * (round to nearest even, written out here), the other units widened. */
static uint16_t bf16_rne(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

TEST(plan_halves_gathered16_slots) {
    sharc_unit_spec u[3];
    specs(u);
    u[1].gathered16 = true; /* 61 x 7 + 29 = 456 elements: the largest non-root unit */
    for (int S = 1; S <= 4; S++)
        for (int variant = 0; variant < 3; variant++) {
            sharc_fsdp_config c;
            sharc_fsdp_config_default(&c);
            c.param_dtype = variant == 0 ? SHARC_DT_F32 : SHARC_DT_BF16;
            if (variant == 2) c.strategy = SHARC_SHARDING_SHARD_GRAD_OP;
            sharc_fsdp_plan_in in = {.S = S,
                                     .shard_rank = 0,
                                     .max_live = 1,
                                     .params_in_place = S == 1 && c.param_dtype == SHARC_DT_F32,
                                     .grads_in_place = S == 1};
            sharc_fsdp_plan p;
            ASSERT_OK(sharc_fsdp_plan_make(&p, u, 3, &c, &in));
            int64_t padded[3];
            for (int k = 0; k < 3; k++) padded[k] = sharc_layout_numel_shard(u[k].numel, S) * S;
            bool half = variant > 0;
            int64_t b1 = half ? (padded[1] + 1) / 2 : padded[1];
            ASSERT_EQ(p.units[1].g16, half);
            ASSERT_EQ(p.units[1].slot_numel, b1);
            ASSERT_EQ(p.units[2].slot_numel, padded[2]);
            int64_t max_plain = b1 > padded[2] ? b1 : padded[2], params = 0;
            if (!in.params_in_place)
                params = variant == 2 ? padded[0] + b1 + padded[2] : 2 * max_plain + padded[0]; /* + 1 prefetched */
            ASSERT_EQ(sum_i64(p.param_slot_numel, p.n_param_slots), params);
            sharc_fsdp_plan_free(&p);
        }
    sharc_fsdp_config fc;
    sharc_fsdp_config_default(&fc);
    fc.param_dtype = SHARC_DT_BF16;
    sharc_mem_stats a, b;
    sharc_mem_get(&a);
    sharc_fsdp *e;
    ASSERT_OK(sharc_fsdp_init(&e, u, 3, NULL, &fc, NULL, NULL));
    sharc_mem_get(&b);
    ASSERT_EQ(b.current[SHARC_MEM_GATHERED] - a.current[SHARC_MEM_GATHERED],
              sharc_fsdp_planned_bytes(e, SHARC_MEM_GATHERED));
    sharc_fsdp_init_params(e, 3);
    for (int k = 1; k < 3; k++) {
        const float *full = sharc_fsdp_gather(e, k);
        const uint16_t *h = sharc_fsdp_gather16(e, k);
        const float *shard = sharc_fsdp_shard_params(e, k);
        ASSERT_TRUE(k == 1 ? h == (const void *)full : h == NULL);
        for (int64_t i = 0; i < u[k].numel; i++) {
            uint16_t want = bf16_rne(shard[i]);
            if (k == 1) {
                ASSERT_EQ(h[i], want);
            } else { /* widened: exactly the bf16 value */
                uint32_t wide = (uint32_t)want << 16, got;
                memcpy(&got, &full[i], sizeof got);
                ASSERT_EQ(got, wide);
            }
        }
        sharc_fsdp_release(e, k);
    }
    sharc_fsdp_free(e);
}
