/* tokenizer_impl.h: the inside of a sharc_tokenizer, shared by tokenizer.c
 * (loading, checking, decoding) and encoder.c (encoding); not a public
 * header. Also the two hash tables both use: byte strings -> id (keys are
 * the tokens' own bytes, kept once in the tokenizer's arena) and id pairs ->
 * merge. */
#ifndef SHARC_TOKENIZER_IMPL_H
#define SHARC_TOKENIZER_IMPL_H

#include "sharc/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define TOK_MAX_REGEX  4
#define TOK_MAX_AROUND 8 /* post-processor ids before / after a sequence */

/* tok_flags bits */
#define TOK_EXISTS    1u
#define TOK_ADDED     2u
#define TOK_SPECIAL   4u
#define TOK_BYTELEVEL 8u /* a vocabulary entry made of byte-alphabet characters only */

/* Open addressing, linear probing; a slot is (hash32 << 32) | (id + 1), 0 = empty. */
typedef struct {
    uint64_t *slots; /* (cap) */
    size_t cap;      /* power of two, at least twice the entries */
} tok_strmap;

typedef struct {
    uint64_t key; /* ((a + 1) << 32) | b; 0 = empty */
    int32_t rank;
    int32_t id; /* the merged token */
} tok_pair;

typedef struct {
    tok_pair *slots; /* (cap) */
    size_t cap;
} tok_pairmap;

struct sharc_tokenizer {
    char *path; /* the tokenizer.json read (or the name given) */
    uint8_t sha256[32];
    int32_t num_ids;
    /* per id (num_ids): its bytes in `bytes` (decoded: raw bytes for byte-level
     * tokens, the UTF-8 content for added or other tokens) */
    uint32_t *tok_off, *tok_len;
    uint8_t *tok_flags;
    char *bytes;
    size_t nbytes;
    tok_strmap vocab;     /* raw bytes -> id, byte-level vocabulary entries */
    tok_strmap added;     /* content -> id, added tokens */
    int32_t byte_id[256]; /* the single-byte token of each byte */
    tok_pairmap merges;   /* (left id, right id) -> (rank, merged id) */
    bool ignore_merges;
    /* added tokens by first byte, longest first: ids added_by_first[first_start[b] .. first_start[b+1]) */
    int32_t *added_sorted;
    uint32_t first_start[257];
    int32_t max_added_len;
    bool nfc;    /* normalizer NFC */
    int n_regex; /* pre-tokenizer splits, applied in order */
    char *regex[TOK_MAX_REGEX];
    bool chunk_safe; /* note [safe-cuts] */
    int32_t prefix[TOK_MAX_AROUND], suffix[TOK_MAX_AROUND];
    size_t n_prefix, n_suffix;
    int32_t bos, eos, pad;
    char *bos_text, *eos_text, *chat_template;
};

/* GPT-2's bytes_to_unicode: byte -> code point, and back (-1: not in the alphabet). */
uint32_t sharc_tok_byte_to_cp(unsigned b);
int sharc_tok_cp_to_byte(uint32_t cp);

uint32_t sharc_tok_hash(const void *p, size_t n);
int32_t sharc_tok_strmap_get(const tok_strmap *m, const sharc_tokenizer *t, const char *s, size_t n);
const tok_pair *sharc_tok_pair_get(const tok_pairmap *m, int32_t a, int32_t b);
/* Valid UTF-8 length of the longest valid prefix of s (== n when all valid). */
size_t sharc_tok_utf8_valid(const unsigned char *s, size_t n);

/* The regexes of GPT-2, Llama-3 and Qwen2/3 (note [safe-cuts]). */
extern const char *const sharc_tok_gpt2_regex;

#endif
