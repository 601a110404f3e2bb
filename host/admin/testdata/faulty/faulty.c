/* A candidate for the console's dry-run tests that compiles in
 * milliseconds: it echoes like examples/c-echo, and traps on the text
 * "panic" (the Go guest host/wasm/testdata/guests/faulty does the same, but
 * takes tens of seconds to compile under -race). */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "botrun.h"

int botrun_handle(botrun_ctx *ctx) {
  if (strcmp(ctx->event.text, "panic") == 0) __builtin_trap();
  size_t n = strlen(ctx->event.text) + 7;
  char *reply = malloc(n);
  snprintf(reply, n, "echo: %s", ctx->event.text);
  int rc = botrun_reply(ctx, reply, NULL);
  free(reply);
  return rc;
}
