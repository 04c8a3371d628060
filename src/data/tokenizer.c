/* tokenizer.c: sharc_tokenizer_*, reading and checking a Hugging Face
 * tokenizer.json (+ tokenizer_config.json), the id tables, decoding, and
 * the helpers encoder.c shares (tokenizer_impl.h). Everything the file says
 * is either honoured or refused with a message naming the field; the list
 * is in docs/ARCHITECTURE.md ("Tokenizers").
 *
 * Note [tokenizer-fingerprint]: a tokenizer is identified by the sha256 of
 * its tokenizer.json bytes (nettle). sharc tokenize writes it into the token
 * files it makes, so training can refuse data made with another tokenizer. */
#include "tokenizer_impl.h"

#include "sharc/fileio.h"

#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <nettle/sha2.h>
#include <oniguruma.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *const sharc_tok_gpt2_regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* Llama-3 (tiktoken's cl100k pattern) and Qwen2/Qwen3 (single digits) */
static const char *const llama3_regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *const qwen_regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* ------------------------------------------------------------ ids */

sharc_status sharc_ids_reserve(sharc_ids *v, size_t n) {
    if (n <= v->cap) return SHARC_OK;
    size_t cap = v->cap ? v->cap : 256;
    while (cap < n) cap *= 2;
    int32_t *p = realloc(v->ids, cap * sizeof(int32_t));
    if (!p) return sharc_error(SHARC_ERR_NOMEM, "tokenizer: out of memory for %zu ids", n);
    v->ids = p;
    v->cap = cap;
    return SHARC_OK;
}

sharc_status sharc_ids_push(sharc_ids *v, int32_t id) {
    if (v->n == v->cap) SHARC_TRY(sharc_ids_reserve(v, v->n + 1));
    v->ids[v->n++] = id;
    return SHARC_OK;
}

void sharc_ids_free(sharc_ids *v) {
    free(v->ids);
    memset(v, 0, sizeof *v);
}

/* ------------------------------------------------------------ byte alphabet
 * GPT-2's bytes_to_unicode: the printable bytes '!'..'~', 0xA1..0xAC and
 * 0xAE..0xFF stand for themselves; the other 68 bytes, in increasing order,
 * become U+0100 .. U+0143. */

static bool printable_byte(unsigned b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; }

uint32_t sharc_tok_byte_to_cp(unsigned b) {
    if (printable_byte(b)) return b;
    if (b <= 32) return 256 + b;
    if (b >= 127 && b <= 160) return 256 + 33 + (b - 127);
    return 256 + 67; /* 173 */
}

int sharc_tok_cp_to_byte(uint32_t cp) {
    if (cp < 256) return printable_byte(cp) ? (int)cp : -1;
    if (cp > 256 + 67) return -1;
    uint32_t n = cp - 256;
    if (n <= 32) return (int)n;
    if (n <= 66) return (int)(127 + n - 33);
    return 173;
}

/* ------------------------------------------------------------ UTF-8 */

size_t sharc_tok_utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        uint32_t cp, min;
        if (c >= 0xC2 && c <= 0xDF) k = 1, cp = c & 0x1F, min = 0x80;
        else if (c >= 0xE0 && c <= 0xEF) k = 2, cp = c & 0x0F, min = 0x800;
        else if (c >= 0xF0 && c <= 0xF4) k = 3, cp = c & 0x07, min = 0x10000;
        else return i;
        if (i + k >= n) return i;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += k + 1;
    }
    return n;
}

/* One code point of valid UTF-8 at s (n > 0): its value, *len bytes. */
static uint32_t utf8_next(const unsigned char *s, size_t n, size_t *len) {
    unsigned c = s[0];
    if (c < 0x80 || n < 2) {
        *len = 1;
        return c;
    }
    if (c < 0xE0) {
        *len = 2;
        return ((c & 0x1Fu) << 6) | (s[1] & 0x3Fu);
    }
    if (c < 0xF0 || n < 4) {
        *len = 3;
        return ((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
    }
    *len = 4;
    return ((c & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
}

/* ------------------------------------------------------------ hash tables */

uint32_t sharc_tok_hash(const void *p, size_t n) {
    /* FNV-1a, 64-bit, folded */
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return (uint32_t)(h ^ (h >> 32));
}

static size_t pow2_above(size_t n) {
    size_t c = 16;
    while (c < 2 * n) c *= 2;
    return c;
}

static sharc_status strmap_init(tok_strmap *m, size_t entries) {
    m->cap = pow2_above(entries);
    m->slots = calloc(m->cap, sizeof(uint64_t));
    return m->slots ? SHARC_OK : sharc_error(SHARC_ERR_NOMEM, "tokenizer: out of memory");
}

static void strmap_put(tok_strmap *m, uint32_t h, int32_t id) {
    size_t i = h & (m->cap - 1);
    while (m->slots[i]) i = (i + 1) & (m->cap - 1);
    m->slots[i] = ((uint64_t)h << 32) | (uint32_t)(id + 1);
}

int32_t sharc_tok_strmap_get(const tok_strmap *m, const sharc_tokenizer *t, const char *s, size_t n) {
    if (!m->slots) return -1;
    uint32_t h = sharc_tok_hash(s, n);
    for (size_t i = h & (m->cap - 1); m->slots[i]; i = (i + 1) & (m->cap - 1)) {
        uint64_t v = m->slots[i];
        if ((uint32_t)(v >> 32) != h) continue;
        int32_t id = (int32_t)(uint32_t)v - 1;
        if (t->tok_len[id] == n && memcmp(t->bytes + t->tok_off[id], s, n) == 0) return id;
    }
    return -1;
}

static uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)(a + 1) << 32) | (uint32_t)b; }

static size_t pair_slot(uint64_t key, size_t cap) { return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & (cap - 1); }

const tok_pair *sharc_tok_pair_get(const tok_pairmap *m, int32_t a, int32_t b) {
    if (!m->slots) return NULL;
    uint64_t key = pair_key(a, b);
    for (size_t i = pair_slot(key, m->cap); m->slots[i].key; i = (i + 1) & (m->cap - 1))
        if (m->slots[i].key == key) return &m->slots[i];
    return NULL;
}

/* Insert or overwrite: a pair listed twice keeps its last rank, as the
 * Hugging Face loader's map does. */
static void pair_put(tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t id) {
    uint64_t key = pair_key(a, b);
    size_t i = pair_slot(key, m->cap);
    while (m->slots[i].key && m->slots[i].key != key) i = (i + 1) & (m->cap - 1);
    m->slots[i] = (tok_pair){key, rank, id};
}

/* ------------------------------------------------------------ errors */

static sharc_status bad(const sharc_tokenizer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static sharc_status bad(const sharc_tokenizer *t, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sharc_error(SHARC_ERR_FORMAT, "tokenizer '%s': %s", t->path, msg);
}

/* A short printable rendering of len bytes of s for messages. */
static const char *shown_n(const char *s, size_t len, char *buf, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < len && k + 5 < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 32 || c == '\'') k += (size_t)snprintf(buf + k, n - k, "\\x%02x", c);
        else buf[k++] = (char)c;
    }
    buf[k] = 0;
    return buf;
}

static const char *shown(const char *s, char *buf, size_t n) { return shown_n(s, strlen(s), buf, n); }

static json_object *member(json_object *o, const char *key) {
    json_object *v = NULL;
    return json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, key, &v) ? v : NULL;
}

static bool is_null(json_object *v) { return v == NULL || json_object_is_type(v, json_type_null); }

/* field absent, null or false */
static sharc_status want_false(const sharc_tokenizer *t, json_object *o, const char *key, const char *where,
                               const char *why) {
    json_object *v = member(o, key);
    if (is_null(v)) return SHARC_OK;
    if (!json_object_is_type(v, json_type_boolean))
        return bad(t, "%s.%s: expected true or false, got %s", where, key, json_object_to_json_string(v));
    if (json_object_get_boolean(v)) return bad(t, "%s.%s = true is not supported (%s)", where, key, why);
    return SHARC_OK;
}

static sharc_status get_bool(const sharc_tokenizer *t, json_object *o, const char *key, const char *where, bool *out) {
    json_object *v = member(o, key);
    if (is_null(v)) return SHARC_OK;
    if (!json_object_is_type(v, json_type_boolean))
        return bad(t, "%s.%s: expected true or false, got %s", where, key, json_object_to_json_string(v));
    *out = json_object_get_boolean(v);
    return SHARC_OK;
}

static const char *type_of(json_object *o) {
    json_object *v = member(o, "type");
    return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

/* ------------------------------------------------------------ building */

typedef struct {
    const char *text; /* the token as written in the file (UTF-8) */
    int32_t id;
} vocab_entry;

/* Byte-level string -> raw bytes into out (capacity >= strlen); false if a
 * character is outside the byte alphabet. */
static bool bytelevel_to_raw(const char *s, size_t n, char *out, size_t *outlen) {
    size_t k = 0, i = 0;
    while (i < n) {
        size_t l;
        uint32_t cp = utf8_next((const unsigned char *)s + i, n - i, &l);
        int b = sharc_tok_cp_to_byte(cp);
        if (b < 0) return false;
        out[k++] = (char)b;
        i += l;
    }
    *outlen = k;
    return true;
}

static sharc_status check_regex(const sharc_tokenizer *t, const char *pattern, const char *where) {
    regex_t *re = NULL;
    OnigErrorInfo einfo;
    OnigEncoding use[1] = {ONIG_ENCODING_UTF8};
    onig_initialize(use, 1);
    int r = onig_new(&re, (const UChar *)pattern, (const UChar *)pattern + strlen(pattern), ONIG_OPTION_NONE,
                     ONIG_ENCODING_UTF8, ONIG_SYNTAX_RUBY, &einfo);
    if (r != ONIG_NORMAL) {
        UChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
        onig_error_code_to_str(msg, r, &einfo);
        char b[200];
        return bad(t, "%s: the regex '%s' does not compile: %s", where, shown(pattern, b, sizeof b), (const char *)msg);
    }
    onig_free(re);
    return SHARC_OK;
}

static sharc_status add_regex(sharc_tokenizer *t, const char *pattern, const char *where) {
    if (t->n_regex == TOK_MAX_REGEX) return bad(t, "%s: more than %d regex splits", where, TOK_MAX_REGEX);
    SHARC_TRY(check_regex(t, pattern, where));
    if (!(t->regex[t->n_regex] = strdup(pattern))) return sharc_error(SHARC_ERR_NOMEM, "tokenizer: out of memory");
    t->n_regex++;
    return SHARC_OK;
}

static sharc_status read_bytelevel(sharc_tokenizer *t, json_object *p, const char *where, bool *use_regex) {
    SHARC_TRY(want_false(t, p, "add_prefix_space", where, "no space is put before the text"));
    *use_regex = true;
    return get_bool(t, p, "use_regex", where, use_regex);
}

static sharc_status read_pre_tokenizer(sharc_tokenizer *t, json_object *root) {
    json_object *p = member(root, "pre_tokenizer");
    const char *ty = type_of(p);
    char where[64];
    bool use_regex = false, seen_bytelevel = false;
    if (ty && !strcmp(ty, "ByteLevel")) {
        SHARC_TRY(read_bytelevel(t, p, "pre_tokenizer", &use_regex));
        seen_bytelevel = true;
    } else if (ty && !strcmp(ty, "Sequence")) {
        json_object *list = member(p, "pretokenizers");
        if (!list || !json_object_is_type(list, json_type_array))
            return bad(t, "pre_tokenizer.pretokenizers: expected a list");
        size_t n = json_object_array_length(list);
        for (size_t i = 0; i < n; i++) {
            json_object *q = json_object_array_get_idx(list, i);
            const char *qt = type_of(q);
            snprintf(where, sizeof where, "pre_tokenizer.pretokenizers[%zu]", i);
            if (seen_bytelevel) return bad(t, "%s: nothing may follow ByteLevel", where);
            if (qt && !strcmp(qt, "ByteLevel")) {
                SHARC_TRY(read_bytelevel(t, q, where, &use_regex));
                seen_bytelevel = true;
            } else if (qt && !strcmp(qt, "Split")) {
                json_object *pat = member(q, "pattern"), *re = member(pat, "Regex"), *beh = member(q, "behavior");
                if (!re || !json_object_is_type(re, json_type_string))
                    return bad(t, "%s.pattern: expected {\"Regex\": \"...\"} (a literal String split is not supported)",
                               where);
                if (!beh || !json_object_is_type(beh, json_type_string) ||
                    strcmp(json_object_get_string(beh), "Isolated"))
                    return bad(t, "%s.behavior: '%s' is not supported; expected Isolated", where,
                               beh ? json_object_get_string(beh) : "(missing)");
                SHARC_TRY(want_false(t, q, "invert", where, "only the matches and the text between them are split"));
                char w2[96];
                snprintf(w2, sizeof w2, "%s.pattern.Regex", where);
                SHARC_TRY(add_regex(t, json_object_get_string(re), w2));
            } else {
                return bad(t, "%s.type: '%s' is not supported; expected Split or ByteLevel", where,
                           qt ? qt : "(missing)");
            }
        }
    } else {
        return bad(t,
                   "pre_tokenizer.type: '%s' is not supported; sharc reads byte-level BPE (ByteLevel, or a Sequence "
                   "of Split and ByteLevel)",
                   ty ? ty : "(missing)");
    }
    if (!seen_bytelevel) return bad(t, "pre_tokenizer: no ByteLevel step; sharc reads byte-level BPE only");
    if (use_regex) SHARC_TRY(add_regex(t, sharc_tok_gpt2_regex, "pre_tokenizer.ByteLevel (use_regex)"));
    /* note [safe-cuts]: the rule is known for these patterns only */
    t->chunk_safe = t->n_regex == 1 && (!strcmp(t->regex[0], sharc_tok_gpt2_regex) ||
                                        !strcmp(t->regex[0], llama3_regex) || !strcmp(t->regex[0], qwen_regex));
    return SHARC_OK;
}

static sharc_status read_normalizer(sharc_tokenizer *t, json_object *root) {
    json_object *n = member(root, "normalizer");
    if (is_null(n)) return SHARC_OK;
    const char *ty = type_of(n);
    if (ty && !strcmp(ty, "NFC")) {
        t->nfc = true;
        return SHARC_OK;
    }
    if (ty && !strcmp(ty, "Sequence")) {
        json_object *list = member(n, "normalizers");
        if (!list || !json_object_is_type(list, json_type_array))
            return bad(t, "normalizer.normalizers: expected a list");
        for (size_t i = 0; i < json_object_array_length(list); i++) {
            const char *q = type_of(json_object_array_get_idx(list, i));
            if (!q || strcmp(q, "NFC"))
                return bad(t, "normalizer.normalizers[%zu].type: '%s' is not supported; expected NFC", i,
                           q ? q : "(missing)");
            t->nfc = true;
        }
        return SHARC_OK;
    }
    return bad(t, "normalizer.type: '%s' is not supported; expected null or NFC", ty ? ty : "(missing)");
}

static sharc_status read_decoder(sharc_tokenizer *t, json_object *root) {
    json_object *d = member(root, "decoder");
    const char *ty = type_of(d);
    if (ty && !strcmp(ty, "ByteLevel")) return SHARC_OK;
    if (ty && !strcmp(ty, "Sequence")) {
        json_object *list = member(d, "decoders");
        if (list && json_object_is_type(list, json_type_array) && json_object_array_length(list) == 1) {
            const char *q = type_of(json_object_array_get_idx(list, 0));
            if (q && !strcmp(q, "ByteLevel")) return SHARC_OK;
        }
    }
    return bad(t, "decoder: expected ByteLevel (sharc decodes byte-level BPE), got %s",
               d ? json_object_to_json_string(d) : "null");
}

static sharc_status id_of_special(sharc_tokenizer *t, const char *name, const char *where, int32_t *id) {
    *id = sharc_tok_strmap_get(&t->added, t, name, strlen(name));
    if (*id < 0) *id = sharc_tok_strmap_get(&t->vocab, t, name, strlen(name));
    char b[120];
    if (*id < 0) return bad(t, "%s: '%s' is not a token of this tokenizer", where, shown(name, b, sizeof b));
    return SHARC_OK;
}

static sharc_status read_template_processing(sharc_tokenizer *t, json_object *p, const char *where) {
    json_object *single = member(p, "single");
    if (!single || !json_object_is_type(single, json_type_array)) return bad(t, "%s.single: expected a list", where);
    bool seen_a = false;
    for (size_t i = 0; i < json_object_array_length(single); i++) {
        json_object *it = json_object_array_get_idx(single, i), *sp = member(it, "SpecialToken"),
                    *sq = member(it, "Sequence");
        if (sq) {
            json_object *id = member(sq, "id");
            if (seen_a || !id || !json_object_is_type(id, json_type_string) || strcmp(json_object_get_string(id), "A"))
                return bad(t, "%s.single[%zu]: expected one Sequence A", where, i);
            seen_a = true;
        } else if (sp) {
            json_object *id = member(sp, "id");
            if (!id || !json_object_is_type(id, json_type_string))
                return bad(t, "%s.single[%zu].SpecialToken.id: expected a string", where, i);
            json_object *def = member(member(p, "special_tokens"), json_object_get_string(id)),
                        *ids = member(def, "ids");
            if (!ids || !json_object_is_type(ids, json_type_array))
                return bad(t, "%s.special_tokens: no ids for '%s'", where, json_object_get_string(id));
            for (size_t k = 0; k < json_object_array_length(ids); k++) {
                json_object *v = json_object_array_get_idx(ids, k);
                int64_t x = json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : -1;
                if (x < 0 || x >= t->num_ids)
                    return bad(t, "%s.special_tokens['%s'].ids[%zu]: %s is not an id of this tokenizer", where,
                               json_object_get_string(id), k, json_object_to_json_string(v));
                size_t *n = seen_a ? &t->n_suffix : &t->n_prefix;
                if (*n == TOK_MAX_AROUND) return bad(t, "%s.single: more than %d special ids", where, TOK_MAX_AROUND);
                (seen_a ? t->suffix : t->prefix)[(*n)++] = (int32_t)x;
            }
        } else {
            return bad(t, "%s.single[%zu]: expected SpecialToken or Sequence", where, i);
        }
    }
    if (!seen_a) return bad(t, "%s.single: no Sequence A", where);
    return SHARC_OK;
}

static sharc_status read_post_processor(sharc_tokenizer *t, json_object *root) {
    json_object *p = member(root, "post_processor");
    if (is_null(p)) return SHARC_OK;
    const char *ty = type_of(p);
    if (ty && !strcmp(ty, "ByteLevel")) return SHARC_OK; /* offsets only */
    if (ty && !strcmp(ty, "TemplateProcessing")) return read_template_processing(t, p, "post_processor");
    if (ty && !strcmp(ty, "Sequence")) {
        json_object *list = member(p, "processors");
        if (!list || !json_object_is_type(list, json_type_array))
            return bad(t, "post_processor.processors: expected a list");
        for (size_t i = 0; i < json_object_array_length(list); i++) {
            json_object *q = json_object_array_get_idx(list, i);
            const char *qt = type_of(q);
            char where[64];
            snprintf(where, sizeof where, "post_processor.processors[%zu]", i);
            if (qt && !strcmp(qt, "ByteLevel")) continue;
            if (qt && !strcmp(qt, "TemplateProcessing")) {
                SHARC_TRY(read_template_processing(t, q, where));
                continue;
            }
            return bad(t, "%s.type: '%s' is not supported; expected ByteLevel or TemplateProcessing", where,
                       qt ? qt : "(missing)");
        }
        return SHARC_OK;
    }
    return bad(t, "post_processor.type: '%s' is not supported; expected ByteLevel or TemplateProcessing",
               ty ? ty : "(missing)");
}

static sharc_status read_model_options(sharc_tokenizer *t, json_object *model) {
    const char *ty = type_of(model);
    if (!ty || strcmp(ty, "BPE"))
        return bad(t, "model.type: '%s' is not supported; sharc reads BPE models", ty ? ty : "(missing)");
    json_object *v = member(model, "dropout");
    if (!is_null(v) && !(json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)))
        return bad(t, "model.dropout: expected a number or null");
    if (!is_null(v) && json_object_get_double(v) != 0.0)
        return bad(t, "model.dropout = %g is not supported (training-time BPE dropout); set it to null",
                   json_object_get_double(v));
    SHARC_TRY(want_false(t, model, "byte_fallback", "model", "byte-level BPE needs no fallback"));
    const char *affix[2] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        v = member(model, affix[i]);
        if (!is_null(v) && (!json_object_is_type(v, json_type_string) || json_object_get_string_len(v) != 0))
            return bad(t, "model.%s = %s is not supported; expected null or \"\"", affix[i],
                       json_object_to_json_string(v));
    }
    return get_bool(t, model, "ignore_merges", "model", &t->ignore_merges);
}

static int cmp_entry_id(const void *a, const void *b) {
    int32_t x = ((const vocab_entry *)a)->id, y = ((const vocab_entry *)b)->id;
    return (x > y) - (x < y);
}

/* Parse the model's vocabulary and added tokens, lay out every id's bytes. */
static sharc_status read_tokens(sharc_tokenizer *t, json_object *root, json_object *model) {
    json_object *vocab = member(model, "vocab"), *added = member(root, "added_tokens");
    if (!vocab || !json_object_is_type(vocab, json_type_object)) return bad(t, "model.vocab: expected an object");
    if (!is_null(added) && !json_object_is_type(added, json_type_array)) return bad(t, "added_tokens: expected a list");
    size_t nv = (size_t)json_object_object_length(vocab), na = is_null(added) ? 0 : json_object_array_length(added);
    if (nv == 0) return bad(t, "model.vocab: empty");
    vocab_entry *ve = malloc(sizeof *ve * (nv + na + 1));
    if (!ve) return sharc_error(SHARC_ERR_NOMEM, "tokenizer: out of memory");
    sharc_status st = SHARC_OK;
    size_t k = 0;
    int64_t max_id = -1;
    char b1[120], b2[120];
    json_object_object_foreach(vocab, key, val) {
        if (!json_object_is_type(val, json_type_int) || json_object_get_int64(val) < 0 ||
            json_object_get_int64(val) >= INT32_MAX / 2) {
            st = bad(t, "model.vocab['%s']: expected an id >= 0, got %s", shown(key, b1, sizeof b1),
                     json_object_to_json_string(val));
            goto out;
        }
        ve[k++] = (vocab_entry){key, (int32_t)json_object_get_int64(val)};
        if (ve[k - 1].id > max_id) max_id = ve[k - 1].id;
    }
    /* added tokens: checked, counted in the id range */
    for (size_t i = 0; i < na; i++) {
        json_object *a = json_object_array_get_idx(added, i), *id = member(a, "id"), *content = member(a, "content");
        char where[48];
        snprintf(where, sizeof where, "added_tokens[%zu]", i);
        if (!id || !json_object_is_type(id, json_type_int) || json_object_get_int64(id) < 0 ||
            json_object_get_int64(id) >= INT32_MAX / 2) {
            st = bad(t, "%s.id: expected an id >= 0", where);
            goto out;
        }
        if (!content || !json_object_is_type(content, json_type_string) || json_object_get_string_len(content) == 0) {
            st = bad(t, "%s.content: expected a non-empty string", where);
            goto out;
        }
        const char *why = "not implemented";
        if ((st = want_false(t, a, "lstrip", where, why)) != SHARC_OK ||
            (st = want_false(t, a, "rstrip", where, why)) != SHARC_OK ||
            (st = want_false(t, a, "single_word", where, why)) != SHARC_OK)
            goto out;
        if (json_object_get_int64(id) > max_id) max_id = json_object_get_int64(id);
    }
    /* ids index tables: refuse a file whose ids leave more holes than tokens
     * (one huge id would make them gigabytes) */
    if (max_id >= (int64_t)(nv + na) + 65536) {
        st = bad(t, "id %lld for %zu tokens: ids must be nearly contiguous (at most 65536 without a token)",
                 (long long)max_id, nv + na);
        goto out;
    }
    t->num_ids = (int32_t)max_id + 1;
    /* ids: one token each */
    qsort(ve, k, sizeof *ve, cmp_entry_id);
    for (size_t i = 1; i < k; i++)
        if (ve[i].id == ve[i - 1].id) {
            st = bad(t, "model.vocab: id %d is given to both '%s' and '%s'", ve[i].id,
                     shown(ve[i - 1].text, b1, sizeof b1), shown(ve[i].text, b2, sizeof b2));
            goto out;
        }
    size_t total = 0;
    for (size_t i = 0; i < k; i++) total += strlen(ve[i].text);
    for (size_t i = 0; i < na; i++)
        total += (size_t)json_object_get_string_len(member(json_object_array_get_idx(added, i), "content"));
    if (total >= UINT32_MAX) {
        st = bad(t, "the tokens' text is over 4 GB");
        goto out;
    }
    t->tok_off = calloc((size_t)t->num_ids, sizeof(uint32_t));
    t->tok_len = calloc((size_t)t->num_ids, sizeof(uint32_t));
    t->tok_flags = calloc((size_t)t->num_ids, 1);
    t->bytes = malloc(total + 1);
    if (!t->tok_off || !t->tok_len || !t->tok_flags || !t->bytes || strmap_init(&t->vocab, k) != SHARC_OK ||
        strmap_init(&t->added, na) != SHARC_OK) {
        st = sharc_error(SHARC_ERR_NOMEM, "tokenizer: out of memory for %d ids", t->num_ids);
        goto out;
    }
    size_t off = 0;
    for (size_t i = 0; i < k; i++) {
        size_t n = strlen(ve[i].text), raw;
        int32_t id = ve[i].id;
        t->tok_off[id] = (uint32_t)off;
        t->tok_flags[id] = TOK_EXISTS;
        if (bytelevel_to_raw(ve[i].text, n, t->bytes + off, &raw)) {
            t->tok_flags[id] |= TOK_BYTELEVEL;
        } else {
            memcpy(t->bytes + off, ve[i].text, n); /* decodes to its own text, as Hugging Face's decoder does */
            raw = n;
        }
        t->tok_len[id] = (uint32_t)raw;
        off += raw;
    }
    for (size_t i = 0; i < k; i++) {
        int32_t id = ve[i].id;
        if (!(t->tok_flags[id] & TOK_BYTELEVEL)) continue;
        if (sharc_tok_strmap_get(&t->vocab, t, t->bytes + t->tok_off[id], t->tok_len[id]) >= 0) {
            st = bad(t, "model.vocab: '%s' is listed twice", shown(ve[i].text, b1, sizeof b1));
            goto out;
        }
        strmap_put(&t->vocab, sharc_tok_hash(t->bytes + t->tok_off[id], t->tok_len[id]), id);
    }
    for (size_t i = 0; i < na; i++) {
        json_object *a = json_object_array_get_idx(added, i);
        int32_t id = (int32_t)json_object_get_int64(member(a, "id"));
        const char *c = json_object_get_string(member(a, "content"));
        size_t n = strlen(c);
        bool special = false, normalized = false;
        char where[48];
        snprintf(where, sizeof where, "added_tokens[%zu]", i);
        if ((st = get_bool(t, a, "special", where, &special)) != SHARC_OK ||
            (st = get_bool(t, a, "normalized", where, &normalized)) != SHARC_OK)
            goto out;
        if (normalized && t->nfc) {
            st = bad(t, "%s.normalized = true with an NFC normalizer is not supported", where);
            goto out;
        }
        if (t->tok_flags[id] & TOK_ADDED) {
            st = bad(t, "%s: id %d is already the added token '%s'", where, id,
                     shown_n(t->bytes + t->tok_off[id], t->tok_len[id], b1, sizeof b1));
            goto out;
        }
        if (sharc_tok_strmap_get(&t->added, t, c, n) >= 0) {
            st = bad(t, "%s: '%s' is added twice", where, shown(c, b1, sizeof b1));
            goto out;
        }
        if (sharc_tok_utf8_valid((const unsigned char *)c, n) != n) {
            st = bad(t, "%s.content: not valid UTF-8", where);
            goto out;
        }
        /* An added token decodes to its content. It may also be a vocabulary
         * entry (GPT-2's <|endoftext|>) whose bytes the vocabulary map keys
         * on: then the two must be the same text. */
        if ((t->tok_flags[id] & TOK_EXISTS) && (t->tok_len[id] != n || memcmp(t->bytes + t->tok_off[id], c, n) != 0)) {
            st = bad(t, "%s: id %d is also the vocabulary entry '%s', another text", where, id,
                     shown_n(t->bytes + t->tok_off[id], t->tok_len[id], b1, sizeof b1));
            goto out;
        }
        memcpy(t->bytes + off, c, n);
        t->tok_off[id] = (uint32_t)off;
        t->tok_len[id] = (uint32_t)n;
        t->tok_flags[id] = (uint8_t)(t->tok_flags[id] | TOK_EXISTS | TOK_ADDED | (special ? TOK_SPECIAL : 0));
        off += n;
        strmap_put(&t->added, sharc_tok_hash(c, n), id);
        if ((int32_t)n > t->max_added_len) t->max_added_len = (int32_t)n;
    }
    t->nbytes = off;
out:
    free(ve);
    return st;
}

static sharc_status read_bytes_and_merges(sharc_tokenizer *t, json_object *model) {
    char b1[120];
    for (unsigned b = 0; b < 256; b++) {
        char c = (char)b;
        t->byte_id[b] = sharc_tok_strmap_get(&t->vocab, t, &c, 1);
        if (t->byte_id[b] < 0) {
            uint32_t cp = sharc_tok_byte_to_cp(b);
            return bad(t,
                       "model.vocab: no token for byte 0x%02x (the character U+%04X); a byte-level vocabulary needs "
                       "all 256",
                       b, (unsigned)cp);
        }
    }
    json_object *merges = member(model, "merges");
    if (is_null(merges)) return SHARC_OK;
    if (!json_object_is_type(merges, json_type_array)) return bad(t, "model.merges: expected a list");
    size_t n = json_object_array_length(merges);
    if (n >= INT32_MAX) return bad(t, "model.merges: too many");
    t->merges.cap = pow2_above(n);
    t->merges.slots = calloc(t->merges.cap, sizeof(tok_pair));
    if (!t->merges.slots) return sharc_error(SHARC_ERR_NOMEM, "tokenizer: out of memory for %zu merges", n);
    char *buf = NULL;
    size_t bufcap = 0;
    sharc_status st = SHARC_OK;
    for (size_t i = 0; i < n && st == SHARC_OK; i++) {
        json_object *m = json_object_array_get_idx(merges, i);
        const char *part[2];
        size_t plen[2];
        if (json_object_is_type(m, json_type_string)) {
            const char *s = json_object_get_string(m), *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' ') || sp == s || !sp[1]) {
                st = bad(t, "model.merges[%zu]: '%s' is not two tokens separated by one space", i,
                         shown(s, b1, sizeof b1));
                break;
            }
            part[0] = s, plen[0] = (size_t)(sp - s), part[1] = sp + 1, plen[1] = strlen(sp + 1);
        } else if (json_object_is_type(m, json_type_array) && json_object_array_length(m) == 2 &&
                   json_object_is_type(json_object_array_get_idx(m, 0), json_type_string) &&
                   json_object_is_type(json_object_array_get_idx(m, 1), json_type_string)) {
            for (int j = 0; j < 2; j++) {
                part[j] = json_object_get_string(json_object_array_get_idx(m, j));
                plen[j] = (size_t)json_object_get_string_len(json_object_array_get_idx(m, j));
            }
        } else {
            st = bad(t, "model.merges[%zu]: expected \"a b\" or [\"a\", \"b\"], got %s", i,
                     json_object_to_json_string(m));
            break;
        }
        if (plen[0] + plen[1] + 1 > bufcap) {
            bufcap = 2 * (plen[0] + plen[1] + 1);
            char *nb = realloc(buf, bufcap);
            if (!nb) {
                st = sharc_error(SHARC_ERR_NOMEM, "tokenizer: out of memory");
                break;
            }
            buf = nb;
        }
        int32_t ids[2];
        size_t raw[2];
        for (int j = 0; j < 2 && st == SHARC_OK; j++) {
            char piece[120];
            snprintf(piece, sizeof piece, "%.*s", (int)(plen[j] < 100 ? plen[j] : 100), part[j]);
            if (!bytelevel_to_raw(part[j], plen[j], buf + (j ? raw[0] : 0), &raw[j]) ||
                (ids[j] = sharc_tok_strmap_get(&t->vocab, t, buf + (j ? raw[0] : 0), raw[j])) < 0)
                st = bad(t, "model.merges[%zu]: '%s' is not in model.vocab", i, shown(piece, b1, sizeof b1));
        }
        if (st != SHARC_OK) break;
        int32_t merged = sharc_tok_strmap_get(&t->vocab, t, buf, raw[0] + raw[1]);
        if (merged < 0) {
            char whole[240];
            snprintf(whole, sizeof whole, "%.*s%.*s", (int)(plen[0] < 100 ? plen[0] : 100), part[0],
                     (int)(plen[1] < 100 ? plen[1] : 100), part[1]);
            st = bad(t, "model.merges[%zu]: the merged token '%s' is not in model.vocab", i,
                     shown(whole, b1, sizeof b1));
            break;
        }
        pair_put(&t->merges, ids[0], ids[1], (int32_t)i, merged);
    }
    free(buf);
    return st;
}

/* tokenizer_config.json: a string or {"content": ...} */
static sharc_status config_token(sharc_tokenizer *t, json_object *cfg, const char *key, char **text, int32_t *id) {
    json_object *v = member(cfg, key);
    *id = -1;
    if (is_null(v)) return SHARC_OK;
    if (json_object_is_type(v, json_type_object)) v = member(v, "content");
    if (!v || !json_object_is_type(v, json_type_string))
        return bad(t, "tokenizer_config.json %s: expected a string or {\"content\": ...}", key);
    char where[64];
    snprintf(where, sizeof where, "tokenizer_config.json %s", key);
    SHARC_TRY(id_of_special(t, json_object_get_string(v), where, id));
    if (text && !(*text = strdup(json_object_get_string(v))))
        return sharc_error(SHARC_ERR_NOMEM, "tokenizer: out of memory");
    return SHARC_OK;
}

static sharc_status read_config(sharc_tokenizer *t, json_object *cfg) {
    t->bos = t->eos = t->pad = -1;
    if (!cfg) return SHARC_OK;
    SHARC_TRY(config_token(t, cfg, "bos_token", &t->bos_text, &t->bos));
    SHARC_TRY(config_token(t, cfg, "eos_token", &t->eos_text, &t->eos));
    SHARC_TRY(config_token(t, cfg, "pad_token", NULL, &t->pad));
    json_object *ct = member(cfg, "chat_template");
    const char *tmpl = NULL;
    if (ct && json_object_is_type(ct, json_type_string)) {
        tmpl = json_object_get_string(ct);
    } else if (ct && json_object_is_type(ct, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(ct); i++) {
            json_object *e = json_object_array_get_idx(ct, i), *name = member(e, "name"), *body = member(e, "template");
            if (name && body && json_object_is_type(name, json_type_string) &&
                json_object_is_type(body, json_type_string) && !strcmp(json_object_get_string(name), "default"))
                tmpl = json_object_get_string(body);
        }
        if (!tmpl) return bad(t, "tokenizer_config.json chat_template: a list without a \"default\" template");
    } else if (!is_null(ct)) {
        return bad(t, "tokenizer_config.json chat_template: expected a string or a list of {name, template}");
    }
    if (tmpl && !(t->chat_template = strdup(tmpl))) return sharc_error(SHARC_ERR_NOMEM, "tokenizer: out of memory");
    return SHARC_OK;
}

/* Strict JSON (json-c, UTF-8 checked) whose root is an object. */
static sharc_status parse_json(const sharc_tokenizer *t, const char *text, size_t len, const char *what,
                               json_object **out) {
    *out = NULL;
    if (len > INT_MAX) return bad(t, "%s: larger than 2 GB", what);
    struct json_tokener *tok = json_tokener_new_ex(64);
    if (!tok) return sharc_error(SHARC_ERR_NOMEM, "tokenizer: out of memory");
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    json_object *root = json_tokener_parse_ex(tok, text, (int)len);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t used = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (!root || jerr != json_tokener_success) {
        json_object_put(root);
        return bad(t, "%s is not valid JSON (%s)", what, json_tokener_error_desc(jerr));
    }
    for (size_t i = used; i < len; i++)
        if (text[i] != ' ' && text[i] != '\n' && text[i] != '\t' && text[i] != '\r') {
            json_object_put(root);
            return bad(t, "%s has bytes after the JSON value", what);
        }
    if (!json_object_is_type(root, json_type_object)) {
        json_object_put(root);
        return bad(t, "%s: expected a JSON object", what);
    }
    *out = root;
    return SHARC_OK;
}

static sharc_status build(sharc_tokenizer *t, const char *json, size_t len, const char *config_json) {
    struct sha256_ctx h;
    sha256_init(&h);
    sha256_update(&h, len, (const uint8_t *)json);
    sha256_digest(&h, sizeof t->sha256, t->sha256);
    json_object *root = NULL, *cfg = NULL;
    sharc_status st = parse_json(t, json, len, "tokenizer.json", &root);
    if (st == SHARC_OK && config_json)
        st = parse_json(t, config_json, strlen(config_json), "tokenizer_config.json", &cfg);
    const char *opt[2] = {"truncation", "padding"};
    for (int i = 0; i < 2 && st == SHARC_OK; i++)
        if (!is_null(member(root, opt[i])))
            st = bad(t, "%s: expected null (sharc pads and truncates samples itself)", opt[i]);
    json_object *model = member(root, "model");
    if (st == SHARC_OK && !model) st = bad(t, "model: missing");
    if (st == SHARC_OK) st = read_model_options(t, model);
    if (st == SHARC_OK) st = read_normalizer(t, root);
    if (st == SHARC_OK) st = read_tokens(t, root, model);
    if (st == SHARC_OK) st = read_bytes_and_merges(t, model);
    if (st == SHARC_OK) st = read_pre_tokenizer(t, root);
    if (st == SHARC_OK) st = read_decoder(t, root);
    if (st == SHARC_OK) st = read_post_processor(t, root);
    if (st == SHARC_OK) st = read_config(t, cfg);
    json_object_put(root);
    json_object_put(cfg);
    if (st != SHARC_OK) return st;
    /* added tokens by first byte, longest first (leftmost-longest matching) */
    int32_t na = 0;
    for (int32_t id = 0; id < t->num_ids; id++) na += (t->tok_flags[id] & TOK_ADDED) != 0;
    t->added_sorted = malloc(sizeof(int32_t) * (size_t)(na + 1));
    if (!t->added_sorted) return sharc_error(SHARC_ERR_NOMEM, "tokenizer: out of memory");
    uint32_t count[256] = {0};
    for (int32_t id = 0; id < t->num_ids; id++)
        if (t->tok_flags[id] & TOK_ADDED) {
            count[(unsigned char)t->bytes[t->tok_off[id]]]++;
            if (memchr(t->bytes + t->tok_off[id], '\n', t->tok_len[id])) t->chunk_safe = false;
        }
    t->first_start[0] = 0;
    for (int b = 0; b < 256; b++) t->first_start[b + 1] = t->first_start[b] + count[b];
    uint32_t fill[256];
    memcpy(fill, t->first_start, sizeof fill);
    for (int32_t id = 0; id < t->num_ids; id++)
        if (t->tok_flags[id] & TOK_ADDED) t->added_sorted[fill[(unsigned char)t->bytes[t->tok_off[id]]]++] = id;
    for (int b = 0; b < 256; b++) /* insertion sort by length, descending: few per byte */
        for (uint32_t i = t->first_start[b] + 1; i < t->first_start[b + 1]; i++)
            for (uint32_t j = i;
                 j > t->first_start[b] && t->tok_len[t->added_sorted[j]] > t->tok_len[t->added_sorted[j - 1]]; j--) {
                int32_t x = t->added_sorted[j];
                t->added_sorted[j] = t->added_sorted[j - 1];
                t->added_sorted[j - 1] = x;
            }
    return SHARC_OK;
}

sharc_status sharc_tokenizer_load_json(sharc_tokenizer **out, const char *json, size_t len, const char *config_json,
                                       const char *name) {
    *out = NULL;
    sharc_tokenizer *t = calloc(1, sizeof *t);
    if (!t || !(t->path = strdup(name ? name : "(memory)"))) {
        free(t);
        return sharc_error(SHARC_ERR_NOMEM, "tokenizer: out of memory");
    }
    sharc_status st = build(t, json, len, config_json);
    if (st != SHARC_OK) {
        sharc_tokenizer_free(t);
        return st;
    }
    *out = t;
    return SHARC_OK;
}

static bool is_dir(const char *p) {
    struct stat s;
    return stat(p, &s) == 0 && S_ISDIR(s.st_mode);
}

static bool is_file(const char *p) {
    struct stat s;
    return stat(p, &s) == 0 && S_ISREG(s.st_mode);
}

sharc_status sharc_tokenizer_load(sharc_tokenizer **out, const char *path) {
    *out = NULL;
    if (!path || !*path) return sharc_error(SHARC_ERR_INVALID, "tokenizer: no path given; set model.tokenizer");
    char file[4096], dir[4096], cfgpath[4200], jinja[4200];
    if (is_dir(path)) {
        snprintf(dir, sizeof dir, "%s", path);
        snprintf(file, sizeof file, "%s/tokenizer.json", path);
        if (!is_file(file))
            return sharc_error(SHARC_ERR_INVALID,
                               "tokenizer: '%s' is a directory without tokenizer.json; model.tokenizer must "
                               "name a Hugging Face tokenizer.json or a directory holding one",
                               path);
    } else {
        snprintf(file, sizeof file, "%s", path);
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else snprintf(dir, sizeof dir, ".");
    }
    snprintf(cfgpath, sizeof cfgpath, "%s/tokenizer_config.json", dir);
    snprintf(jinja, sizeof jinja, "%s/chat_template.jinja", dir);
    char *json = NULL, *cfg = NULL, *tmpl = NULL;
    size_t len = 0;
    sharc_status st = sharc_read_file(file, &json, &len);
    if (st != SHARC_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", sharc_last_error());
        return sharc_error(st, "tokenizer: %s; model.tokenizer must name a tokenizer.json or its directory", msg);
    }
    if (is_file(cfgpath)) st = sharc_read_file(cfgpath, &cfg, NULL);
    if (st == SHARC_OK) st = sharc_tokenizer_load_json(out, json, len, cfg, file);
    if (st == SHARC_OK && !(*out)->chat_template && is_file(jinja)) {
        st = sharc_read_file(jinja, &tmpl, NULL);
        if (st == SHARC_OK) (*out)->chat_template = tmpl;
        else {
            sharc_tokenizer_free(*out);
            *out = NULL;
        }
    }
    free(json);
    free(cfg);
    return st;
}

void sharc_tokenizer_free(sharc_tokenizer *t) {
    if (!t) return;
    free(t->path);
    free(t->tok_off);
    free(t->tok_len);
    free(t->tok_flags);
    free(t->bytes);
    free(t->vocab.slots);
    free(t->added.slots);
    free(t->merges.slots);
    free(t->added_sorted);
    for (int i = 0; i < t->n_regex; i++) free(t->regex[i]);
    free(t->bos_text);
    free(t->eos_text);
    free(t->chat_template);
    free(t);
}

/* ------------------------------------------------------------ accessors */

const char *sharc_tokenizer_path(const sharc_tokenizer *t) { return t->path; }
int32_t sharc_tokenizer_num_ids(const sharc_tokenizer *t) { return t->num_ids; }
int32_t sharc_tokenizer_bos(const sharc_tokenizer *t) { return t->bos; }
int32_t sharc_tokenizer_eos(const sharc_tokenizer *t) { return t->eos; }
int32_t sharc_tokenizer_pad(const sharc_tokenizer *t) { return t->pad; }
const char *sharc_tokenizer_bos_text(const sharc_tokenizer *t) { return t->bos_text; }
const char *sharc_tokenizer_eos_text(const sharc_tokenizer *t) { return t->eos_text; }
const char *sharc_tokenizer_chat_template(const sharc_tokenizer *t) { return t->chat_template; }
const uint8_t *sharc_tokenizer_sha256(const sharc_tokenizer *t) { return t->sha256; }

size_t sharc_tokenizer_prefix_ids(const sharc_tokenizer *t, const int32_t **ids) {
    *ids = t->prefix;
    return t->n_prefix;
}

size_t sharc_tokenizer_suffix_ids(const sharc_tokenizer *t, const int32_t **ids) {
    *ids = t->suffix;
    return t->n_suffix;
}

int32_t sharc_tokenizer_token_id(const sharc_tokenizer *t, const char *text, size_t len) {
    int32_t id = sharc_tok_strmap_get(&t->added, t, text, len);
    return id >= 0 ? id : sharc_tok_strmap_get(&t->vocab, t, text, len);
}

const char *sharc_tokenizer_token_bytes(const sharc_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->num_ids || !(t->tok_flags[id] & TOK_EXISTS)) {
        *len = 0;
        return NULL;
    }
    *len = t->tok_len[id];
    return t->bytes + t->tok_off[id];
}

bool sharc_tokenizer_is_special(const sharc_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->num_ids && (t->tok_flags[id] & TOK_SPECIAL);
}

sharc_status sharc_tokenizer_decode(const sharc_tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *len) {
    size_t total = 0, l;
    for (size_t i = 0; i < n; i++) {
        sharc_tokenizer_token_bytes(t, ids[i], &l);
        total += l;
    }
    char *buf = malloc(total + 1);
    if (!buf) return sharc_error(SHARC_ERR_NOMEM, "tokenizer: out of memory decoding %zu ids", n);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *b = sharc_tokenizer_token_bytes(t, ids[i], &l);
        if (l) memcpy(buf + k, b, l);
        k += l;
    }
    buf[k] = 0;
    *out = buf;
    if (len) *len = k;
    return SHARC_OK;
}
