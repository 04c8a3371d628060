/* sharc/dtype.h: element types, their sizes and names in files, and the
 * fp32 <-> bf16 / fp16 conversions (round to nearest even). */
#ifndef SHARC_DTYPE_H
#define SHARC_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SHARC_DT_F32 = 0,
    SHARC_DT_F16,
    SHARC_DT_BF16,
    SHARC_DT_F64,
    SHARC_DT_I8,
    SHARC_DT_U8,
    SHARC_DT_I16,
    SHARC_DT_U16,
    SHARC_DT_I32,
    SHARC_DT_U32,
    SHARC_DT_I64,
    SHARC_DT_U64,
    SHARC_DT_BOOL,
    SHARC_DT_F8_E4M3,
    SHARC_DT_F8_E5M2,
    SHARC_DT_COUNT
} sharc_dtype;

size_t sharc_dtype_size(sharc_dtype t);
/* safetensors name ("F32", "BF16", ...). */
const char *sharc_dtype_st_name(sharc_dtype t);
/* Parse a safetensors dtype name; returns -1 if unknown. */
int sharc_dtype_from_st_name(const char *name);

uint16_t sharc_f32_to_bf16(float f);
float sharc_bf16_to_f32(uint16_t h);
uint16_t sharc_f32_to_f16(float f);
float sharc_f16_to_f32(uint16_t h);
/* Convert n elements of src (F32, F16 or BF16) to fp32. */
void sharc_to_f32(float *dst, const void *src, sharc_dtype t, int64_t n);
/* Convert n fp32 elements to dst of type F32, F16 or BF16. */
void sharc_from_f32(void *dst, const float *src, sharc_dtype t, int64_t n);
/* dst = src rounded to t (BF16, F16) and widened back; a copy for F32. */
void sharc_round_f32(float *dst, const float *src, sharc_dtype t, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
