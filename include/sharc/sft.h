/* sharc/sft.h: supervised fine-tuning samples from JSONL records, read the
 * way OpenRLHF's SFT dataset reads them (its flag names are the keys:
 * input_key, output_key, apply_chat_template, input_template, max_len,
 * multiturn), tokenized, with a loss mask over the response tokens.
 *
 * Records (one JSON object per line; blank lines are skipped):
 *   no chat template  {input_key: "question", output_key: "answer"}:
 *                     prompt = input_template with {} = the input (or the input
 *                     itself when input_template is ""), response = the output
 *   chat template,    strings: [user: input] + [assistant: output]; lists of
 *   output_key set    messages: input messages + output messages
 *   chat template,    {input_key: [messages]}: the last message is the response
 *   no output_key     (with multiturn: every assistant message)
 * Messages are {"role": system|user|assistant, "content": string} with an
 * optional "reasoning_content" (Qwen3); other roles and tool calls are refused.
 *
 * Note [sft-mask]. Two ways to choose the trained tokens:
 *  - ranges (the default): the sample's text is rendered once as segments
 *    (prompt, response), tokenized once, and a token is trained iff its bytes
 *    overlap a response segment. A token that BPE merges across the
 *    boundary (" Four" after "Assistant:") is trained. Trailing newlines are
 *    dropped and the EOS token is appended (trained) unless the text already
 *    ends with it; a chat template's trailing generation prompt (Llama-3's
 *    always-on assistant header) is not part of a training sample.
 *  - openrlhf: OpenRLHF's SFTDataset exactly: text = (prompt +
 *    response).rstrip("\n") + (" " + eos unless it ends with eos), the
 *    response a string slice full[len(prompt):] (in code points), the mask
 *    from the prompt tokenized on its own (loss_mask[prompt_len-1 : -1],
 *    which leaves the first response token untrained when BPE merges it
 *    with the prompt's last characters), multiturn ranges from each turn's
 *    prompt and response tokenized on their own.
 * In both, a sample is dropped when its prompt or response is empty or its
 * prompt has max_len - 2 tokens or more; the ids are cut to max_len with the
 * last one forced to EOS. The count of dropped samples and why is reported.
 *
 * Samples are stored as token ids with bit 31 set on every token that is a
 * trained target (the token the previous position predicts). */
#ifndef SHARC_SFT_H
#define SHARC_SFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sharc/chat.h"
#include "sharc/status.h"
#include "sharc/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SHARC_SFT_TRAINED 0x80000000u /* bit of a trained target in a stored token */

typedef enum { SHARC_SFT_MASK_RANGES = 0, SHARC_SFT_MASK_OPENRLHF } sharc_sft_mask;

typedef struct {
    const char *input_key;  /* OpenRLHF's default "input" */
    const char *output_key; /* "": none */
    bool apply_chat_template;
    sharc_chat_format chat_format; /* AUTO: the tokenizer's chat_template, recognised */
    const char *input_template;    /* "": the input as is; else exactly one {} */
    int max_len;                   /* tokens per sample (>= 4) */
    bool multiturn;
    sharc_sft_mask mask;
} sharc_sft_options;

typedef struct {
    uint32_t *tokens;  /* (ntokens) id | SHARC_SFT_TRAINED */
    uint64_t *offsets; /* (nsamples + 1) sample k is tokens [offsets[k], offsets[k+1]) */
    size_t ntokens, nsamples;
    size_t records;                     /* records read */
    size_t dropped_empty, dropped_long; /* dropped: empty prompt or response; prompt >= max_len - 2 tokens */
    size_t truncated;                   /* samples cut to max_len */
    size_t trained;                     /* trained targets in all samples */
    uint32_t longest;                   /* tokens of the longest sample */
} sharc_sft_data;

/* Check options against the tokenizer (keys, template, EOS); errors name the data.* key. */
sharc_status sharc_sft_check(const sharc_tokenizer *t, const sharc_sft_options *o, sharc_chat_format *format);

/* Read JSONL from memory (name appears in messages: "NAME line N: ...") on
 * `threads` threads (0: OpenMP's default). progress(records done, records,
 * ctx) is called on the calling thread after each batch (may be NULL). */
sharc_status sharc_sft_build(const sharc_tokenizer *t, const sharc_sft_options *o, const char *jsonl, size_t len,
                             const char *name, int threads, void (*progress)(size_t done, size_t total, void *ctx),
                             void *ctx, sharc_sft_data *out);
void sharc_sft_free(sharc_sft_data *d);

/* Write d as a sharc SFT token file (format in docs/ARCHITECTURE.md, "SFT
 * data"), atomically. */
sharc_status sharc_sft_write(const char *path, const sharc_sft_data *d, const sharc_tokenizer *t, int max_len);

/* Python's str.format(input) for a template with exactly one {} ({{ and }}
 * are braces); malloc'd result. */
sharc_status sharc_sft_format_template(const char *tmpl, const char *input, size_t len, char **out, size_t *outlen);

#ifdef __cplusplus
}
#endif
#endif
