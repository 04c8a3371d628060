/* encoder.c: sharc_encoder_* and sharc_tokenizer_encode_text, turning text
 * into ids with a loaded sharc_tokenizer (tokenizer_impl.h): added-token
 * split, NFC (utf8proc), the pre-tokenizer's regexes (Oniguruma) and BPE.
 * An encoder owns per-thread state: its compiled regexes, the BPE scratch
 * (symbols and a heap) and a cache of words already merged.
 *
 * Note [bpe-order]. Merges are applied as Hugging Face's BPE model applies
 * them: every adjacent pair with a merge goes into a min-heap ordered by
 * (rank, position); the top is merged unless it went stale (one of its
 * symbols was merged away or changed), and the pairs it forms with its
 * neighbours are pushed. So the lowest rank goes first and, among equal
 * ranks, the leftmost. With `ignore_merges` a pre-token that is itself in
 * the vocabulary is emitted as that one token (tiktoken's rule, Llama-3).
 *
 * Note [safe-cuts]. A long text is encoded in parallel by cutting it where
 * no pre-token can cross: after a '\n' that follows a printable ASCII
 * character other than space and precedes an ASCII letter. For the GPT-2,
 * Llama-3 and Qwen patterns no alternative matches '\n' followed by a
 * letter, and the one lookahead, `\s+(?!\S)`, only reaches the '\n' when it
 * starts a whitespace run, which the character before it rules out (that
 * lookahead sees the letter in the whole text but the end of the piece
 * after a cut, so "x  \n|A" would be cut differently). NFC never composes
 * across a newline. The cut is made only when the tokenizer's single regex
 * is one of those three patterns and no added token contains a newline
 * (tokenizer.c sets chunk_safe); otherwise the text is encoded whole. The
 * tests compare chunked ids with the reference on whole texts. */
#include "tokenizer_impl.h"

#include <omp.h>
#include <oniguruma.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define CACHE_SLOTS     65536u     /* power of two */
#define CACHE_MAX_WORD  64         /* longer words are merged every time */
#define CACHE_KEY_BYTES (1u << 21) /* arenas; the cache is emptied when one fills */
#define CACHE_ID_COUNT  (1u << 19)

typedef struct {
    uint32_t hash;
    uint32_t key_off;
    uint32_t ids_off;
    uint16_t key_len; /* 0: empty */
    uint16_t n_ids;
} cache_slot;

typedef struct {
    int32_t rank, pos, id;
} heap_item;

typedef struct {
    int32_t id, prev, next, len; /* len 0: merged away */
} symbol;

struct sharc_encoder {
    const sharc_tokenizer *t;
    regex_t *re[TOK_MAX_REGEX];
    OnigRegion *region;
    symbol *sym;
    heap_item *heap;
    size_t sym_cap, heap_cap;
    cache_slot *cache;
    char *cache_keys;
    int32_t *cache_ids;
    uint32_t cache_used, keys_used, ids_used;
};

static pthread_once_t onig_once = PTHREAD_ONCE_INIT;

static void onig_setup(void) {
    OnigEncoding use[1] = {ONIG_ENCODING_UTF8};
    onig_initialize(use, 1);
}

sharc_status sharc_encoder_init(sharc_encoder **out, const sharc_tokenizer *t) {
    *out = NULL;
    pthread_once(&onig_once, onig_setup);
    sharc_encoder *e = calloc(1, sizeof *e);
    if (!e) return sharc_error(SHARC_ERR_NOMEM, "tokenizer: out of memory");
    e->t = t;
    for (int i = 0; i < t->n_regex; i++) {
        OnigErrorInfo einfo;
        const char *p = t->regex[i];
        if (onig_new(&e->re[i], (const UChar *)p, (const UChar *)p + strlen(p), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                     ONIG_SYNTAX_RUBY, &einfo) != ONIG_NORMAL) {
            sharc_encoder_free(e);
            return sharc_error(SHARC_ERR_INTERNAL, "tokenizer '%s': regex %d no longer compiles", t->path, i);
        }
    }
    e->region = onig_region_new();
    e->cache = calloc(CACHE_SLOTS, sizeof(cache_slot));
    e->cache_keys = malloc(CACHE_KEY_BYTES);
    e->cache_ids = malloc(CACHE_ID_COUNT * sizeof(int32_t));
    if (!e->region || !e->cache || !e->cache_keys || !e->cache_ids) {
        sharc_encoder_free(e);
        return sharc_error(SHARC_ERR_NOMEM, "tokenizer: out of memory");
    }
    *out = e;
    return SHARC_OK;
}

void sharc_encoder_free(sharc_encoder *e) {
    if (!e) return;
    for (int i = 0; i < TOK_MAX_REGEX; i++)
        if (e->re[i]) onig_free(e->re[i]);
    if (e->region) onig_region_free(e->region, 1);
    free(e->sym);
    free(e->heap);
    free(e->cache);
    free(e->cache_keys);
    free(e->cache_ids);
    free(e);
}

/* ------------------------------------------------------------ word cache */

static const cache_slot *cache_get(const sharc_encoder *e, const char *w, size_t n, uint32_t h) {
    for (uint32_t i = h & (CACHE_SLOTS - 1);; i = (i + 1) & (CACHE_SLOTS - 1)) {
        const cache_slot *s = &e->cache[i];
        if (!s->key_len) return NULL;
        if (s->hash == h && s->key_len == n && memcmp(e->cache_keys + s->key_off, w, n) == 0) return s;
    }
}

static void cache_put(sharc_encoder *e, const char *w, size_t n, uint32_t h, const int32_t *ids, size_t k) {
    if (e->cache_used >= CACHE_SLOTS / 2 || e->keys_used + n > CACHE_KEY_BYTES || e->ids_used + k > CACHE_ID_COUNT) {
        memset(e->cache, 0, CACHE_SLOTS * sizeof(cache_slot));
        e->cache_used = e->keys_used = e->ids_used = 0;
    }
    uint32_t i = h & (CACHE_SLOTS - 1);
    while (e->cache[i].key_len) i = (i + 1) & (CACHE_SLOTS - 1);
    memcpy(e->cache_keys + e->keys_used, w, n);
    memcpy(e->cache_ids + e->ids_used, ids, k * sizeof(int32_t));
    e->cache[i] = (cache_slot){h, e->keys_used, e->ids_used, (uint16_t)n, (uint16_t)k};
    e->keys_used += (uint32_t)n;
    e->ids_used += (uint32_t)k;
    e->cache_used++;
}

/* ------------------------------------------------------------ BPE (note [bpe-order]) */

static bool heap_less(const heap_item *a, const heap_item *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(heap_item *h, size_t *n, heap_item x) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&x, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static heap_item heap_pop(heap_item *h, size_t *n) {
    heap_item top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_less(&h[c + 1], &h[c])) c++;
        if (!heap_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

static sharc_status grow(sharc_encoder *e, size_t n) {
    if (n <= e->sym_cap) return SHARC_OK;
    size_t cap = e->sym_cap ? e->sym_cap : 64;
    while (cap < n) cap *= 2;
    symbol *s = realloc(e->sym, cap * sizeof *s);
    if (s) e->sym = s;
    /* each merge pushes at most two pairs: the heap never holds more than 3n */
    heap_item *h = realloc(e->heap, 3 * cap * sizeof *h);
    if (h) e->heap = h;
    if (!s || !h) return sharc_error(SHARC_ERR_NOMEM, "tokenizer: out of memory for a %zu-byte word", n);
    e->sym_cap = cap;
    return SHARC_OK;
}

static void push_pair(const sharc_tokenizer *t, heap_item *h, size_t *nh, const symbol *s, int32_t pos) {
    if (pos < 0 || s[pos].next < 0) return;
    const tok_pair *p = sharc_tok_pair_get(&t->merges, s[pos].id, s[s[pos].next].id);
    if (p) heap_push(h, nh, (heap_item){p->rank, pos, p->id});
}

/* One pre-token (raw bytes) -> ids. */
static sharc_status bpe_word(sharc_encoder *e, const char *w, size_t n, sharc_ids *out) {
    const sharc_tokenizer *t = e->t;
    if (n == 0) return SHARC_OK;
    if (n == 1) return sharc_ids_push(out, t->byte_id[(unsigned char)w[0]]);
    if (t->ignore_merges) {
        int32_t id = sharc_tok_strmap_get(&t->vocab, t, w, n);
        if (id >= 0) return sharc_ids_push(out, id);
    }
    uint32_t h = 0;
    if (n <= CACHE_MAX_WORD) {
        h = sharc_tok_hash(w, n);
        const cache_slot *c = cache_get(e, w, n, h);
        if (c) {
            SHARC_TRY(sharc_ids_reserve(out, out->n + c->n_ids));
            memcpy(out->ids + out->n, e->cache_ids + c->ids_off, c->n_ids * sizeof(int32_t));
            out->n += c->n_ids;
            return SHARC_OK;
        }
    }
    SHARC_TRY(grow(e, n));
    symbol *s = e->sym;
    for (size_t i = 0; i < n; i++)
        s[i] = (symbol){t->byte_id[(unsigned char)w[i]], (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1, 1};
    size_t nh = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(t, e->heap, &nh, s, (int32_t)i);
    while (nh) {
        heap_item top = heap_pop(e->heap, &nh);
        symbol *a = &s[top.pos];
        if (a->len == 0 || a->next < 0) continue;
        symbol *b = &s[a->next];
        const tok_pair *p = sharc_tok_pair_get(&t->merges, a->id, b->id);
        if (!p || p->id != top.id) continue; /* stale */
        a->id = top.id;
        a->len += b->len;
        b->len = 0;
        a->next = b->next;
        if (a->next >= 0) s[a->next].prev = top.pos;
        push_pair(t, e->heap, &nh, s, a->prev);
        push_pair(t, e->heap, &nh, s, top.pos);
    }
    size_t first = out->n;
    for (int32_t i = 0; i >= 0; i = s[i].next) SHARC_TRY(sharc_ids_push(out, s[i].id));
    if (n <= CACHE_MAX_WORD && out->n - first <= UINT16_MAX) cache_put(e, w, n, h, out->ids + first, out->n - first);
    return SHARC_OK;
}

/* ------------------------------------------------------------ pre-tokenizer */

/* Split [s, s+n) by regex `level` (Isolated: matches and the gaps between
 * them are pieces), each piece by the next regex, the last ones by BPE. */
static sharc_status split(sharc_encoder *e, int level, const char *s, size_t n, sharc_ids *out) {
    if (n == 0) return SHARC_OK;
    if (level == e->t->n_regex) return bpe_word(e, s, n, out);
    /* done: the text before it is emitted; from: where the next search starts */
    const UChar *start = (const UChar *)s, *end = start + n, *done = start, *from = start;
    while (from < end) {
        int r = onig_search(e->re[level], start, end, from, end, e->region, ONIG_OPTION_NONE);
        if (r == ONIG_MISMATCH) break;
        if (r < 0) return sharc_error(SHARC_ERR_INTERNAL, "tokenizer: regex search failed (%d)", r);
        const UChar *mb = start + e->region->beg[0], *me = start + e->region->end[0];
        if (mb > done) SHARC_TRY(split(e, level + 1, (const char *)done, (size_t)(mb - done), out));
        done = mb;
        if (me == mb) { /* an empty match only cuts the gap (as Hugging Face's Split does); step one character */
            from = mb + 1;
            while (from < end && (*from & 0xC0) == 0x80) from++;
            continue;
        }
        SHARC_TRY(split(e, level + 1, (const char *)mb, (size_t)(me - mb), out));
        done = from = me;
    }
    return done < end ? split(e, level + 1, (const char *)done, (size_t)(end - done), out) : SHARC_OK;
}

/* ------------------------------------------------------------ normaliser */

static bool all_ascii(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80) return false;
    return true;
}

/* NFC of a valid UTF-8 piece: *out is s itself (nothing to do) or a
 * malloc'd buffer in *owned. */
static sharc_status nfc(const char *s, size_t n, const char **out, size_t *outlen, char **owned) {
    *owned = NULL;
    if (all_ascii(s, n)) {
        *out = s;
        *outlen = n;
        return SHARC_OK;
    }
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r =
        utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (r < 0) return sharc_error(SHARC_ERR_INVALID, "tokenizer: NFC failed: %s", utf8proc_errmsg(r));
    *owned = (char *)dst;
    *out = (const char *)dst;
    *outlen = (size_t)r;
    return SHARC_OK;
}

/* ------------------------------------------------------------ encode */

/* Added tokens split the raw text: at each position the longest added
 * token starting there, scanning left to right (leftmost-longest). Calls
 * piece() for the text between them and emits their ids. */
static int32_t added_at(const sharc_tokenizer *t, const char *s, size_t n, size_t pos, size_t *len) {
    unsigned c = (unsigned char)s[pos];
    for (uint32_t k = t->first_start[c]; k < t->first_start[c + 1]; k++) {
        int32_t id = t->added_sorted[k];
        size_t l = t->tok_len[id];
        if (l <= n - pos && memcmp(s + pos, t->bytes + t->tok_off[id], l) == 0) {
            *len = l;
            return id;
        }
    }
    return -1;
}

static sharc_status encode_piece(sharc_encoder *e, const char *s, size_t n, sharc_ids *out) {
    if (n == 0) return SHARC_OK;
    if (!e->t->nfc) return split(e, 0, s, n, out);
    const char *p = s;
    size_t pn = n;
    char *owned;
    SHARC_TRY(nfc(s, n, &p, &pn, &owned));
    sharc_status st = split(e, 0, p, pn, out);
    free(owned);
    return st;
}

static sharc_status check_utf8(const sharc_tokenizer *t, const char *text, size_t len) {
    size_t ok = sharc_tok_utf8_valid((const unsigned char *)text, len);
    if (ok != len)
        return sharc_error(SHARC_ERR_INVALID, "tokenizer '%s': the text is not valid UTF-8 at byte %zu (0x%02x)",
                           t->path, ok, (unsigned char)text[ok]);
    return SHARC_OK;
}

/* Without the UTF-8 check (done once by the callers). */
static sharc_status encode_valid(sharc_encoder *e, const char *text, size_t len, sharc_ids *out) {
    const sharc_tokenizer *t = e->t;
    size_t start = 0, pos = 0;
    if (t->added_sorted && t->first_start[256] > 0) {
        while (pos < len) {
            unsigned c = (unsigned char)text[pos];
            size_t l;
            int32_t id;
            if (t->first_start[c] == t->first_start[c + 1] || (id = added_at(t, text, len, pos, &l)) < 0) {
                pos++;
                continue;
            }
            SHARC_TRY(encode_piece(e, text + start, pos - start, out));
            SHARC_TRY(sharc_ids_push(out, id));
            pos += l;
            start = pos;
        }
    }
    return encode_piece(e, text + start, len - start, out);
}

sharc_status sharc_encoder_encode(sharc_encoder *e, const char *text, size_t len, sharc_ids *out) {
    SHARC_TRY(check_utf8(e->t, text, len));
    return encode_valid(e, text, len, out);
}

sharc_status sharc_encoder_normalized_length(sharc_encoder *e, const char *text, size_t len, size_t *out) {
    const sharc_tokenizer *t = e->t;
    SHARC_TRY(check_utf8(t, text, len));
    if (!t->nfc) {
        *out = len;
        return SHARC_OK;
    }
    size_t total = 0, start = 0, pos = 0;
    for (;;) {
        size_t l = 0;
        int32_t id = -1;
        while (pos < len && (t->first_start[(unsigned char)text[pos]] == t->first_start[(unsigned char)text[pos] + 1] ||
                             (id = added_at(t, text, len, pos, &l)) < 0))
            pos++;
        const char *p = NULL;
        size_t pn = 0;
        char *owned;
        SHARC_TRY(nfc(text + start, pos - start, &p, &pn, &owned));
        free(owned);
        total += pn;
        if (pos >= len) break;
        total += l;
        pos += l;
        start = pos;
        id = -1;
    }
    *out = total;
    return SHARC_OK;
}

/* ------------------------------------------------------------ whole texts */

#define CHUNK_BYTES (1u << 20)

/* The first safe cut at or after `from` (note [safe-cuts]), or len. */
static size_t next_cut(const char *s, size_t len, size_t from) {
    for (size_t p = from < 2 ? 2 : from; p < len; p++) {
        unsigned char c = (unsigned char)s[p], b = (unsigned char)s[p - 2];
        if (s[p - 1] == '\n' && ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') && b > 0x20 && b < 0x7F) return p;
    }
    return len;
}

sharc_status sharc_tokenizer_encode_text(const sharc_tokenizer *t, const char *text, size_t len, int threads,
                                         sharc_status (*emit)(sharc_ids *ids, size_t done, size_t total, void *ctx),
                                         void *ctx, sharc_ids *out) {
    SHARC_TRY(check_utf8(t, text, len));
    if (threads <= 0) threads = omp_get_max_threads();
    if (!t->chunk_safe || threads == 1 || len < 2 * CHUNK_BYTES) {
        sharc_encoder *e;
        SHARC_TRY(sharc_encoder_init(&e, t));
        sharc_status st = encode_valid(e, text, len, out);
        sharc_encoder_free(e);
        if (emit && st == SHARC_OK) st = emit(out, len, len, ctx);
        return st;
    }
    /* cut points */
    size_t ncut = 0, cap = len / CHUNK_BYTES + 2;
    size_t *cut = malloc(sizeof(size_t) * (cap + 1));
    if (!cut) return sharc_error(SHARC_ERR_NOMEM, "tokenizer: out of memory");
    cut[ncut++] = 0;
    for (size_t p = CHUNK_BYTES; p < len && ncut < cap;) {
        size_t c = next_cut(text, len, p);
        if (c >= len) break;
        cut[ncut++] = c;
        p = c + CHUNK_BYTES;
    }
    cut[ncut] = len;
    const size_t nchunks = ncut;
    /* batches of a few chunks per thread: ids of one batch in memory at a time */
    const size_t batch = (size_t)threads * 4;
    sharc_ids *part = calloc(batch, sizeof(sharc_ids));
    sharc_status *pst = calloc(batch, sizeof(sharc_status));
    char(*msg)[512] = calloc(batch, sizeof *msg);
    sharc_status st = part && pst && msg ? SHARC_OK : sharc_error(SHARC_ERR_NOMEM, "tokenizer: out of memory");
    for (size_t b0 = 0; b0 < nchunks && st == SHARC_OK; b0 += batch) {
        size_t nb = nchunks - b0 < batch ? nchunks - b0 : batch;
#pragma omp parallel num_threads(threads)
        {
            sharc_encoder *e = NULL;
            sharc_status est = sharc_encoder_init(&e, t);
#pragma omp for schedule(dynamic, 1)
            for (size_t k = 0; k < nb; k++) {
                size_t c = b0 + k;
                part[k].n = 0;
                pst[k] = est == SHARC_OK ? encode_valid(e, text + cut[c], cut[c + 1] - cut[c], &part[k]) : est;
                if (pst[k] != SHARC_OK) snprintf(msg[k], sizeof msg[k], "%s", sharc_last_error());
            }
            sharc_encoder_free(e);
        }
        for (size_t k = 0; k < nb && st == SHARC_OK; k++) {
            if (pst[k] != SHARC_OK) {
                st = sharc_error(pst[k], "%s", msg[k]);
                break;
            }
            st = sharc_ids_reserve(out, out->n + part[k].n);
            if (st == SHARC_OK) {
                memcpy(out->ids + out->n, part[k].ids, part[k].n * sizeof(int32_t));
                out->n += part[k].n;
            }
        }
        if (emit && st == SHARC_OK) st = emit(out, cut[b0 + nb], len, ctx);
    }
    for (size_t k = 0; part && k < batch; k++) sharc_ids_free(&part[k]);
    free(part);
    free(pst);
    free(msg);
    free(cut);
    return st;
}
