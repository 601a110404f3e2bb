/* The C echo bot: replies "echo: <text>" to every text message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "botrun.h"

int botrun_handle(botrun_ctx *ctx) {
  if (!*ctx->event.text) {
    /* Media without a caption: send it back, named. */
    if (ctx->event.nmedia == 0) return 0;
    const botrun_media *m = &ctx->event.media[0];
    char reply[256];
    snprintf(reply, sizeof reply, "echo: [%s]", m->type ? m->type : "?");
    botrun_media back = {.type = m->type, .ref = m->ref};
    return botrun_send_media(ctx, ctx->event.chat, reply, &back, NULL, NULL);
  }
  size_t n = strlen(ctx->event.text) + 7;
  char *reply = malloc(n);
  snprintf(reply, n, "echo: %s", ctx->event.text);
  int rc = botrun_reply(ctx, reply, NULL);
  free(reply);
  return rc;
}
