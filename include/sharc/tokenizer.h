/* sharc/tokenizer.h: byte-level BPE tokenizers read from a Hugging Face
 * tokenizer.json (and, beside it, tokenizer_config.json): GPT-2, Llama-3,
 * Qwen2/Qwen3 and the other files of that shape. Encoding reproduces the
 * Hugging Face `tokenizers` library's ids (add_special_tokens=False unless
 * said otherwise); decoding is lossless: decode(encode(x)) == x for valid
 * UTF-8, added tokens rendering as their content.
 *
 * What is read, and what is refused with a message naming the field, is
 * listed in docs/ARCHITECTURE.md ("Tokenizers"). In short, the encode
 * pipeline is:
 *   1. split the raw text on added tokens (leftmost-longest match);
 *   2. NFC-normalise the other pieces if `normalizer` asks (utf8proc);
 *   3. split them with the pre-tokenizer's regexes (Oniguruma, the engine
 *      Hugging Face's Rust crate uses), behaviour Isolated;
 *   4. map bytes to GPT-2's byte alphabet and merge by BPE rank (the lowest
 *      rank first, leftmost first among equals), or, with `ignore_merges`,
 *      take a whole pre-token that is itself in the vocabulary.
 *
 * A sharc_tokenizer is immutable after loading and may be shared by
 * threads; each thread encodes through its own sharc_encoder (compiled
 * regexes, scratch and a cache of recent words). */
#ifndef SHARC_TOKENIZER_H
#define SHARC_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sharc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A growable id array (malloc'd). */
typedef struct {
    int32_t *ids;
    size_t n, cap;
} sharc_ids;
sharc_status sharc_ids_push(sharc_ids *v, int32_t id);
sharc_status sharc_ids_reserve(sharc_ids *v, size_t n);
void sharc_ids_free(sharc_ids *v);

typedef struct sharc_tokenizer sharc_tokenizer;

/* path: a tokenizer.json file or a directory holding one; a
 * tokenizer_config.json next to it (optional) gives bos/eos/pad and the chat
 * template (a chat_template.jinja beside it is read when the config has none). */
sharc_status sharc_tokenizer_load(sharc_tokenizer **out, const char *path);
/* The same from memory; config_json may be NULL; name appears in messages. */
sharc_status sharc_tokenizer_load_json(sharc_tokenizer **out, const char *json, size_t len, const char *config_json,
                                       const char *name);
void sharc_tokenizer_free(sharc_tokenizer *t);

const char *sharc_tokenizer_path(const sharc_tokenizer *t);
/* Largest id + 1 (vocabulary and added tokens); the model's vocab_size must
 * be at least this. */
int32_t sharc_tokenizer_num_ids(const sharc_tokenizer *t);
/* Ids of tokenizer_config.json's bos_token, eos_token, pad_token (-1: none). */
int32_t sharc_tokenizer_bos(const sharc_tokenizer *t);
int32_t sharc_tokenizer_eos(const sharc_tokenizer *t);
int32_t sharc_tokenizer_pad(const sharc_tokenizer *t);
/* Their text (NULL: none). */
const char *sharc_tokenizer_bos_text(const sharc_tokenizer *t);
const char *sharc_tokenizer_eos_text(const sharc_tokenizer *t);
/* tokenizer_config.json's chat_template (the "default" one of a list), or NULL. */
const char *sharc_tokenizer_chat_template(const sharc_tokenizer *t);
/* sha256 of the tokenizer.json bytes (note [tokenizer-fingerprint]). */
const uint8_t *sharc_tokenizer_sha256(const sharc_tokenizer *t);
/* The ids the post-processor puts before / after one sequence
 * (add_special_tokens=True; TemplateProcessing's "single"). */
size_t sharc_tokenizer_prefix_ids(const sharc_tokenizer *t, const int32_t **ids);
size_t sharc_tokenizer_suffix_ids(const sharc_tokenizer *t, const int32_t **ids);
/* The id of a token given by its text (an added token's content, or a
 * vocabulary entry's bytes), or -1. */
int32_t sharc_tokenizer_token_id(const sharc_tokenizer *t, const char *text, size_t len);
/* The bytes id decodes to (NULL and *len = 0 for an id without a token). */
const char *sharc_tokenizer_token_bytes(const sharc_tokenizer *t, int32_t id, size_t *len);
/* Whether id is an added token marked special. */
bool sharc_tokenizer_is_special(const sharc_tokenizer *t, int32_t id);
/* The bytes of ids, concatenated, in a malloc'd NUL-terminated buffer. Ids
 * without a token decode to nothing. */
sharc_status sharc_tokenizer_decode(const sharc_tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *len);

typedef struct sharc_encoder sharc_encoder;

sharc_status sharc_encoder_init(sharc_encoder **out, const sharc_tokenizer *t);
void sharc_encoder_free(sharc_encoder *e);
/* Append the ids of `text` (UTF-8; invalid UTF-8 is an error giving the byte
 * offset). Added tokens in the text become their ids; nothing is added
 * around it (Hugging Face add_special_tokens=False). */
sharc_status sharc_encoder_encode(sharc_encoder *e, const char *text, size_t len, sharc_ids *out);
/* The byte length of `text` after the normaliser (equal to len unless the
 * tokenizer normalises): decoding encode(text) gives that many bytes. */
sharc_status sharc_encoder_normalized_length(sharc_encoder *e, const char *text, size_t len, size_t *out);

/* Encode a whole text on `threads` threads (0: OpenMP's default) and append
 * its ids to *out: the same ids as one sharc_encoder_encode of the whole
 * text. The text is cut only where no pre-token can cross (note
 * [safe-cuts] in src/data/encoder.c); when the tokenizer's regexes are not
 * ones that rule is known for, it is encoded in one piece. After each batch
 * of pieces, in text order, emit(out, done_bytes, total, ctx) is called on
 * the calling thread (may be NULL): it may consume the ids (write them and
 * set out->n = 0); a status other than SHARC_OK stops the encoding. */
sharc_status sharc_tokenizer_encode_text(const sharc_tokenizer *t, const char *text, size_t len, int threads,
                                         sharc_status (*emit)(sharc_ids *ids, size_t done, size_t total, void *ctx),
                                         void *ctx, sharc_ids *out);

#ifdef __cplusplus
}
#endif
#endif
