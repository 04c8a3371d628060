/* cpu.c: the CPU device backend: host memory, one implicit stream (work runs
 * when it is called, so a stream never has anything left to wait for), and
 * the kernel table of this folder's sharc_cpu_* kernels. Events are the
 * dispatcher's fallback (record = the point is reached). */
#include "cpu.h"
#include "../device_impl.h"

#include <stdlib.h>
#include <string.h>

static int cpu_count(void) { return 1; }

static void *cpu_alloc(sharc_device *d, size_t bytes) {
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded < bytes) return NULL;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (p) memset(p, 0, rounded ? rounded : 64);
    return p;
}

static void cpu_free(sharc_device *d, void *p) { free(p); }

static sharc_status cpu_memset0(sharc_device *d, void *p, size_t bytes, sharc_stream *s) {
    memset(p, 0, bytes);
    return SHARC_OK;
}

static sharc_status cpu_copy(sharc_device *d, void *dst, const void *src, size_t bytes, sharc_copy_kind kind,
                             sharc_stream *s) {
    memcpy(dst, src, bytes);
    return SHARC_OK;
}

static sharc_status cpu_synchronize(sharc_stream *s) { return SHARC_OK; }

static const sharc_kernels cpu_kernels = {
    .matmul_forward = sharc_cpu_matmul_forward,
    .matmul_backward = sharc_cpu_matmul_backward,
    .layernorm_forward = sharc_cpu_layernorm_forward,
    .layernorm_backward = sharc_cpu_layernorm_backward,
    .rmsnorm_forward = sharc_cpu_rmsnorm_forward,
    .rmsnorm_backward = sharc_cpu_rmsnorm_backward,
    .head_rmsnorm_forward = sharc_cpu_head_rmsnorm_forward,
    .head_rmsnorm_backward = sharc_cpu_head_rmsnorm_backward,
    .gelu_forward = sharc_cpu_gelu_forward,
    .gelu_backward = sharc_cpu_gelu_backward,
    .swiglu_forward = sharc_cpu_swiglu_forward,
    .swiglu_backward = sharc_cpu_swiglu_backward,
    .add = sharc_cpu_add,
    .embedding_forward = sharc_cpu_embedding_forward,
    .embedding_backward = sharc_cpu_embedding_backward,
    .rope_table = sharc_cpu_rope_table,
    .rope_table_pos = sharc_cpu_rope_table_pos,
    .rope_forward = sharc_cpu_rope_forward,
    .rope_backward = sharc_cpu_rope_backward,
    .attention_workspace = sharc_cpu_attention_workspace,
    .attention_forward = sharc_cpu_attention_forward,
    .attention_backward = sharc_cpu_attention_backward,
    .attention_cached = sharc_cpu_attention_cached,
    .xent_forward_backward = sharc_cpu_xent_forward_backward,
    .lmhead_xent = sharc_cpu_lmhead_xent,
    .moe_route_forward = sharc_cpu_moe_route_forward,
    .moe_route_backward = sharc_cpu_moe_route_backward,
    .moe_gather = sharc_cpu_moe_gather,
    .moe_scatter_add = sharc_cpu_moe_scatter_add,
    .moe_row_dot = sharc_cpu_moe_row_dot,
    .moe_prob_sum = sharc_cpu_moe_prob_sum,
    .vocab_embedding_forward = sharc_cpu_vocab_embedding_forward,
    .vocab_embedding_backward = sharc_cpu_vocab_embedding_backward,
    .vocab_xent_stats = sharc_cpu_vocab_xent_stats,
    .vocab_xent_finish = sharc_cpu_vocab_xent_finish,
    .cast = sharc_cpu_cast,
    .round = sharc_cpu_round,
    .accumulate = sharc_cpu_accumulate,
    .sum_ranks = sharc_cpu_sum_ranks,
    .sumsq = sharc_cpu_sumsq,
    .loss_add = sharc_cpu_loss_add,
    .adamw = sharc_cpu_adamw,
    .copy_block = sharc_cpu_copy_block,
    .fill = sharc_cpu_fill,
    .init_normal = sharc_cpu_init_normal,
    .adamw_multi = sharc_cpu_adamw_multi,
    .add_layernorm_forward = sharc_cpu_add_layernorm_forward,
    .add_rmsnorm_forward = sharc_cpu_add_rmsnorm_forward,
    .bf16_compute = sharc_cpu_bf16_compute,
    .matmul_forward_bf16 = sharc_cpu_matmul_forward_bf16,
    .matmul_backward_bf16 = sharc_cpu_matmul_backward_bf16,
    .lmhead_xent_bf16 = sharc_cpu_lmhead_xent_bf16,
    .matmul_forward_b16 = sharc_cpu_matmul_forward_b16,
    .matmul_backward_b16 = sharc_cpu_matmul_backward_b16,
};

const sharc_device_i sharc_cpu_device_i = {
    .name = "cpu",
    .host_memory = true,
    .count = cpu_count,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .memset0 = cpu_memset0,
    .copy = cpu_copy,
    .synchronize = cpu_synchronize,
    .kernels = &cpu_kernels,
};
