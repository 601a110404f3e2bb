/* The C flow bot: "/signup" asks two questions, greets the user between them
 * and thanks them at the end; the conversation survives a restart, and the
 * greeting goes out once. Other messages are echoed. */
#include <stdio.h>
#include <string.h>

#include "botrun.h"

static int signup(botrun_flow *f) {
  const char *name, *city;
  int rc = botrun_ask(f, "What is your name?", &name);
  if (rc) return rc;
  char q[512];
  snprintf(q, sizeof q, "Nice to meet you, %s!", name);
  if ((rc = botrun_reply(f->ctx, q, NULL))) return rc;
  snprintf(q, sizeof q, "Which city do you live in, %s?", name);
  if ((rc = botrun_ask(f, q, &city))) return rc;
  snprintf(q, sizeof q, "Thanks %s from %s!", name, city);
  return botrun_reply(f->ctx, q, NULL);
}

static const char *const names[] = {"signup"};
static const botrun_flow_fn fns[] = {signup};

int botrun_handle(botrun_ctx *ctx) {
  if (!strcmp(ctx->event.text, "/signup")) return botrun_flow_start(ctx, "signup", signup);
  int in_flow, rc = botrun_flow_continue(ctx, names, fns, 1, &in_flow);
  if (in_flow || rc) return rc;
  char reply[4200];
  snprintf(reply, sizeof reply, "echo: %s", ctx->event.text);
  return botrun_reply(ctx, reply, NULL);
}
