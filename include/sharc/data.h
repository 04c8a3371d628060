/* sharc/data.h: token datasets and the deterministic batch sampler.
 *
 * Formats (data.format):
 *   u16   raw little-endian uint16 tokens, no header (nanoGPT's train.bin)
 *   u32   raw little-endian uint32 tokens, no header
 *   llmc  llm.c shards: 256 x int32 header (magic 20240520 version 1 -> uint16
 *         tokens; magic 20240801 version 7 -> uint32 tokens), header[2] = token
 *         count, the file size must be exactly 1024 + count x token size
 *   text  raw UTF-8 text through the byte-level tokenizer: token = byte (vocab 256),
 *         or, with model.tokenizer, through that tokenizer (sharc/dataprep.h)
 *   sft   a sharc SFT token file (sharc tokenize): samples of uint32 tokens,
 *         bit 31 marking the trained targets (format: docs/ARCHITECTURE.md)
 *   jsonl JSON-lines SFT records, tokenized when training starts
 *         (sharc/dataprep.h, sharc/sft.h); not a format this file opens
 *   auto  llmc or sft by the file's magic, else by extension: .txt/.text ->
 *         text, .bin/.u16 -> u16, .u32 -> u32, .jsonl -> jsonl; anything else
 *         is an error asking for data.format.
 * Every token is checked against the model's vocabulary when the file is
 * opened; a bad one is reported with its position.
 *
 * Datasets are token streams (cut into windows below) or lists of samples
 * (SFT: one sample per item, padded to T, its untrained targets masked).
 *
 * Note [sampler-rule]: the exact batch of every step, the rule that makes an
 * N-process run comparable with a 1-process run.
 *   - Window k holds tokens [k*T, k*T + T + 1): inputs are its first T tokens,
 *     targets its last T. Windows overlap by one token; W = (ntokens - 1) / T.
 *   - A step consumes G = batch_size x grad_accum x dp_size sequences: sample
 *     g = step x G + j for j in [0, G). Epoch e = g / W, position p = g % W.
 *     The window is p without shuffling, perm_e[p] with shuffling, where perm_e
 *     is a Fisher-Yates permutation of [0, W) drawn from Philox(seed, stream e).
 *   - Data-parallel rank r of R, micro-batch m of A, row i of B takes
 *     j = m x R x B + r x B + i.
 * So the global batch of a step is the same set of windows whatever R is,
 * and with R = 1, A = k it equals R = k, A = 1.
 * With samples (SFT) the same rule picks samples instead of windows: W is the
 * number of samples, item k is sample k: inputs its tokens [0, T), pad (0)
 * after its end; targets its tokens [1, T + 1), -1 where a token is not a
 * trained target and after its end.
 *
 * Note [packing-rule] (data.packing): sharc_dataset_pack turns the samples
 * into packed rows of T positions, greedily in file order (next fit): a
 * sample of L tokens takes L - 1 positions (its tokens [0, L - 1) as inputs,
 * [1, L) as targets, so no target crosses into the next sample); it joins
 * the current row if it fits, else starts the next row; samples of one
 * token (no target) are skipped; the row's unused tail is padding (inputs 0,
 * targets -1, positions counting from 0 as one more segment). W is then the
 * number of packed rows and item k is row k; sharc_dataset_positions gives
 * each position's index inside its sample (note [packing] in
 * src/model/model.c). Every sample lands in exactly one row, so the sampler
 * rule above is unchanged. */
#ifndef SHARC_DATA_H
#define SHARC_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "sharc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SHARC_TOKENS_AUTO = 0,
    SHARC_TOKENS_U16,
    SHARC_TOKENS_U32,
    SHARC_TOKENS_LLMC,
    SHARC_TOKENS_TEXT,
    SHARC_TOKENS_SFT,
    SHARC_TOKENS_JSONL
} sharc_token_format;

/* "auto", "u16", "u32", "llmc", "text", "sft", "jsonl" -> format; -1 if unknown. */
int sharc_token_format_parse(const char *s);
const char *sharc_token_format_name(sharc_token_format f);

typedef struct sharc_dataset sharc_dataset;

/* Open (memory-map) a token file and validate it against vocab_size. AUTO
 * resolves as above; jsonl (and text with a tokenizer) are sharc/dataprep.h's. */
sharc_status sharc_dataset_open(sharc_dataset **out, const char *path, sharc_token_format fmt, int vocab_size);
/* The format AUTO resolves to for `path` (by magic, then extension). */
sharc_status sharc_dataset_detect(const char *path, sharc_token_format *out);
/* A dataset over tokens in memory, taken over (malloc'd; freed with the
 * dataset): a stream of ntokens ids (offsets NULL), or samples: tokens with
 * SHARC_SFT_TRAINED bits (sharc/sft.h) and offsets (nsamples + 1). `name`
 * names it in messages; sha256 (may be NULL) is the tokenizer fingerprint. */
sharc_status sharc_dataset_from_memory(sharc_dataset **out, const char *name, uint32_t *tokens, int64_t ntokens,
                                       uint64_t *offsets, int64_t nsamples, const uint8_t *sha256, int vocab_size);
void sharc_dataset_free(sharc_dataset *d);
int64_t sharc_dataset_num_tokens(const sharc_dataset *d);
sharc_token_format sharc_dataset_format(const sharc_dataset *d);
/* The file the dataset was opened from. */
const char *sharc_dataset_path(const sharc_dataset *d);
/* Copy tokens [start, start + n) as int32 (start + n <= num_tokens; a stream). */
void sharc_dataset_read(const sharc_dataset *d, int64_t start, int64_t n, int32_t *dst);
/* Write ids (each < vocab) as an llm.c token file (uint16 when vocab <= 65536,
 * else uint32), atomically; sha256 (may be NULL), the tokenizer fingerprint,
 * goes into unused header words (docs/ARCHITECTURE.md, "Token files"). */
sharc_status sharc_tokens_write_llmc(const char *path, const int32_t *ids, int64_t n, int vocab, const uint8_t *sha256);
/* Samples (SFT), 0 for a token stream. */
int64_t sharc_dataset_num_samples(const sharc_dataset *d);
/* Tokens of the longest sample (0 for a stream). */
int64_t sharc_dataset_longest_sample(const sharc_dataset *d);
/* The tokenizer fingerprint stored with the tokens (sha256), or NULL. */
const uint8_t *sharc_dataset_tokenizer_sha256(const sharc_dataset *d);
/* Note [packing-rule]: pack the samples into rows of T positions; items are
 * then those rows. Errors on a stream or a sample longer than T + 1 tokens. */
sharc_status sharc_dataset_pack(sharc_dataset *d, int T);
/* Whether sharc_dataset_pack was applied. */
bool sharc_dataset_packed(const sharc_dataset *d);
/* The position of each of item k's T tokens inside its sample (0, 1, ...
 * restarting where a packed sample starts; 0 .. T-1 for other items). */
void sharc_dataset_positions(const sharc_dataset *d, int64_t k, int T, int32_t *pos);
/* Items of T positions: windows of a stream ((ntokens - 1) / T), samples, or packed rows. */
int64_t sharc_dataset_num_items(const sharc_dataset *d, int T);
/* Item k as inputs and targets (T each, note [sampler-rule]); returns the
 * number of targets >= 0. */
int64_t sharc_dataset_item(const sharc_dataset *d, int64_t k, int T, int32_t *inputs, int32_t *targets);

typedef struct {
    int seq_len;    /* T */
    int batch_size; /* B: sequences per micro-batch per data-parallel rank */
    int grad_accum; /* A: micro-batches per step */
    int dp_size;    /* R: data-parallel ranks sharing a step */
    bool shuffle;
    uint64_t seed;
} sharc_sampler_config;

typedef struct sharc_sampler sharc_sampler;

/* Errors (naming train.seq_len / the file) if the dataset has fewer than
 * one window. */
sharc_status sharc_sampler_init(sharc_sampler **out, const sharc_dataset *d, const sharc_sampler_config *c);
void sharc_sampler_free(sharc_sampler *s);
/* Windows per epoch (W). */
int64_t sharc_sampler_windows(const sharc_sampler *s);
/* The window of global sample g (note [sampler-rule]). */
int64_t sharc_sampler_window_of(sharc_sampler *s, int64_t g);
/* inputs, targets (B x T) of micro-batch `micro` of data-parallel rank
 * `dp_rank` at step `step`. */
void sharc_sampler_batch(sharc_sampler *s, int64_t step, int micro, int dp_rank, int32_t *inputs, int32_t *targets);
/* pos (B x T): the positions of the same batch's tokens (sharc_dataset_positions). */
void sharc_sampler_positions(sharc_sampler *s, int64_t step, int micro, int dp_rank, int32_t *pos);

/* Byte-level tokenizer (vocab 256): encode is the identity on bytes. */
int64_t sharc_byte_encode(const char *text, int64_t len, int32_t *tokens);
/* Decode tokens < 256 to bytes; returns the number of bytes written. */
int64_t sharc_byte_decode(const int32_t *tokens, int64_t n, char *out);

#ifdef __cplusplus
}
#endif
#endif
