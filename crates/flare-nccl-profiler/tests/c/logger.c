/*
 * Stands in for NCCL's ncclDebugLog (a printf-like variadic function, which stable Rust
 * cannot define): appends each message to the file named by FLARE_TEST_LOG. The test
 * harness builds it as a shared library and passes it to the plugin's init as logfn.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void flare_test_logger(int level, unsigned long flags, const char* file, int line,
                       const char* fmt, ...) {
  const char* path = getenv("FLARE_TEST_LOG");
  if (path == NULL) return;
  FILE* f = fopen(path, "a");
  if (f == NULL) return;
  fprintf(f, "level=%d flags=%lu %s:%d ", level, flags, file ? file : "?", line);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fclose(f);
}
