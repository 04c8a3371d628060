/* ckpt.c: sharc_ckpt_*, the checkpoint manager: one per run, it ties the
 * range plan of this rank's shards, the writer, the manifest and the commit
 * protocol into save (every ckpt.every steps and at the end), wait, resume
 * (a path, or auto with fallback) and tidy. Every call is collective over
 * the world and agreed (note [agreement]). The other files of src/ckpt/
 * are listed in internal.h.
 *
 * Note [ckpt-node-local]. ckpt.dir may be a path every host sees (a shared
 * filesystem) or one that is local to each host (its own disk at the same
 * path). When rank 0 has made step-N.tmp it writes a token (host, pid,
 * step, time) into it and broadcasts the token; one rank per host (its
 * lowest), host after host, reads the token through its own view of the
 * path: a host that does not find it has its own disk there and makes its
 * own step-N.tmp (removing a stale one) with the token in it, so a later
 * host sharing that disk finds it. Every rank then writes its file into its
 * host's directory. At publication rank 0 broadcasts the manifest to those
 * hosts and each publishes its own directory as rank 0 does (manifest,
 * rename, latest, prune). Each host's step-N then holds the manifest and the
 * files its ranks wrote; together they are the checkpoint. A resume at the
 * same placement reads only files of its own host where every host writes
 * (FULL_SHARD, one rank per shard file); any other resume needs the files
 * gathered into one directory (or a shared filesystem). */
#include "internal.h"
#include "sharc/clock.h"
#include "sharc/fault.h"
#include "sharc/activity.h"
#include "sharc/alloc.h"
#include "sharc/config.h"
#include "sharc/fileio.h"
#include "sharc/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ helpers */

/* Note [agreement]: every rank gets the same verdict. */
static sharc_status agree(sharc_comm *world, sharc_status local) {
    return sharc_comm_agree(world, local, SHARC_ERR_IO, "ckpt: rank %d failed (see its message)");
}

sharc_status sharc_ckpt_init(sharc_ckpt **out, const sharc_ckpt_state *state) {
    *out = NULL;
    sharc_ckpt *c = calloc(1, sizeof *c);
    sharc_status st = c ? SHARC_OK : sharc_error(SHARC_ERR_NOMEM, "ckpt: out of memory");
    if (st == SHARC_OK) {
        const sharc_config *cfg = state->cfg;
        c->s = *state;
        c->keep = cfg->ckpt.keep < 1 ? 1 : cfg->ckpt.keep;
        c->async = cfg->ckpt.async;
        c->done_step = -1;
        if (cfg->ckpt.dir[0]) snprintf(c->dir, sizeof c->dir, "%s", cfg->ckpt.dir);
        else snprintf(c->dir, sizeof c->dir, "%.1000s/checkpoints", cfg->train.out_dir);
        c->writes = state->mesh->replicate_rank == 0;
        st = sharc_ckpt_plan_init(&c->plan, state->engine);
    }
    st = agree(state->world, st);
    sharc_comm *world = state->world;
    if (st == SHARC_OK) { /* note [ckpt-node-local]: the hosts, numbered by their lowest rank */
        st = sharc_comm_split_node(world, &c->node);
        int32_t lead = st == SHARC_OK && sharc_comm_rank(c->node) == 0, *leads = NULL;
        const int R = sharc_comm_size(world);
        if (st == SHARC_OK)
            st = (leads = calloc((size_t)R, sizeof *leads)) ? SHARC_OK
                                                            : sharc_error(SHARC_ERR_NOMEM, "ckpt: out of memory");
        st = agree(world, st);
        if (st == SHARC_OK) st = sharc_comm_all_gather(world, &lead, leads, 1, SHARC_DT_I32);
        for (int r = 0; r < R && st == SHARC_OK; r++) {
            if (r < sharc_comm_rank(world) && leads[r]) c->host_index++;
            c->hosts += leads[r];
        }
        free(leads);
    }
    if (st != SHARC_OK) {
        sharc_ckpt_free(c);
        return st;
    }
    *out = c;
    return SHARC_OK;
}

void sharc_ckpt_free(sharc_ckpt *c) {
    if (!c) return;
    sharc_ckpt_writer_free(&c->w);
    sharc_ckpt_plan_free(&c->plan);
    sharc_comm_free(c->node);
    free(c);
}

const char *sharc_ckpt_last_path(const sharc_ckpt *c) { return c->last; }
const char *sharc_ckpt_dir(const sharc_ckpt *c) { return c->dir; }

int sharc_ckpt_count(const char *dir, int64_t *newest) {
    int64_t *steps;
    int n = sharc_ckpt_commit_list(dir, &steps);
    if (newest) *newest = n > 0 ? steps[0] : -1;
    free(steps);
    return n;
}

sharc_status sharc_ckpt_tidy(sharc_ckpt *c) {
    if (c->done_step < 0) return sharc_ckpt_commit_clean(c->dir);
    /* a run resumed at train.max_steps saves nothing, so no save would
     * prune what an earlier ckpt.keep left (note [ckpt-leftovers]) */
    return sharc_ckpt_commit_prune(c->dir, c->done_step, c->keep, false);
}

sharc_status sharc_ckpt_remove_all(const char *dir) {
    SHARC_TRY(sharc_ckpt_commit_prune(dir, -1, 0, false));
    char p[PATHLEN + 16];
    snprintf(p, sizeof p, "%s/latest", dir);
    if (unlink(p) != 0 && errno != ENOENT)
        return sharc_error(SHARC_ERR_IO, "ckpt: cannot remove '%s': %s", p, strerror(errno));
    return SHARC_OK;
}

/* Every rank's header, ranges and chunk crcs, all-gathered into *w (its
 * arrays malloc'd). Collective and agreed. */
static sharc_status exchange(sharc_ckpt *c, sharc_ckpt_written *w) {
    sharc_comm *world = c->s.world;
    const sharc_ckpt_job *j = &c->w.job;
    const sharc_ckpt_plan *p = &c->plan;
    const int R = sharc_comm_size(world);
    memset(w, 0, sizeof *w);
    w->R = R;
    int64_t mine[6] = {c->writes,
                       (int64_t)c->s.mesh->shard_rank * c->s.mesh->tp + c->s.mesh->tp_rank,
                       c->writes ? p->nrecs : 0,
                       c->writes ? j->nchunks : 0,
                       c->writes ? j->bytes : 0,
                       c->writes ? j->crc : 0};
    int64_t *hdr = malloc(sizeof(int64_t) * 6 * (size_t)R);
    w->hdr = hdr;
    w->maxrec = w->maxchunk = 1;
    sharc_status st = hdr ? SHARC_OK : sharc_error(SHARC_ERR_NOMEM, "ckpt: out of memory");
    st = agree(world, st);
    if (st == SHARC_OK) st = sharc_comm_all_gather(world, mine, hdr, 6, SHARC_DT_I64);
    for (int r = 0; r < R && st == SHARC_OK; r++) {
        w->maxrec = hdr[6 * r + 2] > w->maxrec ? hdr[6 * r + 2] : w->maxrec;
        w->maxchunk = hdr[6 * r + 3] > w->maxchunk ? hdr[6 * r + 3] : w->maxchunk;
    }
    if (st != SHARC_OK) return st;
    int64_t *myrec = calloc((size_t)w->maxrec * 4, sizeof(int64_t));
    int64_t *allrec = calloc((size_t)w->maxrec * 4 * (size_t)R, sizeof(int64_t));
    int64_t *mychunk = calloc((size_t)w->maxchunk, sizeof(int64_t));
    int64_t *allchunk = calloc((size_t)w->maxchunk * (size_t)R, sizeof(int64_t));
    w->recs = allrec;
    w->chunks = allchunk;
    st = myrec && allrec && mychunk && allchunk ? SHARC_OK : sharc_error(SHARC_ERR_NOMEM, "ckpt: out of memory");
    for (int k = 0; k < mine[2] && st == SHARC_OK; k++) {
        myrec[4 * k] = p->recs[k].gp;
        myrec[4 * k + 1] = p->recs[k].begin;
        myrec[4 * k + 2] = p->recs[k].end;
        myrec[4 * k + 3] = p->recs[k].offset;
    }
    for (int64_t k = 0; k < mine[3] && st == SHARC_OK; k++) mychunk[k] = j->chunk_crc[k];
    st = agree(world, st);
    if (st == SHARC_OK) st = sharc_comm_all_gather(world, myrec, allrec, (size_t)w->maxrec * 4, SHARC_DT_I64);
    if (st == SHARC_OK) st = sharc_comm_all_gather(world, mychunk, allchunk, (size_t)w->maxchunk, SHARC_DT_I64);
    free(myrec);
    free(mychunk);
    return st;
}

static void written_free(sharc_ckpt_written *w) {
    free((void *)w->hdr);
    free((void *)w->recs);
    free((void *)w->chunks);
    memset(w, 0, sizeof *w);
}

/* Rank 0's text (NULL: none) to every rank, which gets a copy (NULL if rank 0
 * had none). Collective. */
static sharc_status bcast_text(sharc_comm *w, char **text) {
    int64_t n = sharc_comm_rank(w) == 0 ? (*text ? (int64_t)strlen(*text) + 1 : 0) : 0;
    SHARC_TRY(sharc_comm_broadcast(w, &n, 1, SHARC_DT_I64, 0));
    if (sharc_comm_rank(w) != 0) *text = n ? malloc((size_t)n) : NULL;
    int32_t ok = n == 0 || *text != NULL;
    SHARC_TRY(sharc_comm_all_reduce(w, &ok, &ok, 1, SHARC_DT_I32, SHARC_REDUCE_OP_MIN));
    if (!ok) return sharc_error(SHARC_ERR_NOMEM, "ckpt: out of memory for the manifest");
    if (n) SHARC_TRY(sharc_comm_broadcast(w, *text, (size_t)n, SHARC_DT_U8, 0));
    return SHARC_OK;
}

#define TOKEN_NAME ".sharc-save"

/* Note [ckpt-node-local]: after rank 0 made `tmp` with its token in it, each
 * host in turn checks that it sees the token, else makes its own `tmp`.
 * Sets c->local_dir and c->any_local. Collective. */
static sharc_status check_hosts_see_tmp(sharc_ckpt *c, const char *tmp, int64_t step) {
    char token[128] = {0}, host[64] = {0}, p[PATHLEN + 32];
    snprintf(p, sizeof p, "%s/" TOKEN_NAME, tmp);
    sharc_comm *world = c->s.world;
    const int rank = sharc_comm_rank(world);
    sharc_status st = SHARC_OK;
    if (rank == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        gethostname(host, sizeof host - 1);
        snprintf(token, sizeof token, "%s %d %lld %lld.%09ld\n", host, (int)getpid(), (long long)step,
                 (long long)ts.tv_sec, ts.tv_nsec);
        st = sharc_write_text_atomic(p, token);
    }
    SHARC_TRY(agree(world, st));
    SHARC_TRY(sharc_comm_broadcast(world, token, sizeof token, SHARC_DT_U8, 0));
    c->local_dir = false;
    for (int h = 1; h < c->hosts; h++) { /* host 0 is rank 0's */
        st = SHARC_OK;
        if (h == c->host_index && sharc_comm_rank(c->node) == 0) {
            char seen[128] = {0};
            FILE *f = fopen(p, "r");
            if (f) {
                size_t got = fread(seen, 1, sizeof seen - 1, f);
                seen[got] = 0;
                fclose(f);
            }
            if (strcmp(seen, token) != 0) { /* this host's own disk: its own step-N.tmp */
                c->local_dir = true;
                st = sharc_ckpt_commit_begin(c->dir, step);
                if (st == SHARC_OK) st = sharc_write_text_atomic(p, token);
            }
        }
        SHARC_TRY(agree(world, st));
    }
    int32_t any = c->local_dir;
    SHARC_TRY(sharc_comm_all_reduce(world, &any, &any, 1, SHARC_DT_I32, SHARC_REDUCE_OP_MAX));
    c->any_local = any != 0;
    /* every host has checked: the token goes (it is no part of the checkpoint) */
    if (rank == 0 || c->local_dir) unlink(p);
    return SHARC_OK;
}

/* Note [ckpt-async]: the second half of a save, on the main thread: wait for
 * the file, agree, exchange ranges and checksums, rank 0 publishes. */
static sharc_status finish(sharc_ckpt *c) {
    if (!c->pending) return SHARC_OK;
    sharc_ckpt_writer_join(&c->w);
    const int64_t step = c->pending_step;
    c->pending = false;
    sharc_fault_at("ckpt:after-shards", step);
    sharc_status st = c->writes ? c->w.job.st : SHARC_OK;
    if (st != SHARC_OK) sharc_error(st, "%s", c->w.job.err);
    st = agree(c->s.world, st);
    const int rank = sharc_comm_rank(c->s.world);
    char tmp[PATHLEN];
    sharc_ckpt_commit_step_path(tmp, sizeof tmp, c->dir, step, ".tmp");
    if (st != SHARC_OK) {
        if (rank == 0 || c->local_dir) sharc_ckpt_commit_remove_tree(tmp);
        return st;
    }
    sharc_ckpt_written w;
    st = exchange(c, &w);
    sharc_status pub = SHARC_OK;
    int64_t total = 0;
    for (int r = 0; r < w.R && st == SHARC_OK; r++) total += w.hdr[6 * r + 4];
    if (st == SHARC_OK && rank == 0) {
        char *text = sharc_ckpt_manifest_build(&c->s, &c->plan, step, c->pending_adam_step, &w);
        pub = text ? sharc_ckpt_commit_publish(c->dir, step, c->keep, text)
                   : sharc_error(SHARC_ERR_NOMEM, "ckpt: cannot build the manifest");
        if (c->any_local) st = bcast_text(c->s.world, &text);
        free(text);
        if (pub != SHARC_OK) sharc_ckpt_commit_remove_tree(tmp);
    } else if (st == SHARC_OK && c->any_local) { /* note [ckpt-node-local]: hosts with their own directory */
        char *text = NULL;
        st = bcast_text(c->s.world, &text);
        if (st == SHARC_OK && c->local_dir) {
            pub = text ? sharc_ckpt_commit_publish(c->dir, step, c->keep, text)
                       : sharc_error(SHARC_ERR_NOMEM, "ckpt: rank 0 could not build the manifest");
            if (pub != SHARC_OK) sharc_ckpt_commit_remove_tree(tmp);
        }
        free(text);
    }
    written_free(&w);
    if (st != SHARC_OK) return st;
    st = agree(c->s.world, pub);
    if (st == SHARC_OK) {
        c->done_step = step;
        sharc_ckpt_commit_step_path(c->last, sizeof c->last, c->dir, step, "");
        if (rank == 0) {
            if (c->async)
                sharc_info("ckpt: saved step %lld to %s (%.1f MB; training paused %.3f s to stage it, published %.3f s "
                           "after the start)",
                           (long long)step, c->last, (double)total / 1e6, c->t_staged - c->t_start,
                           sharc_clock_now() - c->t_start);
            else
                sharc_info("ckpt: saved step %lld to %s (%.1f MB in %.3f s)", (long long)step, c->last,
                           (double)total / 1e6, sharc_clock_now() - c->t_start);
        }
    }
    return st;
}

sharc_status sharc_ckpt_wait(sharc_ckpt *c) { return finish(c); }

sharc_status sharc_ckpt_save(sharc_ckpt *c, int64_t step) {
    SHARC_TRY(finish(c));
    if (step == c->done_step) return SHARC_OK;
    c->t_start = sharc_clock_now();
    SHARC_TRY(agree(c->s.world, sharc_comm_rank(c->s.world) == 0 ? sharc_ckpt_commit_begin(c->dir, step) : SHARC_OK));
    char tmp0[PATHLEN];
    sharc_ckpt_commit_step_path(tmp0, sizeof tmp0, c->dir, step, ".tmp");
    SHARC_TRY(check_hosts_see_tmp(c, tmp0, step));
    c->pending = true;
    c->pending_step = step;
    c->pending_adam_step = sharc_adamw_steps(c->s.optim);
    if (c->writes) {
        char tmp[PATHLEN], path[PATHLEN + 64];
        sharc_ckpt_commit_step_path(tmp, sizeof tmp, c->dir, step, ".tmp");
        const sharc_mesh *ms = c->s.mesh; /* note [ckpt-layout]: one file per shard and tp rank */
        snprintf(path, sizeof path, "%s/shard-%05d-of-%05d.bin", tmp, ms->shard_rank * ms->tp + ms->tp_rank,
                 ms->dp_shard * ms->tp);
        sharc_ckpt_writer_start(&c->w, &c->plan, c->s.engine, c->s.optim, path, c->async);
    }
    c->t_staged = sharc_clock_now();
    return c->async ? SHARC_OK : finish(c);
}

/* ------------------------------------------------------------- loading */

/* This rank's part of a checkpoint, read into the live shards and moments. */
static sharc_status load_local(sharc_ckpt *c, const char *step_dir, sharc_ckpt_manifest *m) {
    SHARC_TRY(sharc_ckpt_manifest_read(m, step_dir));
    SHARC_TRY(sharc_ckpt_manifest_check_model(m, &c->s.cfg->model, false));
    SHARC_TRY(sharc_ckpt_manifest_check_frozen(m, c->s.engine));
    return sharc_ckpt_shard_read(m, c->s.engine, c->s.optim);
}

/* Load one step directory and agree; on success AdamW's step count is the
 * checkpoint's and c->done_step its step. `warn`: report this rank's
 * failure as a warning (auto resume falls back). */
static sharc_status load_dir(sharc_ckpt *c, const char *step_dir, bool warn) {
    sharc_ckpt_manifest m;
    double t0 = sharc_clock_now();
    /* on every rank, whatever happens: the shards may be written (the write bracket of sharc/fsdp.h) */
    sharc_fsdp_shard_write_begin(c->s.engine);
    sharc_status st = load_local(c, step_dir, &m);
    sharc_fsdp_shard_write_end(c->s.engine);
    if (st != SHARC_OK && warn) sharc_warn("%s", sharc_last_error());
    sharc_status agreed = agree(c->s.world, st);
    if (agreed == SHARC_OK) {
        sharc_adamw_set_steps(c->s.optim, m.adam_step);
        c->done_step = m.step;
        snprintf(c->last, sizeof c->last, "%s", step_dir);
        const sharc_config *cfg = c->s.cfg;
        /* data streams: the sp and tp ranks of a group share one (note [mesh-fsdp]) */
        int64_t G = (int64_t)cfg->train.batch_size * cfg->train.grad_accum * c->s.mesh->dp, v = 0;
        if (sharc_comm_rank(c->s.world) == 0) {
            sharc_info("ckpt: resumed from %s at step %lld (written by %lld ranks, %s; loaded in %.3f s)", step_dir,
                       (long long)m.step, (long long)m.world_size, m.strategy, sharc_clock_now() - t0);
            if (sharc_ckpt_manifest_get_i64(&m, m.train, "sequences_per_step", &v) == SHARC_OK && v != G)
                sharc_warn("ckpt: the checkpoint ran %lld sequences per step, this run %lld: the data order differs "
                           "from an uninterrupted run",
                           (long long)v, (long long)G);
            if (sharc_ckpt_manifest_get_i64(&m, m.train, "data_seed", &v) == SHARC_OK && (uint64_t)v != cfg->data.seed)
                sharc_warn("ckpt: data.seed %lld in the checkpoint, %llu in this run", (long long)v,
                           (unsigned long long)cfg->data.seed);
        }
    }
    sharc_ckpt_manifest_free(&m);
    return agreed;
}

/* Rank 0 decides, everyone hears: a path broadcast as int32 words. */
static sharc_status bcast_path(sharc_comm *w, char *path /* (PATHLEN) */) {
    int32_t words[PATHLEN / 4];
    memcpy(words, path, sizeof words);
    SHARC_TRY(sharc_comm_broadcast(w, words, PATHLEN / 4, SHARC_DT_I32, 0));
    memcpy(path, words, sizeof words);
    path[PATHLEN - 1] = 0;
    return SHARC_OK;
}

sharc_status sharc_ckpt_resume(sharc_ckpt *c, const char *what, int64_t *loaded_step) {
    if (loaded_step) *loaded_step = -1;
    if (!what || !what[0] || !strcmp(what, "none")) return SHARC_OK;
    SHARC_TRY(finish(c));
    sharc_comm *world = c->s.world;
    const bool lead = sharc_comm_rank(world) == 0, autom = !strcmp(what, "auto");
    const char *dir = autom ? c->dir : what;
    char man[PATHLEN + 32];
    snprintf(man, sizeof man, "%s/" MANIFEST_NAME, what);
    if (!autom &&
        (sharc_ckpt_exists(man) || !sharc_ckpt_is_dir(what))) { /* a step directory (or a bad path: load names it) */
        SHARC_TRY(load_dir(c, what, false));
        if (loaded_step) *loaded_step = c->done_step;
        return SHARC_OK;
    }
    /* candidates, newest first, as rank 0 sees them (a checkpoint whose
     * re-save was interrupted put back first: note [ckpt-leftovers]) */
    if (lead && sharc_ckpt_commit_restore(dir) != SHARC_OK) sharc_warn("%s", sharc_last_error());
    int64_t *steps = NULL;
    int64_t n = lead ? sharc_ckpt_commit_list(dir, &steps) : 0;
    SHARC_TRY(sharc_comm_broadcast(world, &n, 1, SHARC_DT_I64, 0));
    if (!lead && n > 0) steps = calloc((size_t)n, sizeof *steps);
    sharc_status st = agree(world, n > 0 && !steps ? sharc_error(SHARC_ERR_NOMEM, "ckpt: out of memory") : SHARC_OK);
    if (st == SHARC_OK && n > 0) st = sharc_comm_broadcast(world, steps, (size_t)n, SHARC_DT_I64, 0);
    if (st != SHARC_OK) {
        free(steps);
        return st;
    }
    if (n == 0) {
        free(steps);
        if (autom) {
            if (lead) sharc_info("ckpt: no checkpoint in %s to resume from (ckpt.resume=auto)", dir);
            return SHARC_OK;
        }
        return sharc_error(SHARC_ERR_INVALID,
                           "ckpt.resume: '%s' holds no checkpoint (no manifest.json, no step-N "
                           "directory with one)",
                           what);
    }
    char p[PATHLEN];
    st = SHARC_ERR_IO;
    for (int64_t i = 0; i < n; i++) {
        sharc_ckpt_commit_step_path(p, sizeof p, dir, steps[i], "");
        SHARC_TRY(bcast_path(world, p));
        st = load_dir(c, p, autom);
        if (st == SHARC_OK || !autom) break;
        if (lead)
            sharc_warn("ckpt: %s cannot be loaded (see above); %s", p,
                       i + 1 < n ? "falling back to the previous checkpoint" : "no older checkpoint left");
    }
    free(steps);
    if (st != SHARC_OK && autom)
        st = sharc_error(st,
                         "ckpt: no checkpoint in '%s' could be loaded (the reasons are above); remove the "
                         "directory or set ckpt.resume=none to start over",
                         dir);
    if (st == SHARC_OK && loaded_step) *loaded_step = c->done_step;
    return st;
}
