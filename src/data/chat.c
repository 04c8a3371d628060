/* chat.c: sharc_chat_*, the fixed chat formats of sharc/chat.h and the
 * recognition of the Jinja templates they reproduce.
 *
 * Note [chat-templates]. Each format is the C rendering of one real
 * template, byte for byte, for text-only system/user/assistant messages
 * (no tools). The templates are recognised by the sha256 of their text:
 *   qwen3  Qwen3's tokenizer_config.json (4116 bytes)
 *   llama3 Meta-Llama-3-8B-Instruct's first release (348 bytes)
 *   chatml the common ChatML template (199 bytes):
 *          {% for message in messages %}{{'<|im_start|>' + message['role'] + '\n'
 *          + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if
 *          add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}
 * (tests/test_chat.c renders seeded conversations both ways). The Jinja
 * details reproduced: Llama-3's `| trim` is Python's str.strip() (Unicode
 * whitespace as str.isspace has it); Qwen3's reasoning split uses Python's
 * str.split / strip('\n') / lstrip('\n'), its "last query" skips user
 * messages wrapped in <tool_response>...</tool_response>, and a system
 * message that is not first renders like a user one. */
#include "sharc/chat.h"

#include <nettle/sha2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const format_names[] = {"auto", "chatml", "qwen3", "llama3"};

int sharc_chat_format_parse(const char *name) {
    for (int i = 0; i < 4; i++)
        if (name && !strcasecmp(name, format_names[i])) return i;
    return -1;
}

const char *sharc_chat_format_name(sharc_chat_format f) { return (unsigned)f < 4 ? format_names[f] : "unknown"; }

static const struct {
    const char *sha256;
    sharc_chat_format format;
    const char *what;
} known[] = {
    {"87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5", SHARC_CHAT_QWEN3, "Qwen3"},
    {"b48c47f6443892716176eb200bf4ef108f64e06ca26ed0fa8ebc0a4b3992fcb2", SHARC_CHAT_LLAMA3,
     "Llama-3 Instruct (first release)"},
    {"fcf7a096fe99a48fd9ad2b250bf9237e96e8f48bffec1c7ea4d3f225176cd40e", SHARC_CHAT_CHATML, "ChatML"},
};

sharc_status sharc_chat_identify(const char *template_text, const char *where, sharc_chat_format *out) {
    if (!template_text)
        return sharc_error(SHARC_ERR_INVALID,
                           "%s has no chat_template; set data.chat_template to chatml, qwen3 or llama3", where);
    struct sha256_ctx c;
    uint8_t d[32];
    char hex[65];
    sha256_init(&c);
    sha256_update(&c, strlen(template_text), (const uint8_t *)template_text);
    sha256_digest(&c, 32, d);
    for (int i = 0; i < 32; i++) sprintf(hex + 2 * i, "%02x", d[i]);
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(hex, known[i].sha256)) {
            *out = known[i].format;
            return SHARC_OK;
        }
    return sharc_error(SHARC_ERR_UNSUPPORTED,
                       "%s: its chat_template (%zu bytes, sha256 %.16s...) is not one sharc renders; sharc reproduces "
                       "the Qwen3, Llama-3 Instruct and ChatML templates exactly and runs no Jinja. If this template "
                       "renders the same text as one of them, set data.chat_template to chatml, qwen3 or llama3",
                       where, strlen(template_text), hex);
}

/* ------------------------------------------------------------ output */

void sharc_chat_text_clear(sharc_chat_text *t) {
    t->len = 0;
    t->nspans = 0;
    if (t->text) t->text[0] = 0;
}

void sharc_chat_text_free(sharc_chat_text *t) {
    free(t->text);
    free(t->spans);
    memset(t, 0, sizeof *t);
}

static sharc_status emit(sharc_chat_text *t, const char *s, size_t n, sharc_span_kind kind, int message) {
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->len + n + 1) cap *= 2;
        char *p = realloc(t->text, cap);
        if (!p) return sharc_error(SHARC_ERR_NOMEM, "chat: out of memory");
        t->text = p;
        t->cap = cap;
    }
    if (n == 0) return SHARC_OK;
    memcpy(t->text + t->len, s, n);
    size_t start = t->len;
    t->len += n;
    t->text[t->len] = 0;
    sharc_chat_span *last = t->nspans ? &t->spans[t->nspans - 1] : NULL;
    if (last && last->kind == kind && last->message == message) { /* extend the current span */
        last->end = t->len;
        return SHARC_OK;
    }
    if (t->nspans == t->span_cap) {
        size_t cap = t->span_cap ? 2 * t->span_cap : 16;
        sharc_chat_span *p = realloc(t->spans, cap * sizeof *p);
        if (!p) return sharc_error(SHARC_ERR_NOMEM, "chat: out of memory");
        t->spans = p;
        t->span_cap = cap;
    }
    t->spans[t->nspans++] = (sharc_chat_span){start, t->len, kind, message};
    return SHARC_OK;
}

static sharc_status emit_str(sharc_chat_text *t, const char *s, sharc_span_kind kind, int message) {
    return emit(t, s, strlen(s), kind, message);
}

static const char *role_name(sharc_chat_role r) {
    return r == SHARC_ROLE_SYSTEM ? "system" : r == SHARC_ROLE_USER ? "user" : "assistant";
}

/* ------------------------------------------------------------ Python string methods */

/* str.isspace() for the code point at s (valid UTF-8); its length in *len. */
static bool py_space_at(const char *s, size_t n, size_t *len) {
    const unsigned char *u = (const unsigned char *)s;
    if (u[0] < 0x80) {
        *len = 1;
        return (u[0] >= 9 && u[0] <= 13) || (u[0] >= 0x1C && u[0] <= 0x20);
    }
    if (u[0] == 0xC2 && n >= 2) {
        *len = 2;
        return u[1] == 0x85 || u[1] == 0xA0;
    }
    if (u[0] == 0xE1 && n >= 3) {
        *len = 3;
        return u[1] == 0x9A && u[2] == 0x80; /* U+1680 */
    }
    if (u[0] == 0xE2 && n >= 3) {
        *len = 3;
        if (u[1] == 0x80)
            return u[2] <= 0x8A || u[2] == 0xA8 || u[2] == 0xA9 || u[2] == 0xAF; /* 2000-200A, 2028, 2029, 202F */
        return u[1] == 0x81 && u[2] == 0x9F;                                     /* U+205F */
    }
    if (u[0] == 0xE3 && n >= 3) {
        *len = 3;
        return u[1] == 0x80 && u[2] == 0x80; /* U+3000 */
    }
    *len = u[0] < 0xE0 ? 2 : u[0] < 0xF0 ? 3 : 4;
    return false;
}

/* str.strip() with no argument */
static void py_strip(const char **s, size_t *n) {
    size_t l;
    while (*n > 0 && py_space_at(*s, *n, &l)) *s += l, *n -= l;
    /* from the end: find the start of the last code point */
    while (*n > 0) {
        size_t k = *n - 1;
        while (k > 0 && ((unsigned char)(*s)[k] & 0xC0) == 0x80) k--;
        if (!py_space_at(*s + k, *n - k, &l)) break;
        *n = k;
    }
}

static void lstrip_nl(const char **s, size_t *n) {
    while (*n > 0 && **s == '\n') (*s)++, (*n)--;
}

static void rstrip_nl(const char **s, size_t *n) {
    while (*n > 0 && (*s)[*n - 1] == '\n') (*n)--;
}

static const char *find(const char *s, size_t n, const char *pat) {
    size_t m = strlen(pat);
    for (size_t i = 0; i + m <= n; i++)
        if (!memcmp(s + i, pat, m)) return s + i;
    return NULL;
}

static const char *find_last(const char *s, size_t n, const char *pat) {
    size_t m = strlen(pat);
    for (size_t i = n >= m ? n - m + 1 : 0; i-- > 0;)
        if (!memcmp(s + i, pat, m)) return s + i;
    return NULL;
}

static bool starts_with(const char *s, size_t n, const char *p) { return n >= strlen(p) && !memcmp(s, p, strlen(p)); }
static bool ends_with(const char *s, size_t n, const char *p) {
    size_t m = strlen(p);
    return n >= m && !memcmp(s + n - m, p, m);
}

/* ------------------------------------------------------------ formats */

static sharc_status render_chatml(const sharc_chat_msg *m, size_t n, const sharc_chat_options *o, sharc_chat_text *t) {
    for (size_t i = 0; i < n; i++) {
        const int k = (int)i;
        SHARC_TRY(emit_str(t, "<|im_start|>", SHARC_SPAN_PROMPT, k));
        SHARC_TRY(emit_str(t, role_name(m[i].role), SHARC_SPAN_PROMPT, k));
        SHARC_TRY(emit_str(t, "\n", SHARC_SPAN_PROMPT, k));
        sharc_span_kind body = m[i].role == SHARC_ROLE_ASSISTANT ? SHARC_SPAN_RESPONSE : SHARC_SPAN_PROMPT;
        SHARC_TRY(emit(t, m[i].content, m[i].len, body, k));
        SHARC_TRY(emit_str(t, "<|im_end|>\n", body, k));
    }
    if (o->add_generation_prompt) SHARC_TRY(emit_str(t, "<|im_start|>assistant\n", SHARC_SPAN_GENERATION, -1));
    return SHARC_OK;
}

static bool tool_response(const sharc_chat_msg *m) {
    return starts_with(m->content, m->len, "<tool_response>") && ends_with(m->content, m->len, "</tool_response>");
}

static sharc_status render_qwen3(const sharc_chat_msg *m, size_t n, const sharc_chat_options *o, sharc_chat_text *t) {
    if (m[0].role == SHARC_ROLE_SYSTEM) {
        SHARC_TRY(emit_str(t, "<|im_start|>system\n", SHARC_SPAN_PROMPT, 0));
        SHARC_TRY(emit(t, m[0].content, m[0].len, SHARC_SPAN_PROMPT, 0));
        SHARC_TRY(emit_str(t, "<|im_end|>\n", SHARC_SPAN_PROMPT, 0));
    }
    /* the last user query: scanning back, the first user message that is not a tool response */
    size_t last_query = n - 1;
    for (size_t j = n; j-- > 0;)
        if (m[j].role == SHARC_ROLE_USER && !tool_response(&m[j])) {
            last_query = j;
            break;
        }
    for (size_t i = 0; i < n; i++) {
        const int k = (int)i;
        if (m[i].role == SHARC_ROLE_USER || (m[i].role == SHARC_ROLE_SYSTEM && i > 0)) {
            SHARC_TRY(emit_str(t, "<|im_start|>", SHARC_SPAN_PROMPT, k));
            SHARC_TRY(emit_str(t, role_name(m[i].role), SHARC_SPAN_PROMPT, k));
            SHARC_TRY(emit_str(t, "\n", SHARC_SPAN_PROMPT, k));
            SHARC_TRY(emit(t, m[i].content, m[i].len, SHARC_SPAN_PROMPT, k));
            SHARC_TRY(emit_str(t, "<|im_end|>\n", SHARC_SPAN_PROMPT, k));
        } else if (m[i].role == SHARC_ROLE_ASSISTANT) {
            const char *content = m[i].content, *reason = "";
            size_t clen = m[i].len, rlen = 0;
            if (m[i].reasoning) {
                reason = m[i].reasoning;
                rlen = m[i].reasoning_len;
            } else {
                const char *close = find(content, clen, "</think>");
                if (close) {
                    /* content.split('</think>')[-1].lstrip('\n') */
                    const char *lastc = find_last(content, clen, "</think>");
                    const char *after = lastc + 8;
                    size_t alen = (size_t)(content + clen - after);
                    /* content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
                    const char *r0 = content;
                    size_t r0len = (size_t)(close - content);
                    rstrip_nl(&r0, &r0len);
                    const char *open = find_last(r0, r0len, "<think>");
                    if (open) {
                        r0len = (size_t)(r0 + r0len - (open + 7));
                        r0 = open + 7;
                    }
                    lstrip_nl(&r0, &r0len);
                    reason = r0;
                    rlen = r0len;
                    lstrip_nl(&after, &alen);
                    content = after;
                    clen = alen;
                }
            }
            SHARC_TRY(emit_str(t, "<|im_start|>assistant\n", SHARC_SPAN_PROMPT, k));
            if (i > last_query && (i == n - 1 || rlen > 0)) {
                const char *r = reason, *c = content;
                size_t rl = rlen, cl = clen;
                lstrip_nl(&r, &rl); /* reasoning_content.strip('\n') */
                rstrip_nl(&r, &rl);
                lstrip_nl(&c, &cl);
                SHARC_TRY(emit_str(t, "<think>\n", SHARC_SPAN_RESPONSE, k));
                SHARC_TRY(emit(t, r, rl, SHARC_SPAN_RESPONSE, k));
                SHARC_TRY(emit_str(t, "\n</think>\n\n", SHARC_SPAN_RESPONSE, k));
                SHARC_TRY(emit(t, c, cl, SHARC_SPAN_RESPONSE, k));
            } else {
                SHARC_TRY(emit(t, content, clen, SHARC_SPAN_RESPONSE, k));
            }
            SHARC_TRY(emit_str(t, "<|im_end|>\n", SHARC_SPAN_RESPONSE, k));
        }
    }
    if (o->add_generation_prompt) {
        SHARC_TRY(emit_str(t, "<|im_start|>assistant\n", SHARC_SPAN_GENERATION, -1));
        if (o->disable_thinking) SHARC_TRY(emit_str(t, "<think>\n\n</think>\n\n", SHARC_SPAN_GENERATION, -1));
    }
    return SHARC_OK;
}

static sharc_status render_llama3(const sharc_chat_msg *m, size_t n, const sharc_chat_options *o, sharc_chat_text *t) {
    for (size_t i = 0; i < n; i++) {
        const int k = (int)i;
        if (i == 0 && o->bos) SHARC_TRY(emit_str(t, o->bos, SHARC_SPAN_PROMPT, k));
        SHARC_TRY(emit_str(t, "<|start_header_id|>", SHARC_SPAN_PROMPT, k));
        SHARC_TRY(emit_str(t, role_name(m[i].role), SHARC_SPAN_PROMPT, k));
        SHARC_TRY(emit_str(t, "<|end_header_id|>\n\n", SHARC_SPAN_PROMPT, k));
        const char *c = m[i].content;
        size_t cl = m[i].len;
        py_strip(&c, &cl);
        sharc_span_kind body = m[i].role == SHARC_ROLE_ASSISTANT ? SHARC_SPAN_RESPONSE : SHARC_SPAN_PROMPT;
        SHARC_TRY(emit(t, c, cl, body, k));
        SHARC_TRY(emit_str(t, "<|eot_id|>", body, k));
    }
    /* this template always ends with the assistant header, whatever add_generation_prompt says */
    return emit_str(t, "<|start_header_id|>assistant<|end_header_id|>\n\n", SHARC_SPAN_GENERATION, -1);
}

sharc_status sharc_chat_render(sharc_chat_format f, const sharc_chat_msg *msgs, size_t n, const sharc_chat_options *o,
                               sharc_chat_text *out) {
    if (n == 0) return sharc_error(SHARC_ERR_INVALID, "chat: a conversation needs at least one message");
    static const sharc_chat_options none = {0};
    if (!o) o = &none;
    SHARC_TRY(emit(out, "", 0, SHARC_SPAN_PROMPT, 0)); /* allocates: out->text exists even if nothing is added */
    switch (f) {
    case SHARC_CHAT_CHATML: return render_chatml(msgs, n, o, out);
    case SHARC_CHAT_QWEN3: return render_qwen3(msgs, n, o, out);
    case SHARC_CHAT_LLAMA3: return render_llama3(msgs, n, o, out);
    default: return sharc_error(SHARC_ERR_INVALID, "chat: no format chosen (data.chat_template)");
    }
}
