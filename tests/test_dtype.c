/* test_dtype.c: bf16/fp16 conversions: known bit patterns, round to nearest
 * even, specials, and the vectorised array paths against the scalar ones. */
#include "sharc/dtype.h"
#include "test.h"

#include <string.h>

TEST(dtype_known_values) {
    ASSERT_EQ(sharc_f32_to_bf16(1.0f), 0x3f80);
    ASSERT_EQ(sharc_f32_to_bf16(-2.0f), 0xc000);
    ASSERT_EQ(sharc_f32_to_bf16(1.00390625f), 0x3f80); /* halfway, rounds to even (down) */
    ASSERT_EQ(sharc_f32_to_bf16(1.01171875f), 0x3f82); /* halfway, rounds to even (up) */
    ASSERT_EQ(sharc_f32_to_f16(1.0f), 0x3c00);
    ASSERT_EQ(sharc_f32_to_f16(65504.0f), 0x7bff);
    ASSERT_EQ(sharc_f32_to_f16(65520.0f), 0x7c00);      /* overflows to inf */
    ASSERT_EQ(sharc_f32_to_f16(5.9604645e-8f), 0x0001); /* smallest subnormal */
    ASSERT_EQ(sharc_f32_to_f16(-0.0f), 0x8000);
    ASSERT_TRUE(sharc_f16_to_f32(0x0001) == 5.9604645e-8f);
    ASSERT_TRUE(sharc_bf16_to_f32(0x3f82) == 1.015625f);
    ASSERT_TRUE(isnan(sharc_bf16_to_f32(sharc_f32_to_bf16(NAN))));
    ASSERT_TRUE(isnan(sharc_f16_to_f32(sharc_f32_to_f16(NAN))));
    ASSERT_EQ(sharc_dtype_from_st_name("BF16"), SHARC_DT_BF16);
    ASSERT_EQ(sharc_dtype_from_st_name("bf16"), -1);
    ASSERT_EQ(sharc_dtype_size(SHARC_DT_F8_E4M3), 1);
}

TEST(dtype_array_paths_match_scalar) {
    const int64_t n = 1 << 20;
    float *v = malloc(sizeof(float) * n), *r = malloc(sizeof(float) * n), *back = malloc(sizeof(float) * n);
    uint16_t *h = malloc(2 * n);
    for (int64_t i = 0; i < n; i++) v[i] = (float)i * 1.37e-3f - 700.0f;
    const float special[] = {0.f, -0.f, INFINITY, -INFINITY, 1e38f, -3.4e38f, 1e-8f, 6e-8f, 65520.f, 1e-40f};
    memcpy(v, special, sizeof special);
    sharc_from_f32(h, v, SHARC_DT_BF16, n);
    for (int64_t i = 0; i < n; i++) ASSERT_EQ(h[i], sharc_f32_to_bf16(v[i]));
    sharc_to_f32(back, h, SHARC_DT_BF16, n);
    sharc_round_f32(r, v, SHARC_DT_BF16, n);
    ASSERT_TRUE(memcmp(back, r, sizeof(float) * n) == 0);
    for (int64_t i = 0; i < n; i++) ASSERT_TRUE(back[i] == sharc_bf16_to_f32(h[i]));
    sharc_from_f32(h, v, SHARC_DT_F16, n);
    for (int64_t i = 0; i < n; i++) ASSERT_EQ(h[i], sharc_f32_to_f16(v[i]));
    sharc_to_f32(back, h, SHARC_DT_F16, n);
    sharc_round_f32(r, v, SHARC_DT_F16, n);
    ASSERT_TRUE(memcmp(back, r, sizeof(float) * n) == 0);
    for (int64_t i = 0; i < n; i++) ASSERT_TRUE(back[i] == sharc_f16_to_f32(h[i]));
    free(v);
    free(r);
    free(back);
    free(h);
}
