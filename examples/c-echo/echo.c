/* The C echo bot: replies "echo: <text>" to every text message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "botrun.h"

int botrun_handle(botrun_ctx *ctx) {
  if (!*ctx->event.text) return 0;
  size_t n = strlen(ctx->event.text) + 7;
  char *reply = malloc(n);
  snprintf(reply, n, "echo: %s", ctx->event.text);
  int rc = botrun_reply(ctx, reply, NULL);
  free(reply);
  return rc;
}
