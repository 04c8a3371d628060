/* sft.c: sharc_sft_*, SFT samples from JSONL (sharc/sft.h): records to
 * prompt/response text or chat renderings, tokens, and the loss mask of
 * note [sft-mask] in either mode; the SFT token file writer. Records are
 * independent, so they are processed in parallel (one encoder and JSON
 * parser per thread) and gathered in file order. */
#include "sharc/sft.h"

#include "sharc/fileio.h"

#include <json-c/json.h>
#include <limits.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ small buffers */

typedef struct {
    char *s;
    size_t n, cap;
} str_t;

static sharc_status str_add(str_t *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) return sharc_error(SHARC_ERR_NOMEM, "sft: out of memory");
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
    return SHARC_OK;
}

typedef struct {
    size_t start, end;
    bool trained;
} seg_t;

typedef struct {
    seg_t *v;
    size_t n, cap;
} segs_t;

static sharc_status seg_add(segs_t *s, size_t start, size_t end, bool trained) {
    if (end <= start) return SHARC_OK;
    if (s->n && s->v[s->n - 1].trained == trained && s->v[s->n - 1].end == start) {
        s->v[s->n - 1].end = end;
        return SHARC_OK;
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        seg_t *p = realloc(s->v, cap * sizeof *p);
        if (!p) return sharc_error(SHARC_ERR_NOMEM, "sft: out of memory");
        s->v = p;
        s->cap = cap;
    }
    s->v[s->n++] = (seg_t){start, end, trained};
    return SHARC_OK;
}

/* ------------------------------------------------------------ options */

sharc_status sharc_sft_format_template(const char *tmpl, const char *input, size_t len, char **out, size_t *outlen) {
    str_t b = {0};
    int holes = 0;
    sharc_status st = SHARC_OK;
    for (const char *p = tmpl; *p && st == SHARC_OK; p++) {
        if ((p[0] == '{' && p[1] == '{') || (p[0] == '}' && p[1] == '}')) {
            st = str_add(&b, p, 1);
            p++;
        } else if (p[0] == '{' && p[1] == '}') {
            holes++;
            st = str_add(&b, input, len);
            p++;
        } else if (*p == '{' || *p == '}') {
            st = sharc_error(SHARC_ERR_INVALID,
                             "data.input_template '%s': a lone '%c' (Python's str.format: {} is the "
                             "input, {{ and }} are braces)",
                             tmpl, *p);
        } else {
            st = str_add(&b, p, 1);
        }
    }
    if (st == SHARC_OK && holes != 1)
        st = sharc_error(SHARC_ERR_INVALID, "data.input_template '%s': has %d {}, expected exactly one for the input",
                         tmpl, holes);
    if (st == SHARC_OK && !b.s) st = str_add(&b, "", 0);
    if (st != SHARC_OK) {
        free(b.s);
        return st;
    }
    *out = b.s;
    *outlen = b.n;
    return SHARC_OK;
}

sharc_status sharc_sft_check(const sharc_tokenizer *t, const sharc_sft_options *o, sharc_chat_format *format) {
    *format = o->chat_format;
    if (!o->input_key || !o->input_key[0])
        return sharc_error(SHARC_ERR_INVALID, "data.input_key: empty; name the JSON key that holds the prompt");
    if (!o->apply_chat_template && (!o->output_key || !o->output_key[0]))
        return sharc_error(SHARC_ERR_INVALID,
                           "data.output_key is empty and data.apply_chat_template is false: an SFT sample needs a "
                           "response (set data.output_key, or data.apply_chat_template for records of messages)");
    if (o->multiturn && !o->apply_chat_template)
        return sharc_error(SHARC_ERR_INVALID, "data.multiturn needs data.apply_chat_template: true");
    if (o->max_len < 4)
        return sharc_error(SHARC_ERR_INVALID, "data.max_len: %d, expected at least 4 tokens", o->max_len);
    if (!sharc_tokenizer_eos_text(t))
        return sharc_error(SHARC_ERR_INVALID,
                           "tokenizer '%s' has no eos_token (tokenizer_config.json): SFT ends every "
                           "response with it",
                           sharc_tokenizer_path(t));
    if (!o->apply_chat_template && o->input_template && o->input_template[0]) {
        char *x;
        size_t n;
        SHARC_TRY(sharc_sft_format_template(o->input_template, "", 0, &x, &n));
        free(x);
    }
    if (o->apply_chat_template && o->chat_format == SHARC_CHAT_AUTO) {
        char where[1200];
        snprintf(where, sizeof where, "data.apply_chat_template: the tokenizer_config.json beside '%s'",
                 sharc_tokenizer_path(t));
        SHARC_TRY(sharc_chat_identify(sharc_tokenizer_chat_template(t), where, format));
    }
    if (o->apply_chat_template && *format == SHARC_CHAT_LLAMA3 && !sharc_tokenizer_bos_text(t))
        return sharc_error(SHARC_ERR_INVALID,
                           "data.chat_template llama3 needs a bos_token in the tokenizer's "
                           "tokenizer_config.json ('%s')",
                           sharc_tokenizer_path(t));
    return SHARC_OK;
}

/* ------------------------------------------------------------ one record */

typedef struct {
    const sharc_tokenizer *t;
    const sharc_sft_options *o;
    sharc_chat_format format;
    const char *name;
    const char *eos;
    size_t eos_len;
    int32_t eos_id;
} ctx_t;

typedef struct {
    sharc_encoder *enc;
    struct json_tokener *jt;
    sharc_chat_text chat;
    sharc_ids ids, ids2;
    str_t a, b, text;
    segs_t segs;
    sharc_chat_msg *msgs;
    size_t msg_cap;
} worker_t;

typedef struct {
    uint32_t *tokens;
    size_t n;
    int dropped; /* 0, 1 empty, 2 long */
    bool truncated;
    sharc_status st;
    char msg[640];
} result_t;

#define DROP_EMPTY 1
#define DROP_LONG  2

static sharc_status rec_error(const ctx_t *c, size_t line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static sharc_status rec_error(const ctx_t *c, size_t line, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sharc_error(SHARC_ERR_FORMAT, "%s line %zu: %s", c->name, line, msg);
}

static json_object *field(json_object *o, const char *key) {
    json_object *v = NULL;
    return json_object_object_get_ex(o, key, &v) ? v : NULL;
}

static sharc_status need_string(const ctx_t *c, size_t line, json_object *rec, const char *key, const char **s,
                                size_t *n) {
    json_object *v = field(rec, key);
    if (!v) return rec_error(c, line, "no key '%s' (data.input_key / data.output_key name the record's keys)", key);
    if (!json_object_is_type(v, json_type_string))
        return rec_error(c, line, "'%s' is %s, expected a string", key, json_type_to_name(json_object_get_type(v)));
    *s = json_object_get_string(v);
    *n = (size_t)json_object_get_string_len(v);
    return SHARC_OK;
}

static sharc_status add_msg(worker_t *w, sharc_chat_msg m, size_t *n) {
    if (*n == w->msg_cap) {
        size_t cap = w->msg_cap ? 2 * w->msg_cap : 16;
        sharc_chat_msg *p = realloc(w->msgs, cap * sizeof *p);
        if (!p) return sharc_error(SHARC_ERR_NOMEM, "sft: out of memory");
        w->msgs = p;
        w->msg_cap = cap;
    }
    w->msgs[(*n)++] = m;
    return SHARC_OK;
}

/* One message object, or a list of them, appended to w->msgs. */
static sharc_status read_messages(const ctx_t *c, size_t line, json_object *v, const char *key, worker_t *w,
                                  size_t *n) {
    bool list = json_object_is_type(v, json_type_array);
    size_t k = list ? json_object_array_length(v) : 1;
    for (size_t i = 0; i < k; i++) {
        json_object *m = list ? json_object_array_get_idx(v, i) : v, *role = field(m, "role"),
                    *content = field(m, "content");
        char where[96];
        snprintf(where, sizeof where, list ? "%s[%zu]" : "%s", key, i);
        if (!json_object_is_type(m, json_type_object))
            return rec_error(c, line, "%s: expected a message object", where);
        if (!role || !json_object_is_type(role, json_type_string))
            return rec_error(c, line, "%s.role: expected a string", where);
        const char *r = json_object_get_string(role);
        sharc_chat_msg msg = {0};
        if (!strcmp(r, "system")) msg.role = SHARC_ROLE_SYSTEM;
        else if (!strcmp(r, "user")) msg.role = SHARC_ROLE_USER;
        else if (!strcmp(r, "assistant")) msg.role = SHARC_ROLE_ASSISTANT;
        else return rec_error(c, line, "%s.role '%s': sharc's chat formats take system, user and assistant", where, r);
        if (!content || !json_object_is_type(content, json_type_string))
            return rec_error(c, line, "%s.content: expected a string", where);
        msg.content = json_object_get_string(content);
        msg.len = (size_t)json_object_get_string_len(content);
        json_object *rc = field(m, "reasoning_content"), *tc = field(m, "tool_calls");
        if (rc && !json_object_is_type(rc, json_type_null)) {
            if (!json_object_is_type(rc, json_type_string))
                return rec_error(c, line, "%s.reasoning_content: expected a string", where);
            msg.reasoning = json_object_get_string(rc);
            msg.reasoning_len = (size_t)json_object_get_string_len(rc);
        }
        if (tc && !json_object_is_type(tc, json_type_null) &&
            !(json_object_is_type(tc, json_type_array) && json_object_array_length(tc) == 0))
            return rec_error(c, line, "%s.tool_calls: not supported (sharc's chat formats render text only)", where);
        SHARC_TRY(add_msg(w, msg, n));
    }
    return SHARC_OK;
}

static sharc_status render(const ctx_t *c, worker_t *w, size_t n, bool agp, str_t *out) {
    sharc_chat_options opt = {.add_generation_prompt = agp, .bos = sharc_tokenizer_bos_text(c->t)};
    sharc_chat_text_clear(&w->chat);
    if (n == 0) return sharc_error(SHARC_ERR_FORMAT, "empty");
    SHARC_TRY(sharc_chat_render(c->format, w->msgs, n, &opt, &w->chat));
    out->n = 0;
    return str_add(out, w->chat.text, w->chat.len);
}

/* Python's full[len(prompt):]: skip as many code points of full as prompt has. */
static size_t cp_count(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

static size_t cp_skip(const char *s, size_t n, size_t cps) {
    size_t i = 0;
    while (i < n && cps > 0) {
        i++;
        while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80) i++;
        cps--;
    }
    return i;
}

static bool ends_with(const str_t *b, const char *s, size_t n) { return b->n >= n && !memcmp(b->s + b->n - n, s, n); }

static sharc_status encode(worker_t *w, const char *s, size_t n, sharc_ids *ids) {
    ids->n = 0;
    return sharc_encoder_encode(w->enc, s, n, ids);
}

static sharc_status finish(const ctx_t *c, worker_t *w, const uint8_t *trained, result_t *r) {
    const sharc_ids *ids = &w->ids;
    size_t L = ids->n;
    const size_t max_len = (size_t)c->o->max_len;
    if (L > max_len) {
        L = max_len;
        r->truncated = true;
    }
    r->tokens = malloc(L * sizeof(uint32_t));
    if (!r->tokens) return sharc_error(SHARC_ERR_NOMEM, "sft: out of memory");
    for (size_t j = 0; j < L; j++) r->tokens[j] = (uint32_t)ids->ids[j] | (j > 0 && trained[j] ? SHARC_SFT_TRAINED : 0);
    /* the last token is EOS whether or not the sample was cut (OpenRLHF's rule) */
    r->tokens[L - 1] = (uint32_t)c->eos_id | (r->tokens[L - 1] & SHARC_SFT_TRAINED);
    r->n = L;
    return SHARC_OK;
}

/* mode openrlhf: OpenRLHF's SFTDataset (note [sft-mask]); P, R in w->a, w->b */
static sharc_status sample_openrlhf(const ctx_t *c, worker_t *w, size_t nmsg, result_t *r) {
    const size_t max_len = (size_t)c->o->max_len;
    if (w->a.n == 0 || w->b.n == 0) {
        r->dropped = DROP_EMPTY;
        return SHARC_OK;
    }
    SHARC_TRY(encode(w, w->a.s, w->a.n, &w->ids2));
    size_t plen = w->ids2.n < max_len ? w->ids2.n : max_len;
    if (plen + 2 >= max_len) {
        r->dropped = DROP_LONG;
        return SHARC_OK;
    }
    w->text.n = 0;
    SHARC_TRY(str_add(&w->text, w->a.s, w->a.n));
    SHARC_TRY(str_add(&w->text, w->b.s, w->b.n));
    while (w->text.n && w->text.s[w->text.n - 1] == '\n') w->text.n--;
    if (!ends_with(&w->text, c->eos, c->eos_len)) {
        SHARC_TRY(str_add(&w->text, " ", 1));
        SHARC_TRY(str_add(&w->text, c->eos, c->eos_len));
    }
    SHARC_TRY(encode(w, w->text.s, w->text.n, &w->ids));
    size_t L = w->ids.n < max_len ? w->ids.n : max_len;
    uint8_t *trained = calloc(L + 1, 1);
    if (!trained) return sharc_error(SHARC_ERR_NOMEM, "sft: out of memory");
    sharc_status st = SHARC_OK;
    if (!c->o->multiturn) {
        /* loss_mask[prompt_len - 1 : -1]: targets prompt_len .. L-1 */
        for (size_t j = plen; j < L; j++) trained[j] = 1;
    } else {
        for (size_t idx = 0; idx < nmsg && st == SHARC_OK; idx++) {
            if (w->msgs[idx].role != SHARC_ROLE_ASSISTANT) continue;
            if (idx == 0) {
                st = sharc_error(SHARC_ERR_FORMAT, "%s: the conversation starts with an assistant message", c->name);
                break;
            }
            /* prompt_i = template(msgs[:idx], generation prompt); response_i = template(msgs[:idx+1])[len(prompt_i):] */
            str_t pi = {0}, fi = {0};
            st = render(c, w, idx, true, &pi);
            if (st == SHARC_OK) st = render(c, w, idx + 1, false, &fi);
            size_t cut = st == SHARC_OK ? cp_skip(fi.s, fi.n, cp_count(pi.s, pi.n)) : 0;
            size_t s = 0, e = 0;
            if (st == SHARC_OK) st = encode(w, pi.s, pi.n, &w->ids2);
            if (st == SHARC_OK) {
                s = w->ids2.n < max_len ? w->ids2.n : max_len;
                st = encode(w, fi.s + cut, fi.n - cut, &w->ids2);
            }
            if (st == SHARC_OK) {
                size_t rn = w->ids2.n < max_len ? w->ids2.n : max_len;
                e = s + rn; /* exclusive: loss_mask[start-1 : end] trains targets start .. end (inclusive) */
                for (size_t j = s; j < e && j < L; j++) trained[j] = 1;
            }
            free(pi.s);
            free(fi.s);
        }
    }
    if (st == SHARC_OK) st = finish(c, w, trained, r);
    free(trained);
    return st;
}

/* mode ranges (the default): segments in w->text / w->segs */
static sharc_status sample_ranges(const ctx_t *c, worker_t *w, result_t *r) {
    const size_t max_len = (size_t)c->o->max_len;
    str_t *text = &w->text;
    segs_t *sg = &w->segs;
    /* OpenRLHF's filter: an empty prompt (the response starts the text) or no response */
    size_t first = SIZE_MAX;
    for (size_t i = 0; i < sg->n && first == SIZE_MAX; i++)
        if (sg->v[i].trained) first = sg->v[i].start;
    if (first == 0 || first == SIZE_MAX) {
        r->dropped = DROP_EMPTY;
        return SHARC_OK;
    }
    /* trailing newlines go; then EOS (trained) unless the text already ends with it */
    while (text->n && text->s[text->n - 1] == '\n') text->n--;
    while (sg->n && sg->v[sg->n - 1].start >= text->n) sg->n--;
    if (sg->n && sg->v[sg->n - 1].end > text->n) sg->v[sg->n - 1].end = text->n;
    if (!ends_with(text, c->eos, c->eos_len)) {
        size_t at = text->n;
        SHARC_TRY(str_add(text, c->eos, c->eos_len));
        SHARC_TRY(seg_add(sg, at, text->n, true));
    }
    SHARC_TRY(encode(w, text->s, text->n, &w->ids));
    /* segment bounds in the normalised text the tokens decode to */
    size_t total;
    SHARC_TRY(sharc_encoder_normalized_length(w->enc, text->s, text->n, &total));
    size_t nb = 2 * sg->n;
    size_t *bound = malloc(nb * sizeof(size_t) + 1);
    uint8_t *trained = calloc(w->ids.n + 1, 1);
    sharc_status st = bound && trained ? SHARC_OK : sharc_error(SHARC_ERR_NOMEM, "sft: out of memory");
    for (size_t i = 0; i < sg->n && st == SHARC_OK; i++) {
        if (total == text->n) {
            bound[2 * i] = sg->v[i].start;
            bound[2 * i + 1] = sg->v[i].end;
        } else {
            st = sharc_encoder_normalized_length(w->enc, text->s, sg->v[i].start, &bound[2 * i]);
            if (st == SHARC_OK) st = sharc_encoder_normalized_length(w->enc, text->s, sg->v[i].end, &bound[2 * i + 1]);
        }
    }
    /* token j covers decoded bytes [at, at + len); trained if it overlaps a trained segment */
    size_t at = 0, k = 0, first_tok = SIZE_MAX;
    for (size_t j = 0; j < w->ids.n && st == SHARC_OK; j++) {
        size_t len;
        sharc_tokenizer_token_bytes(c->t, w->ids.ids[j], &len);
        size_t lo = at, hi = at + len;
        while (k < sg->n && bound[2 * k + 1] <= lo) k++;
        for (size_t q = k; q < sg->n && bound[2 * q] < hi; q++)
            if (sg->v[q].trained && bound[2 * q + 1] > lo) trained[j] = 1;
        if (trained[j] && first_tok == SIZE_MAX) first_tok = j;
        at = hi;
    }
    if (st == SHARC_OK && at != total)
        st = sharc_error(SHARC_ERR_INTERNAL, "%s: the tokens decode to %zu bytes, the normalised text has %zu", c->name,
                         at, total);
    if (st == SHARC_OK) {
        if (first_tok == SIZE_MAX || first_tok == 0) r->dropped = DROP_EMPTY;
        else if (first_tok + 2 >= max_len) r->dropped = DROP_LONG;
        else st = finish(c, w, trained, r);
    }
    free(bound);
    free(trained);
    return st;
}

/* A \uD800-\uDFFF escape not in a high-low pair: json-c would put U+FFFD in
 * its place, where Python's json keeps a lone surrogate that no tokenizer
 * takes; refused. (Backslashes occur only inside strings in valid JSON.) */
static bool lone_surrogate(const char *s, size_t n) {
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] != '\\') continue;
        if (s[i + 1] != 'u' || i + 6 > n) {
            i++;
            continue;
        }
        unsigned v = (unsigned)strtoul((char[5]){s[i + 2], s[i + 3], s[i + 4], s[i + 5], 0}, NULL, 16);
        if (v >= 0xDC00 && v <= 0xDFFF) return true;
        if (v >= 0xD800 && v <= 0xDBFF) {
            if (i + 12 > n || s[i + 6] != '\\' || s[i + 7] != 'u') return true;
            unsigned lo = (unsigned)strtoul((char[5]){s[i + 8], s[i + 9], s[i + 10], s[i + 11], 0}, NULL, 16);
            if (lo < 0xDC00 || lo > 0xDFFF) return true;
            i += 6;
        }
        i += 5;
    }
    return false;
}

static sharc_status one_record(const ctx_t *c, worker_t *w, const char *line, size_t len, size_t lineno, result_t *r) {
    const sharc_sft_options *o = c->o;
    while (len > 0 && (line[len - 1] == ' ' || line[len - 1] == '\t' || line[len - 1] == '\r')) len--;
    json_tokener_reset(w->jt);
    json_object *rec = json_tokener_parse_ex(w->jt, line, (int)len);
    enum json_tokener_error jerr = json_tokener_get_error(w->jt);
    if (!rec || jerr != json_tokener_success || json_tokener_get_parse_end(w->jt) != len) {
        json_object_put(rec);
        return rec_error(c, lineno, "not one JSON object (%s)",
                         jerr == json_tokener_continue  ? "it ends too early"
                         : jerr != json_tokener_success ? json_tokener_error_desc(jerr)
                                                        : "bytes after the value");
    }
    sharc_status st = SHARC_OK;
    if (!json_object_is_type(rec, json_type_object)) st = rec_error(c, lineno, "expected a JSON object");
    else if (lone_surrogate(line, len)) st = rec_error(c, lineno, "a \\u escape of a lone UTF-16 surrogate (not text)");
    w->a.n = w->b.n = w->text.n = 0;
    w->segs.n = 0;
    size_t nmsg = 0, first_resp = 0;
    if (st == SHARC_OK && !o->apply_chat_template) {
        const char *in, *out;
        size_t inl, outl;
        st = need_string(c, lineno, rec, o->input_key, &in, &inl);
        if (st == SHARC_OK) st = need_string(c, lineno, rec, o->output_key, &out, &outl);
        if (st == SHARC_OK && o->input_template && o->input_template[0]) {
            char *p;
            size_t pl;
            st = sharc_sft_format_template(o->input_template, in, inl, &p, &pl);
            if (st == SHARC_OK) st = str_add(&w->a, p, pl);
            free(p);
        } else if (st == SHARC_OK) {
            st = str_add(&w->a, in, inl);
        }
        if (st == SHARC_OK) st = str_add(&w->b, out, outl);
        if (st == SHARC_OK && o->mask == SHARC_SFT_MASK_RANGES) {
            st = str_add(&w->text, w->a.s, w->a.n);
            if (st == SHARC_OK) st = seg_add(&w->segs, 0, w->a.n, false);
            if (st == SHARC_OK) st = str_add(&w->text, w->b.s, w->b.n);
            if (st == SHARC_OK) st = seg_add(&w->segs, w->a.n, w->text.n, true);
        }
    } else if (st == SHARC_OK) {
        json_object *in = field(rec, o->input_key);
        if (!in) st = rec_error(c, lineno, "no key '%s' (data.input_key)", o->input_key);
        bool has_out = o->output_key && o->output_key[0];
        json_object *out = has_out ? field(rec, o->output_key) : NULL;
        if (st == SHARC_OK && has_out && !out)
            st = rec_error(c, lineno, "no key '%s' (data.output_key)", o->output_key);
        if (st == SHARC_OK && has_out && json_object_is_type(in, json_type_string) &&
            json_object_is_type(out, json_type_string)) {
            /* strings: one user turn and one assistant turn */
            st = add_msg(w,
                         (sharc_chat_msg){SHARC_ROLE_USER, json_object_get_string(in),
                                          (size_t)json_object_get_string_len(in), NULL, 0},
                         &nmsg);
            first_resp = nmsg;
            if (st == SHARC_OK)
                st = add_msg(w,
                             (sharc_chat_msg){SHARC_ROLE_ASSISTANT, json_object_get_string(out),
                                              (size_t)json_object_get_string_len(out), NULL, 0},
                             &nmsg);
        } else if (st == SHARC_OK) {
            if (!json_object_is_type(in, json_type_array))
                st = rec_error(c, lineno, "'%s' is %s, expected a list of messages%s", o->input_key,
                               json_type_to_name(json_object_get_type(in)),
                               has_out ? " (or input and output strings)" : "");
            if (st == SHARC_OK) st = read_messages(c, lineno, in, o->input_key, w, &nmsg);
            first_resp = nmsg ? nmsg - 1 : 0;
            if (st == SHARC_OK && has_out) {
                if (!json_object_is_type(out, json_type_array) && !json_object_is_type(out, json_type_object))
                    st = rec_error(c, lineno, "'%s' is %s, expected messages", o->output_key,
                                   json_type_to_name(json_object_get_type(out)));
                first_resp = nmsg;
                if (st == SHARC_OK) st = read_messages(c, lineno, out, o->output_key, w, &nmsg);
            }
        }
        if (st == SHARC_OK && nmsg < 2)
            st = rec_error(c, lineno, "a conversation needs a prompt and a response (%zu message%s)", nmsg,
                           nmsg == 1 ? "" : "s");
        if (st == SHARC_OK && first_resp == 0) st = rec_error(c, lineno, "the response has no prompt before it");
        if (st == SHARC_OK && o->mask == SHARC_SFT_MASK_OPENRLHF) {
            /* prompt = template(prompt messages, generation prompt); response = template(all)[len(prompt):] */
            st = render(c, w, first_resp, true, &w->a);
            if (st == SHARC_OK) st = render(c, w, nmsg, false, &w->text);
            if (st == SHARC_OK) {
                size_t cut = cp_skip(w->text.s, w->text.n, cp_count(w->a.s, w->a.n));
                st = str_add(&w->b, w->text.s + cut, w->text.n - cut);
            }
        } else if (st == SHARC_OK) {
            sharc_chat_options opt = {.bos = sharc_tokenizer_bos_text(c->t)};
            sharc_chat_text_clear(&w->chat);
            st = sharc_chat_render(c->format, w->msgs, nmsg, &opt, &w->chat);
            for (size_t i = 0; i < w->chat.nspans && st == SHARC_OK; i++) {
                const sharc_chat_span *s = &w->chat.spans[i];
                if (s->kind == SHARC_SPAN_GENERATION) continue; /* not part of a training sample */
                bool trained = s->kind == SHARC_SPAN_RESPONSE && (o->multiturn || (size_t)s->message >= first_resp);
                size_t at = w->text.n;
                st = str_add(&w->text, w->chat.text + s->start, s->end - s->start);
                if (st == SHARC_OK) st = seg_add(&w->segs, at, w->text.n, trained);
            }
        }
    }
    if (st == SHARC_OK)
        st = o->mask == SHARC_SFT_MASK_OPENRLHF ? sample_openrlhf(c, w, nmsg, r) : sample_ranges(c, w, r);
    json_object_put(rec);
    return st;
}

/* ------------------------------------------------------------ the file */

typedef struct {
    const char *s;
    size_t n, line;
} line_t;

static void worker_free(worker_t *w) {
    sharc_encoder_free(w->enc);
    if (w->jt) json_tokener_free(w->jt);
    sharc_chat_text_free(&w->chat);
    sharc_ids_free(&w->ids);
    sharc_ids_free(&w->ids2);
    free(w->a.s);
    free(w->b.s);
    free(w->text.s);
    free(w->segs.v);
    free(w->msgs);
}

void sharc_sft_free(sharc_sft_data *d) {
    free(d->tokens);
    free(d->offsets);
    memset(d, 0, sizeof *d);
}

sharc_status sharc_sft_build(const sharc_tokenizer *t, const sharc_sft_options *o, const char *jsonl, size_t len,
                             const char *name, int threads, void (*progress)(size_t done, size_t total, void *ctx),
                             void *ctx, sharc_sft_data *out) {
    memset(out, 0, sizeof *out);
    ctx_t c = {.t = t, .o = o, .name = name};
    SHARC_TRY(sharc_sft_check(t, o, &c.format));
    c.eos = sharc_tokenizer_eos_text(t);
    c.eos_len = strlen(c.eos);
    c.eos_id = sharc_tokenizer_eos(t);
    /* the records: non-blank lines */
    size_t nlines = 0, cap = 1024;
    line_t *lines = malloc(cap * sizeof *lines);
    if (!lines) return sharc_error(SHARC_ERR_NOMEM, "sft: out of memory");
    size_t lineno = 0;
    for (size_t p = 0; p < len;) {
        const char *nl = memchr(jsonl + p, '\n', len - p);
        size_t e = nl ? (size_t)(nl - jsonl) : len;
        lineno++;
        bool blank = true;
        for (size_t i = p; i < e && blank; i++) blank = jsonl[i] == ' ' || jsonl[i] == '\t' || jsonl[i] == '\r';
        if (!blank) {
            if (nlines == cap) {
                line_t *q = realloc(lines, (cap *= 2) * sizeof *lines);
                if (!q) {
                    free(lines);
                    return sharc_error(SHARC_ERR_NOMEM, "sft: out of memory");
                }
                lines = q;
            }
            if (e - p > INT_MAX) {
                free(lines);
                return sharc_error(SHARC_ERR_FORMAT, "%s line %zu: longer than 2 GB", name, lineno);
            }
            lines[nlines++] = (line_t){jsonl + p, e - p, lineno};
        }
        p = e + 1;
    }
    out->records = nlines;
    if (threads <= 0) threads = omp_get_max_threads();
    const size_t batch = 4096;
    result_t *res = calloc(batch, sizeof *res);
    size_t tok_cap = 0, off_cap = 0;
    sharc_status st = res ? SHARC_OK : sharc_error(SHARC_ERR_NOMEM, "sft: out of memory");
    for (size_t b0 = 0; b0 < nlines && st == SHARC_OK; b0 += batch) {
        const size_t nb = nlines - b0 < batch ? nlines - b0 : batch;
#pragma omp parallel num_threads(threads)
        {
            worker_t w = {0};
            sharc_status wst = sharc_encoder_init(&w.enc, t);
            if (wst == SHARC_OK && !(w.jt = json_tokener_new_ex(64)))
                wst = sharc_error(SHARC_ERR_NOMEM, "sft: out of memory");
            if (w.jt) json_tokener_set_flags(w.jt, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
#pragma omp for schedule(dynamic, 16)
            for (size_t k = 0; k < nb; k++) {
                result_t *r = &res[k];
                memset(r, 0, sizeof *r);
                r->st =
                    wst == SHARC_OK ? one_record(&c, &w, lines[b0 + k].s, lines[b0 + k].n, lines[b0 + k].line, r) : wst;
                if (r->st != SHARC_OK) snprintf(r->msg, sizeof r->msg, "%s", sharc_last_error());
            }
            worker_free(&w);
        }
        for (size_t k = 0; k < nb; k++) {
            result_t *r = &res[k];
            if (st == SHARC_OK && r->st != SHARC_OK) st = sharc_error(r->st, "%s", r->msg);
            if (st == SHARC_OK && r->tokens) {
                if (out->ntokens + r->n > tok_cap) {
                    while (tok_cap < out->ntokens + r->n) tok_cap = tok_cap ? 2 * tok_cap : 1 << 16;
                    uint32_t *p = realloc(out->tokens, tok_cap * sizeof(uint32_t));
                    if (!p) st = sharc_error(SHARC_ERR_NOMEM, "sft: out of memory for %zu tokens", tok_cap);
                    else out->tokens = p;
                }
                if (st == SHARC_OK && out->nsamples + 2 > off_cap) {
                    off_cap = off_cap ? 2 * off_cap : 1024;
                    uint64_t *p = realloc(out->offsets, off_cap * sizeof(uint64_t));
                    if (!p) st = sharc_error(SHARC_ERR_NOMEM, "sft: out of memory");
                    else out->offsets = p;
                }
                if (st == SHARC_OK) {
                    out->offsets[out->nsamples++] = out->ntokens;
                    memcpy(out->tokens + out->ntokens, r->tokens, r->n * sizeof(uint32_t));
                    out->ntokens += r->n;
                    for (size_t j = 0; j < r->n; j++) out->trained += (r->tokens[j] & SHARC_SFT_TRAINED) != 0;
                    if (r->n > out->longest) out->longest = (uint32_t)r->n;
                    out->truncated += r->truncated;
                }
            }
            out->dropped_empty += r->dropped == DROP_EMPTY;
            out->dropped_long += r->dropped == DROP_LONG;
            free(r->tokens);
            r->tokens = NULL;
        }
        if (progress && st == SHARC_OK) progress(b0 + nb, nlines, ctx);
    }
    free(res);
    free(lines);
    if (st == SHARC_OK && out->nsamples == 0)
        st = sharc_error(SHARC_ERR_INVALID,
                         "%s: no SFT samples (%zu records; %zu with an empty prompt or response, %zu with "
                         "a prompt of data.max_len - 2 = %d tokens or more)",
                         name, out->records, out->dropped_empty, out->dropped_long, o->max_len - 2);
    if (st == SHARC_OK) {
        if (!out->offsets) out->offsets = malloc(sizeof(uint64_t));
        out->offsets[out->nsamples] = out->ntokens;
    }
    if (st != SHARC_OK) sharc_sft_free(out);
    return st;
}

/* ------------------------------------------------------------ the token file */

sharc_status sharc_sft_write(const char *path, const sharc_sft_data *d, const sharc_tokenizer *t, int max_len) {
    unsigned char h[128] = {0};
    memcpy(h, "SHARCSFT", 8);
    uint32_t u32[2] = {1, 0};
    memcpy(h + 8, u32, 8);
    uint64_t u64[2] = {d->nsamples, d->ntokens};
    memcpy(h + 16, u64, 16);
    uint32_t v[2] = {(uint32_t)max_len, d->longest};
    memcpy(h + 32, v, 8);
    memcpy(h + 40, sharc_tokenizer_sha256(t), 32);
    uint32_t ids = (uint32_t)sharc_tokenizer_num_ids(t);
    memcpy(h + 72, &ids, 4);
    sharc_afile f;
    SHARC_TRY(sharc_afile_open(&f, path));
    sharc_status st = sharc_afile_write(&f, h, sizeof h);
    if (st == SHARC_OK) st = sharc_afile_write(&f, d->offsets, (d->nsamples + 1) * sizeof(uint64_t));
    if (st == SHARC_OK) st = sharc_afile_write(&f, d->tokens, d->ntokens * sizeof(uint32_t));
    if (st == SHARC_OK) return sharc_afile_commit(&f);
    sharc_afile_abort(&f);
    return st;
}
