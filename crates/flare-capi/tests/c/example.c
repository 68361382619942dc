/*
 * A C program using Flare's tracer through include/flare.h, as an application would.
 * tests/c_example.rs builds it against libflare.so and libflare.a, runs it with
 * FLARE_SHM_DIR, FLARE_DUMP, RANK and WORLD_SIZE set, and checks the dump it leaves.
 * It exits 0 when every call returned what the header promises.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flare.h"

static int failures = 0;

#define CHECK(cond)                                                         \
  do {                                                                      \
    if (!(cond)) {                                                          \
      char err_[512];                                                       \
      flare_last_error(err_, sizeof err_);                                  \
      fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: %s\n",          \
              __FILE__, __LINE__, #cond, err_);                             \
      failures++;                                                           \
    }                                                                       \
  } while (0)

/* The calling thread's last error contains `needle`. */
static int last_error_has(const char* needle) {
  char buf[512];
  size_t n = flare_last_error(buf, sizeof buf);
  return n > 0 && n < sizeof buf && strstr(buf, needle) != NULL;
}

int main(void) {
  CHECK(flare_abi_version() == FLARE_ABI_VERSION);

  /* Before init: recording is refused, names are not interned. */
  CHECK(!flare_is_initialized());
  CHECK(flare_span_begin(1, FLARE_KIND_COMPUTE, NULL) == FLARE_ERR_NOT_INITIALIZED);
  CHECK(flare_intern("early") == FLARE_NAME_NONE);
  CHECK(last_error_has("not initialized"));

  /* Bad configurations fail with a code and a message, and leave no tracer behind. */
  flare_config_t cfg;
  CHECK(flare_config_default(&cfg) == FLARE_OK);
  CHECK(cfg.rank == -1 && cfg.world_size == -1 && cfg.job_id == NULL);
  cfg.rank = 9;
  cfg.world_size = 4;
  CHECK(flare_init(&cfg) == FLARE_ERR_CONFIG);
  CHECK(last_error_has("outside a world of 4"));
  cfg.rank = -5;
  CHECK(flare_init(&cfg) == FLARE_ERR_INVALID_ARGUMENT);
  CHECK(last_error_has("rank = -5"));
  CHECK(flare_config_default(NULL) == FLARE_ERR_INVALID_ARGUMENT);
  CHECK(!flare_is_initialized());

  /* The real init: job id set here, identity from RANK / WORLD_SIZE, paths from FLARE_*. */
  CHECK(flare_config_default(&cfg) == FLARE_OK);
  cfg.job_id = "capi-example";
  cfg.ring_events = 1024;
  if (flare_init(&cfg) != FLARE_OK) {
    char buf[512];
    flare_last_error(buf, sizeof buf);
    fprintf(stderr, "flare_init failed: %s\n", buf);
    return 2;
  }
  CHECK(flare_is_initialized());
  CHECK(flare_init(&cfg) == FLARE_OK); /* same identity again: a no-op */

  char path[4096];
  size_t plen = flare_ring_path(path, sizeof path);
  CHECK(plen > 0 && plen < sizeof path && strstr(path, "flare-capi-example-r") != NULL);

  uint32_t forward = flare_intern("forward");
  uint32_t all_reduce = flare_intern("all_reduce");
  uint32_t dp = flare_intern("dp0");
  uint32_t loss = flare_intern("loss");
  uint32_t prefetch = flare_intern("prefetch");
  uint32_t saved = flare_intern("checkpoint_saved");
  CHECK(forward != FLARE_NAME_NONE && all_reduce != FLARE_NAME_NONE);
  CHECK(flare_intern("forward") == forward);

  /* Bad input is refused without recording anything. */
  CHECK(flare_intern(NULL) == FLARE_NAME_NONE);
  CHECK(last_error_has("name is NULL"));
  CHECK(flare_intern("bad \xff utf8") == FLARE_NAME_NONE);
  CHECK(last_error_has("UTF-8"));
  CHECK(flare_span_begin(forward, 99, NULL) == FLARE_ERR_INVALID_ARGUMENT);
  CHECK(flare_span_end(forward, 200) == FLARE_ERR_INVALID_ARGUMENT);
  CHECK(flare_record(NULL) == FLARE_ERR_INVALID_ARGUMENT);
  flare_event_t bad_tag = {0};
  bad_tag.tag = 42;
  CHECK(flare_record(&bad_tag) == FLARE_ERR_INVALID_ARGUMENT);
  CHECK(flare_stats(NULL) == FLARE_ERR_INVALID_ARGUMENT);

  /* Three iterations of forward { all_reduce }, with a loss counter. */
  for (uint32_t i = 0; i < 3; i++) {
    CHECK(flare_step(i) == FLARE_OK);
    CHECK(flare_span_begin(forward, FLARE_KIND_COMPUTE, NULL) == FLARE_OK);
    flare_span_args_t args = {0};
    args.amount = 1u << 20;
    args.group = dp;
    args.seq = i;
    args.group_size = 4;
    CHECK(flare_span_begin(all_reduce, FLARE_KIND_ALL_REDUCE, &args) == FLARE_OK);
    CHECK(flare_span_end(all_reduce, FLARE_KIND_ALL_REDUCE) == FLARE_OK);
    CHECK(flare_span_end(forward, FLARE_KIND_COMPUTE) == FLARE_OK);
    CHECK(flare_counter(loss, 100 - i) == FLARE_OK);
  }

  /* An async span with one progress event, recorded with explicit times. */
  uint64_t t0 = flare_now_ns();
  flare_event_t ev = {0};
  ev.ts_ns = t0;
  ev.name = prefetch;
  ev.tag = FLARE_TAG_ASYNC_BEGIN;
  ev.kind = FLARE_KIND_DATA_LOADER;
  ev.id = 7;
  ev.a = 4096;
  CHECK(flare_record(&ev) == FLARE_OK);
  ev.tag = FLARE_TAG_ASYNC_STATE;
  ev.ts_ns = t0 + 10;
  ev.a = 1;
  CHECK(flare_record(&ev) == FLARE_OK);
  ev.tag = FLARE_TAG_ASYNC_END;
  ev.ts_ns = t0 + 20;
  CHECK(flare_record(&ev) == FLARE_OK);
  CHECK(flare_instant(saved) == FLARE_OK);

  flare_stats_t st;
  CHECK(flare_stats(&st) == FLARE_OK);
  /* 3 x (step + 2 begins + 2 ends + counter) + 3 async + 1 instant */
  CHECK(st.written == 22);
  CHECK(st.dropped_full == 0 && st.dropped_no_ring == 0 && st.rings_in_use == 1);

  CHECK(flare_shutdown() == FLARE_OK);
  CHECK(flare_shutdown() == FLARE_OK); /* the second call is a no-op */
  /* Recording after shutdown is harmless. */
  CHECK(flare_step(99) == FLARE_OK);

  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("ok %" PRIu64 " events\n", st.written);
  return 0;
}
