/*
 * fillwin_priv.h: what fillwin.c, the memory stage of a fill (a run's window and the cache
 * writer behind it), offers fill.c and the files above it.
 */
#ifndef S3C_CACHE_FILLWIN_PRIV_H
#define S3C_CACHE_FILLWIN_PRIV_H

#include "cache_priv.h"

/* fillwin.c: fills through a window (window.h) and the cache writer */
int fillwin_open(struct cache *c, struct errmsg *em); /* the pool and the writer's threads */
void fillwin_close(struct cache *c);                  /* after every run ended */
/* Whether @f runs through a window; creates it (mu held, in the run, before the backend). */
int fillwin_begin_locked(struct fetch *f);
/* be_sink.on_data of a windowed run. */
int fillwin_on_data(void *cls, const void *buf, size_t len);
/* The backend call of windowed run @f ended with @rc: 1 when the writer ends the run (the
 * caller must not touch @f again), 0 when the caller ends it now (fill_end_run). */
int fillwin_received(struct fetch *f, int rc);
/* At the end of a windowed run: syncs and marks present the blocks written whole; *@unsynced
 * the sync's error when none could be (bytes served, not cached). Counts what was dropped. */
int fillwin_complete(struct fetch *f, int *unsynced);
/* The fetching bits of windowed run @f that are still its own are cleared (mu held). */
void fillwin_clear_fetching_locked(struct fetch *f);
/* A reader of @v at @pos: the fetch whose window holds the byte (copy it with
 * fillwin_copy()), else NULL (mu held). */
struct fetch *fillwin_find_locked(struct cver *v, uint64_t pos, const unsigned char **mem,
                                  size_t *avail);
/* Copies @n bytes from @mem (found by fillwin_find_locked at @pos) into @buf without the lock:
 * 1 when the copy is good, 0 when the window let the bytes go meanwhile (read again), 2 when
 * the copy is good but @f ended meanwhile and this was its last copier: @f is freed (the
 * caller must not touch it again). Called and returns with mu held. */
int fillwin_copy(struct fetch *f, uint64_t pos, const unsigned char *mem, void *buf, size_t n);
/* A reader waits for bytes of @f past what it received (mu held): the run's window is one a
 * reader reads (window_wanted), even before the reader could attach. */
void fillwin_starved_locked(struct fetch *f);
/* Reader @o reads windowed run @f at @pos (copies from its window, reads what its writer wrote,
 * or waits for it): the run keeps every byte from @pos on for it (mu held). */
void fillwin_attach_locked(struct cache_obj *o, struct fetch *f, uint64_t pos);
/* Reader @o reads at @pos next: it leaves its run when @pos is outside the run's range, else
 * the run may let go of what lies behind @pos (mu held). */
void fillwin_reader_at_locked(struct cache_obj *o, uint64_t pos);
/* Reader @o is gone (mu held). */
/* @v's last reader left: its runs no reader is attached to (read-ahead) keep nothing for
 * readers any more: they go on at the backend's pace, the writer behind them, and what the disk
 * cannot take is dropped (uncached), as for a run whose readers left. */
void fillwin_orphan_locked(struct cache *c, struct cver *v);
void fillwin_detach_locked(struct cache_obj *o);
/* @v has no reader left but @self: its ended windows go back to the pool (mu held). */
void fillwin_idle_locked(struct cache *c, struct cver *v);

#endif
