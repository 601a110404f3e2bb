/* The C echo bot: replies "echo: <text>" to every text message, and to a
 * photo without a caption "echo: [image, N bytes]" with the photo sent back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "botrun.h"

int botrun_handle(botrun_ctx *ctx) {
  if (!*ctx->event.text) {
    /* Media without a caption: load it, say how big it is, send it back. */
    if (ctx->event.nmedia == 0) return 0;
    const botrun_media *m = &ctx->event.media[0];
    const char *type = m->type ? m->type : "?";
    char reply[256];
    unsigned char *data;
    size_t len;
    botrun_media_unavailable why;
    int rc = botrun_media_load(0, &data, &len, &why);
    if (rc == 0) {
      snprintf(reply, sizeof reply, "echo: [%s, %zu bytes]", type, len);
      free(data);
    } else if (rc == BOTRUN_MEDIA_UNAVAILABLE) {
      snprintf(reply, sizeof reply, "echo: [%s, unavailable: %s]", type, why.reason);
    } else if (rc == BOTRUN_UNSUPPORTED) {
      snprintf(reply, sizeof reply, "echo: [%s]", type);
    } else {
      return rc;
    }
    botrun_media back = {.type = m->type, .ref = m->ref};
    /* The ref is empty when the reference did not survive a restart. */
    return botrun_send_media(ctx, ctx->event.chat, reply, m->ref && *m->ref ? &back : NULL, NULL, NULL);
  }
  size_t n = strlen(ctx->event.text) + 7;
  char *reply = malloc(n);
  snprintf(reply, n, "echo: %s", ctx->event.text);
  int rc = botrun_reply(ctx, reply, NULL);
  free(reply);
  return rc;
}
