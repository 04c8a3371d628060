/* dtype.c: element type table and float conversions. */
#include "sharc/dtype.h"
#include "sharc/status.h"
#include "parallel.h"

#include <math.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
} table[SHARC_DT_COUNT] = {
    [SHARC_DT_F32] = {"F32", 4},   [SHARC_DT_F16] = {"F16", 2},         [SHARC_DT_BF16] = {"BF16", 2},
    [SHARC_DT_F64] = {"F64", 8},   [SHARC_DT_I8] = {"I8", 1},           [SHARC_DT_U8] = {"U8", 1},
    [SHARC_DT_I16] = {"I16", 2},   [SHARC_DT_U16] = {"U16", 2},         [SHARC_DT_I32] = {"I32", 4},
    [SHARC_DT_U32] = {"U32", 4},   [SHARC_DT_I64] = {"I64", 8},         [SHARC_DT_U64] = {"U64", 8},
    [SHARC_DT_BOOL] = {"BOOL", 1}, [SHARC_DT_F8_E4M3] = {"F8_E4M3", 1}, [SHARC_DT_F8_E5M2] = {"F8_E5M2", 1},
};

size_t sharc_dtype_size(sharc_dtype t) { return (t >= 0 && t < SHARC_DT_COUNT) ? table[t].size : 0; }
const char *sharc_dtype_st_name(sharc_dtype t) { return (t >= 0 && t < SHARC_DT_COUNT) ? table[t].name : "?"; }

int sharc_dtype_from_st_name(const char *name) {
    for (int i = 0; i < SHARC_DT_COUNT; i++)
        if (strcmp(table[i].name, name) == 0) return i;
    return -1;
}

uint16_t sharc_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float sharc_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t sharc_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow -> inf */
    if (a < 0x38800000u) {                                   /* subnormal or zero */
        float af;
        memcpy(&af, &a, 4);
        /* scale so the f16 subnormal unit (2^-24) becomes 1, round to nearest even */
        float scaled = af * 16777216.0f;
        uint32_t m = (uint32_t)nearbyintf(scaled);
        return (uint16_t)(sign | m);
    }
    uint32_t exp = ((a >> 23) - 112u) << 10;
    uint32_t mant = (a >> 13) & 0x3ffu;
    uint32_t h = exp | mant;
    uint32_t rest = a & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

float sharc_f16_to_f32(uint16_t h) {
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        float f = (float)mant * (1.0f / 16777216.0f);
        memcpy(&u, &f, 4);
        u |= sign;
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (mant << 13);
    } else {
        u = sign | ((exp + 112u) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Array conversions: branch-free loops compiled for AVX-512 / AVX2 / baseline
 * (SHARC_VEC), split over threads for large arrays. fp16 goes through GCC's
 * _Float16, which the AVX2/AVX-512 clones turn into F16C instructions. */
SHARC_VEC static void bf16_from_f32_range(uint16_t *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], 4);
        uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        uint32_t nan = (u >> 16) | 0x40u;
        dst[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : r);
    }
}

SHARC_VEC static void f32_from_bf16_range(float *dst, const uint16_t *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &u, 4);
    }
}

SHARC_VEC static void round_bf16_range(float *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], 4);
        uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        uint32_t nan = u | 0x00400000u;
        r = (u & 0x7fffffffu) > 0x7f800000u ? nan : r;
        memcpy(&dst[i], &r, 4);
    }
}

#if defined(__FLT16_MAX__)
SHARC_VEC static void f16_from_f32_range(uint16_t *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        _Float16 h = (_Float16)src[i];
        memcpy(&dst[i], &h, 2);
    }
}
SHARC_VEC static void f32_from_f16_range(float *dst, const uint16_t *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        _Float16 h;
        memcpy(&h, &src[i], 2);
        dst[i] = (float)h;
    }
}
SHARC_VEC static void round_f16_range(float *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = (float)(_Float16)src[i];
}
#else
static void f16_from_f32_range(uint16_t *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = sharc_f32_to_f16(src[i]);
}
static void f32_from_f16_range(float *dst, const uint16_t *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = sharc_f16_to_f32(src[i]);
}
static void round_f16_range(float *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = sharc_f16_to_f32(sharc_f32_to_f16(src[i]));
}
#endif

#define PAR_CONVERT(n, call)                                                                                           \
    do {                                                                                                               \
        int64_t nc_ = ((n) + 65535) / 65536;                                                                           \
        _Pragma("omp parallel for schedule(static) if (nc_ > 1)") for (int64_t k_ = 0; k_ < nc_; k_++) {               \
            int64_t lo = sharc_chunk_lo(k_, nc_, (n)), len = sharc_chunk_lo(k_ + 1, nc_, (n)) - lo;                    \
            call;                                                                                                      \
        }                                                                                                              \
    } while (0)

void sharc_to_f32(float *dst, const void *src, sharc_dtype t, int64_t n) {
    switch (t) {
    case SHARC_DT_F32: memmove(dst, src, (size_t)n * 4); break;
    case SHARC_DT_BF16: PAR_CONVERT(n, f32_from_bf16_range(dst + lo, (const uint16_t *)src + lo, len)); break;
    case SHARC_DT_F16: PAR_CONVERT(n, f32_from_f16_range(dst + lo, (const uint16_t *)src + lo, len)); break;
    default: SHARC_CHECK(!"sharc_to_f32: not a float type");
    }
}

void sharc_from_f32(void *dst, const float *src, sharc_dtype t, int64_t n) {
    switch (t) {
    case SHARC_DT_F32: memmove(dst, src, (size_t)n * 4); break;
    case SHARC_DT_BF16: PAR_CONVERT(n, bf16_from_f32_range((uint16_t *)dst + lo, src + lo, len)); break;
    case SHARC_DT_F16: PAR_CONVERT(n, f16_from_f32_range((uint16_t *)dst + lo, src + lo, len)); break;
    default: SHARC_CHECK(!"sharc_from_f32: not a float type");
    }
}

void sharc_round_f32(float *dst, const float *src, sharc_dtype t, int64_t n) {
    switch (t) {
    case SHARC_DT_BF16: PAR_CONVERT(n, round_bf16_range(dst + lo, src + lo, len)); break;
    case SHARC_DT_F16: PAR_CONVERT(n, round_f16_range(dst + lo, src + lo, len)); break;
    default:
        if (dst != src) memmove(dst, src, (size_t)n * 4);
    }
}
