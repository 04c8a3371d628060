/* sharc/chat.h: chat templates as fixed formats. Hugging Face keeps a
 * model's chat template as a Jinja program in tokenizer_config.json; sharc
 * does not run Jinja. It renders a few known templates with C code that
 * produces the same bytes (checked against python3-jinja2 running the real
 * template strings, tests/test_chat.c), and refuses any other template by
 * name rather than approximating it.
 *
 * Formats:
 *   chatml  "<|im_start|>{role}\n{content}<|im_end|>\n" per message; the
 *           generation prompt "<|im_start|>assistant\n"
 *   qwen3   Qwen3's template without tools: ChatML, plus a think block
 *           "<think>\n{reasoning}\n</think>\n\n" on assistant turns after the
 *           last user query (empty for the last turn when it has none), the
 *           reasoning taken from `reasoning_content` or split off a content
 *           holding "</think>"
 *   llama3  Llama-3 Instruct as first released: BOS before the first message,
 *           "<|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}<|eot_id|>",
 *           and always a trailing "<|start_header_id|>assistant<|end_header_id|>\n\n"
 *
 * A rendering is cut into spans: the part of each assistant turn after its
 * header (what the model must produce, its end-of-turn token included) is a
 * response span; everything else is prompt. SFT builds its loss mask from
 * these spans (sharc/sft.h). */
#ifndef SHARC_CHAT_H
#define SHARC_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "sharc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SHARC_CHAT_AUTO = 0, SHARC_CHAT_CHATML, SHARC_CHAT_QWEN3, SHARC_CHAT_LLAMA3 } sharc_chat_format;

/* "auto", "chatml", "qwen3", "llama3" -> format; -1 if unknown. */
int sharc_chat_format_parse(const char *name);
const char *sharc_chat_format_name(sharc_chat_format f);

/* The format a tokenizer_config.json chat_template is (by the sha256 of its
 * text); an unknown template is an error that names the supported ones. */
sharc_status sharc_chat_identify(const char *template_text, const char *where, sharc_chat_format *out);

typedef enum { SHARC_ROLE_SYSTEM = 0, SHARC_ROLE_USER, SHARC_ROLE_ASSISTANT } sharc_chat_role;

typedef struct {
    sharc_chat_role role;
    const char *content; /* UTF-8, borrowed */
    size_t len;
    const char *reasoning; /* qwen3's reasoning_content; NULL: absent */
    size_t reasoning_len;
} sharc_chat_msg;

typedef enum { SHARC_SPAN_PROMPT = 0, SHARC_SPAN_RESPONSE, SHARC_SPAN_GENERATION } sharc_span_kind;

typedef struct {
    size_t start, end; /* bytes of the rendered text */
    sharc_span_kind kind;
    int message; /* index of the message it renders, -1 for the trailing generation prompt */
} sharc_chat_span;

/* A rendering: text and its spans, contiguous and covering the text. */
typedef struct {
    char *text; /* malloc'd, NUL-terminated */
    size_t len, cap;
    sharc_chat_span *spans;
    size_t nspans, span_cap;
} sharc_chat_text;

typedef struct {
    bool add_generation_prompt;
    bool disable_thinking; /* qwen3: enable_thinking=false (an empty think block after the generation prompt) */
    const char *bos;       /* llama3: the bos_token text */
} sharc_chat_options;

/* Render msgs (n >= 1) in format f (not AUTO) into out (appended to; reuse
 * it across calls). */
sharc_status sharc_chat_render(sharc_chat_format f, const sharc_chat_msg *msgs, size_t n, const sharc_chat_options *o,
                               sharc_chat_text *out);
void sharc_chat_text_clear(sharc_chat_text *t);
void sharc_chat_text_free(sharc_chat_text *t);

#ifdef __cplusplus
}
#endif
#endif
