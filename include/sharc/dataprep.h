/* sharc/dataprep.h: from a run's configuration to its tokenizer and
 * datasets. Shared by `sharc train` (the trainer opens data.path and
 * data.val_path through it), `sharc tokenize` and `sharc generate`.
 *
 * The tokenizer: model.tokenizer (a tokenizer.json or its directory); else,
 * when model.init_from is a Hugging Face directory holding a
 * tokenizer.json, that one; else none: text is byte-level (vocab 256).
 *
 * Note [tokenize-once]. data.path becomes tokens once per run, when it
 * starts, on every rank alike (each rank tokenizes the same bytes the same
 * way on its own cores; no rank waits on another's file, and nothing is
 * cached on disk that could go stale): text through the tokenizer into a
 * token stream, JSONL into SFT samples. For data too large to tokenize at
 * every start, `sharc tokenize` writes the tokens once into a file (llm.c
 * tokens or a sharc SFT file) that training maps read-only. Token files are
 * checked against the tokenizer's fingerprint when both carry one. */
#ifndef SHARC_DATAPREP_H
#define SHARC_DATAPREP_H

#include <stdbool.h>

#include "sharc/config.h"
#include "sharc/data.h"
#include "sharc/sft.h"
#include "sharc/status.h"
#include "sharc/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The tokenizer c names, as a path in buf ("" when byte-level). */
const char *sharc_dataprep_tokenizer_path(const sharc_config *c, char *buf, size_t n);
/* Load it (*out = NULL when byte-level); checks it fits model.vocab_size. */
sharc_status sharc_dataprep_tokenizer(const sharc_config *c, sharc_tokenizer **out);
/* The SFT options of c's data.* keys (max_len 0 -> train.seq_len + 1); the
 * strings point into c. */
void sharc_dataprep_sft_options(const sharc_config *c, sharc_sft_options *o);
/* The format of path under c (data.format, or detected). */
sharc_status sharc_dataprep_format(const sharc_config *c, const char *path, sharc_token_format *out);
/* Open path as training reads it (note [tokenize-once]) on `threads`
 * threads; report: print what tokenizing did (rank 0). */
sharc_status sharc_dataprep_open(const sharc_config *c, const sharc_tokenizer *t, const char *path, int threads,
                                 bool report, sharc_dataset **out);

/* Pretraining documents from JSONL (sharc tokenize): each record's `key`
 * string encoded, followed by EOS when eos, appended to out in file order. */
sharc_status sharc_dataprep_documents(const sharc_tokenizer *t, const char *key, bool eos, const char *jsonl,
                                      size_t len, const char *name, int threads,
                                      void (*progress)(size_t done, size_t total, void *ctx), void *ctx,
                                      sharc_ids *out);

/* `sharc tokenize`: c's data.path (text, or JSONL) into a token file: text
 * and JSONL documents (neither data.output_key nor data.apply_chat_template
 * set; each document followed by EOS) as llm.c tokens, JSONL SFT records as
 * a sharc SFT file. out "" = data.path with .bin / .sft for its extension;
 * the path written goes to `written`. progress (may be NULL) is called on
 * the calling thread with bytes or records done. */
sharc_status sharc_dataprep_tokenize(const sharc_config *c, const sharc_tokenizer *t, const char *out, int threads,
                                     void (*progress)(size_t done, size_t total, const char *unit, void *ctx),
                                     void *ctx, char *written, size_t written_len);

#ifdef __cplusplus
}
#endif
#endif
