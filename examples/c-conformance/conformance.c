/* The C SDK's conformance guest: every event's text is one command, which it
 * runs through the SDK and whose outcome it posts, as one line, to the chat
 * "report" (examples/CONFORMANCE.md; host/wasm's TestConformance drives it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "botrun.h"

#define MAXARGS 24

/* arg decodes an argument in place or into a new buffer: "-" is "", "@N" N
 * bytes of 'x'. */
static char *arg(char *s) {
  if (!strcmp(s, "-")) return "";
  if (s[0] == '@') {
    size_t n = (size_t)atol(s + 1);
    char *b = malloc(n + 1);
    memset(b, 'x', n);
    b[n] = 0;
    return b;
  }
  return s;
}

static char out[1200];

static void failure(int rc) { snprintf(out, sizeof out, "err %s", botrun_code_name(rc)); }

static void send_outcome(int rc, const botrun_send_result *r) {
  if (rc == BOTRUN_NOT_SENT)
    snprintf(out, sizeof out, "not-sent %s key=%s ref=%s error=%s", r->status, r->key, r->ref, r->error);
  else if (rc)
    failure(rc);
  else
    snprintf(out, sizeof out, "%s key=%s ref=%s error=%s", r->status, r->key, r->ref, r->error);
}

/* send_fn is the send function FN of buttons and list: send, post or enqueue. */
typedef int (*send_ex_fn)(botrun_ctx *, const char *, const char *, const botrun_send_opts *, botrun_send_result *);
static send_ex_fn send_fn(const char *fn) {
  if (!strcmp(fn, "send")) return botrun_send_ex;
  if (!strcmp(fn, "enqueue")) return botrun_enqueue_ex;
  return botrun_post_ex;
}

/* button decodes a button SPEC in place: "id:ID:TITLE" (a reply button) or
 * "url:TITLE:URL" (a URL button). */
static botrun_button button(char *spec) {
  botrun_button b = {0};
  char *a = strchr(spec, ':');
  char *c = a ? strchr(a + 1, ':') : NULL;
  if (!a || !c) return b;
  *a++ = 0;
  *c++ = 0;
  if (!strcmp(spec, "url")) b.title = arg(a), b.url = arg(c);
  else b.id = arg(a), b.title = arg(c);
  return b;
}

/* section decodes a list SECTION in place: "TITLE/ROW/ROW...", each ROW
 * "ID:TITLE[:DESCRIPTION]"; rows holds room for MAXARGS rows. */
static botrun_list_section section(char *spec, botrun_list_row *rows) {
  botrun_list_section sec = {0};
  char *slash = strchr(spec, '/');
  if (slash) *slash = 0;
  sec.title = arg(spec);
  sec.rows = rows;
  for (char *r = slash ? slash + 1 : NULL; r && sec.nrows < MAXARGS;) {
    char *next = strchr(r, '/');
    if (next) *next++ = 0;
    botrun_list_row row = {0};
    char *t = strchr(r, ':');
    if (t) {
      *t++ = 0;
      char *d = strchr(t, ':');
      if (d) *d++ = 0, row.description = arg(d);
      row.title = arg(t);
    }
    row.id = arg(r);
    rows[sec.nrows++] = row;
    r = next;
  }
  return sec;
}

static int signup(botrun_flow *f) {
  const char *name, *city;
  int rc = botrun_ask(f, "name?", &name);
  if (rc) return rc;
  char q[512];
  snprintf(q, sizeof q, "hi %s", name);
  if ((rc = botrun_reply(f->ctx, q, NULL))) return rc;
  if ((rc = botrun_ask(f, "city?", &city))) return rc;
  snprintf(q, sizeof q, "bye %s from %s", name, city);
  return botrun_reply(f->ctx, q, NULL);
}

/* typist shows typing, asks "q?", and edits the message m-1 to the answer:
 * replayed, its typing is not shown again. */
static int typist(botrun_flow *f) {
  const char *a;
  int rc = botrun_typing(f->ctx, f->ctx->event.chat, NULL);
  if (rc) return rc;
  if ((rc = botrun_ask(f, "q?", &a))) return rc;
  return botrun_edit(f->ctx, f->ctx->event.chat, "m-1", a, NULL);
}

/* channel_outcome is the outcome line of edit and typing. */
static void channel_outcome(int rc, const botrun_channel_error *why) {
  if (rc == BOTRUN_CHANNEL_FAILED) snprintf(out, sizeof out, "channel-failed %s", why->error);
  else if (rc) failure(rc);
  else snprintf(out, sizeof out, "ok");
}

/* fetch_request decodes the arguments of fetch in place: API PATH [METHOD]
 * [BODY] [KEY] [NAME:VALUE...]; a BODY "hex:HEX" is those bytes. headers
 * holds room for MAXARGS headers. */
static void fetch_request(char **args, int argc, botrun_request *req, botrun_header *headers) {
  memset(req, 0, sizeof *req);
  req->path = argc > 2 ? arg(args[2]) : "";
  req->method = argc > 3 ? arg(args[3]) : NULL;
  req->key = argc > 5 ? arg(args[5]) : NULL;
  if (argc > 4) {
    char *body = arg(args[4]);
    if (!strncmp(body, "hex:", 4)) {
      size_t n = strlen(body + 4) / 2;
      unsigned char *b = malloc(n + 1);
      for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(body + 4 + 2 * i, "%2x", &v);
        b[i] = (unsigned char)v;
      }
      req->body = b, req->body_len = n;
    } else {
      req->body = body, req->body_len = strlen(body);
    }
  }
  for (int i = 6; i < argc; i++) {
    char *colon = strchr(args[i], ':');
    if (colon) *colon++ = 0;
    headers[req->nheaders].name = args[i];
    headers[req->nheaders++].value = colon ? colon : "";
  }
  req->headers = headers;
}

/* fetch_outcome is the outcome line of botrun_fetch: a response's body's
 * first 64 bytes as text when they are printable ASCII, else in hex. */
static void fetch_outcome(int rc, const botrun_response *res, const botrun_fetch_error *why) {
  if (rc == BOTRUN_FETCH_FAILED) {
    snprintf(out, sizeof out, "fetch-failed %s %s", why->reason, why->message);
    return;
  }
  if (rc) {
    failure(rc);
    return;
  }
  size_t n = res->body_len < 64 ? res->body_len : 64;
  char body[160] = "";
  int printable = 1;
  for (size_t i = 0; i < n; i++) printable &= res->body[i] >= 0x20 && res->body[i] <= 0x7e;
  if (printable) memcpy(body, res->body, n), body[n] = 0;
  else {
    strcpy(body, "hex:");
    for (size_t i = 0; i < n; i++) snprintf(body + 4 + 2 * i, 3, "%02x", (unsigned char)res->body[i]);
  }
  const char *type = botrun_response_header(res, "Content-Type");
  snprintf(out, sizeof out, "fetch %d replayed=%s headers=%zu type=%s len=%zu body=%s", res->status, res->replayed ? "true" : "false",
           res->nheaders, type ? type : "", res->body_len, body);
}

/* call_outcome calls api with req and puts fetch_outcome's line in line
 * (cap bytes). */
static void call_outcome(const char *api, const botrun_request *req, char *line, size_t cap) {
  botrun_response res;
  botrun_fetch_error why;
  int rc = botrun_fetch(api, req, &res, &why);
  fetch_outcome(rc, &res, &why);
  botrun_response_free(&res);
  snprintf(line, cap, "%s", out);
}

/* fetcher calls orders GET /orders/42 and replies its outcome, asks "next?",
 * replies that outcome again, calls orders POST /orders/42/pay and replies
 * its outcome, asks "last?" and replies the second outcome again. A replayed
 * step's call is answered from the calls kept with the flow, marked
 * replayed, and does not reach the host (abi/SPEC.md section 7). */
static int fetcher(botrun_flow *f) {
  static const botrun_request get = {.path = "/orders/42"}, pay = {.method = "POST", .path = "/orders/42/pay"};
  char first[400], second[400], line[420];
  const char *a;
  int rc;
  call_outcome("orders", &get, first, sizeof first);
  snprintf(line, sizeof line, "first %s", first);
  if ((rc = botrun_reply(f->ctx, line, NULL))) return rc;
  if ((rc = botrun_ask(f, "next?", &a))) return rc;
  snprintf(line, sizeof line, "had %s", first);
  if ((rc = botrun_reply(f->ctx, line, NULL))) return rc;
  call_outcome("orders", &pay, second, sizeof second);
  snprintf(line, sizeof line, "paid %s", second);
  if ((rc = botrun_reply(f->ctx, line, NULL))) return rc;
  if ((rc = botrun_ask(f, "last?", &a))) return rc;
  snprintf(line, sizeof line, "end %s", second);
  return botrun_reply(f->ctx, line, NULL);
}

static const char *const names[] = {"signup", "typist", "fetcher"};
static const botrun_flow_fn fns[] = {signup, typist, fetcher};

int botrun_handle(botrun_ctx *ctx) {
  char *line = strdup(ctx->event.text);
  char *args[MAXARGS] = {0};
  int argc = 0;
  for (char *p = strtok(line, " "); p && argc < MAXARGS; p = strtok(NULL, " ")) args[argc++] = p;
  const char *cmd = argc ? args[0] : "";
  const char *key = argc > 3 ? arg(args[3]) : NULL;
  int handler_rc = 0;
  botrun_send_result r = {0};
  if (ctx->event.interaction) {
    /* A press is reported, not run: its text is the pressed title. */
    const botrun_interaction *in = ctx->event.interaction;
    snprintf(out, sizeof out, "interaction kind=%s id=%s title=%s message=%s text=%s", ctx->event.kind, in->id, in->title, in->message,
             ctx->event.text);
  } else if (!strcmp(cmd, "now")) {
    snprintf(out, sizeof out, "now %lld", botrun_now_ms());
  } else if (!strcmp(cmd, "state-get")) {
    char v[256];
    int rc = botrun_state_get(arg(args[1]), v, sizeof v);
    if (rc == BOTRUN_NOT_FOUND) snprintf(out, sizeof out, "absent");
    else if (rc < 0) failure(rc);
    else snprintf(out, sizeof out, "value %s", v);
  } else if (!strcmp(cmd, "state-set")) {
    const char *v = arg(args[2]);
    int rc = botrun_state_set(arg(args[1]), v, strlen(v));
    if (rc) failure(rc);
    else snprintf(out, sizeof out, "ok");
  } else if (!strcmp(cmd, "fail-state-set")) {
    /* The SDK's error, returned as the handler's own. */
    const char *v = arg(args[2]);
    int rc = botrun_state_set(arg(args[1]), v, strlen(v));
    if (rc) failure(rc);
    else snprintf(out, sizeof out, "ok");
    handler_rc = rc;
  } else if (!strcmp(cmd, "state-delete")) {
    int rc = botrun_state_delete(arg(args[1]));
    if (rc) failure(rc);
    else snprintf(out, sizeof out, "ok");
  } else if (!strcmp(cmd, "media") || !strcmp(cmd, "fail-media")) {
    unsigned char *data;
    size_t len;
    botrun_media_unavailable why;
    int rc = botrun_media_load(atoi(args[1]), &data, &len, &why);
    /* fail-media: the SDK's error, returned as the handler's own. */
    if (!strcmp(cmd, "fail-media")) handler_rc = rc;
    if (rc == BOTRUN_MEDIA_UNAVAILABLE) snprintf(out, sizeof out, "unavailable %s %s", why.reason, why.message);
    else if (rc) failure(rc);
    else {
      snprintf(out, sizeof out, "bytes %zu", len);
      free(data);
    }
  } else if (!strcmp(cmd, "send")) {
    send_outcome(botrun_send(ctx, arg(args[1]), arg(args[2]), key, &r), &r);
  } else if (!strcmp(cmd, "post")) {
    send_outcome(botrun_post(ctx, arg(args[1]), arg(args[2]), key, &r), &r);
  } else if (!strcmp(cmd, "enqueue")) {
    send_outcome(botrun_enqueue(ctx, arg(args[1]), arg(args[2]), key, &r), &r);
  } else if (!strcmp(cmd, "enqueue-at") && argc > 3 && args[2][0] == '+') {
    /* AT: "+N" is the event's time plus N ms, any other number a Unix time
     * in ms ("0": none); the key, if any, follows the text. */
    long long at = ctx->event.received_at + atoll(args[2] + 1);
    send_outcome(botrun_enqueue_at(ctx, arg(args[1]), arg(args[3]), argc > 4 ? arg(args[4]) : NULL, at, &r), &r);
  } else if (!strcmp(cmd, "send-at") || !strcmp(cmd, "post-at") || !strcmp(cmd, "enqueue-at")) {
    botrun_send_opts o = {0};
    o.idempotency_key = argc > 4 ? arg(args[4]) : NULL;
    o.at = args[2][0] == '+' ? ctx->event.received_at + atoll(args[2] + 1) : atoll(args[2]);
    int (*fn)(botrun_ctx *, const char *, const char *, const botrun_send_opts *, botrun_send_result *) =
        cmd[0] == 's' ? botrun_send_ex : cmd[0] == 'p' ? botrun_post_ex : botrun_enqueue_ex;
    send_outcome(fn(ctx, arg(args[1]), arg(args[3]), &o, &r), &r);
  } else if (!strcmp(cmd, "broadcast") || !strcmp(cmd, "broadcast-at")) {
    /* broadcast PREFIX TEXT CHAT..., broadcast-at PREFIX AT TEXT CHAT... */
    int at_arg = !strcmp(cmd, "broadcast-at");
    long long at = 0;
    if (at_arg) at = args[2][0] == '+' ? ctx->event.received_at + atoll(args[2] + 1) : atoll(args[2]);
    const char *chats[MAXARGS];
    size_t n = 0;
    for (int i = at_arg ? 4 : 3; i < argc; i++) chats[n++] = arg(args[i]);
    botrun_broadcast_result b;
    int rc = botrun_broadcast(ctx, chats, n, arg(args[at_arg ? 3 : 2]), arg(args[1]), at, &b);
    if (rc) failure(rc);
    else snprintf(out, sizeof out, "journaled %lld existing %lld", b.journaled, b.existing);
  } else if (!strcmp(cmd, "buttons") && argc > 3) {
    /* buttons FN CHAT TEXT SPEC... */
    botrun_button bs[MAXARGS];
    botrun_send_opts o = {0};
    for (int i = 4; i < argc; i++) bs[o.nbuttons++] = button(args[i]);
    o.buttons = bs;
    send_outcome(send_fn(args[1])(ctx, arg(args[2]), arg(args[3]), &o, &r), &r);
  } else if (!strcmp(cmd, "list") && argc > 4) {
    /* list FN CHAT TEXT BUTTON SECTION... */
    static botrun_list_row rows[MAXARGS][MAXARGS];
    botrun_list_section secs[MAXARGS];
    botrun_list l = {.button = arg(args[4]), .sections = secs};
    for (int i = 5; i < argc; i++) secs[l.nsections] = section(args[i], rows[l.nsections]), l.nsections++;
    botrun_send_opts o = {.list = &l};
    send_outcome(send_fn(args[1])(ctx, arg(args[2]), arg(args[3]), &o, &r), &r);
  } else if (!strcmp(cmd, "buttons-list")) {
    botrun_button b = {.id = "a", .title = "A"};
    botrun_list_row row = {.id = "r1", .title = "R1"};
    botrun_list_section sec = {.rows = &row, .nrows = 1};
    botrun_list l = {.button = "Menu", .sections = &sec, .nsections = 1};
    botrun_send_opts o = {.buttons = &b, .nbuttons = 1, .list = &l};
    send_outcome(botrun_post_ex(ctx, arg(args[1]), arg(args[2]), &o, &r), &r);
  } else if (!strcmp(cmd, "event")) {
    snprintf(out, sizeof out, "kind=%s interaction=none", ctx->event.kind);
  } else if (!strcmp(cmd, "reply")) {
    send_outcome(botrun_reply(ctx, arg(args[1]), &r), &r);
  } else if (!strcmp(cmd, "sends")) {
    int n = atoi(args[1]);
    snprintf(out, sizeof out, "sent %d", n);
    for (int i = 1; i <= n; i++) {
      char text[16];
      snprintf(text, sizeof text, "n%d", i);
      int rc = botrun_send(ctx, "c1", text, NULL, NULL);
      if (rc) {
        snprintf(out, sizeof out, "err %s at %d", botrun_code_name(rc), i);
        break;
      }
    }
  } else if (!strcmp(cmd, "log")) {
    int count = argc > 3 ? atoi(args[3]) : 1;
    const char *msg = arg(args[2]);
    for (int i = 0; i < count; i++) botrun_log(atoi(args[1]), msg);
    snprintf(out, sizeof out, "ok");
  } else if ((!strcmp(cmd, "edit") || !strcmp(cmd, "fail-edit")) && argc > 3) {
    botrun_channel_error why;
    int rc = botrun_edit(ctx, arg(args[1]), arg(args[2]), arg(args[3]), &why);
    channel_outcome(rc, &why);
    /* fail-edit: the SDK's error, returned as the handler's own. */
    if (!strcmp(cmd, "fail-edit")) handler_rc = rc;
  } else if (!strcmp(cmd, "typing") && argc > 1) {
    botrun_channel_error why;
    channel_outcome(botrun_typing(ctx, arg(args[1]), &why), &why);
  } else if ((!strcmp(cmd, "fetch") || !strcmp(cmd, "fail-fetch")) && argc > 2) {
    botrun_request req;
    botrun_header headers[MAXARGS];
    fetch_request(args, argc, &req, headers);
    botrun_response res;
    botrun_fetch_error why;
    int rc = botrun_fetch(arg(args[1]), &req, &res, &why);
    fetch_outcome(rc, &res, &why);
    botrun_response_free(&res);
    /* fail-fetch: the SDK's error, returned as the handler's own. */
    if (!strcmp(cmd, "fail-fetch")) handler_rc = rc;
  } else if (!strcmp(cmd, "flow-start")) {
    int i = argc > 1 && !strcmp(args[1], "typist") ? 1 : argc > 1 && !strcmp(args[1], "fetcher") ? 2 : 0;
    int rc = botrun_flow_start(ctx, names[i], fns[i]);
    if (rc) failure(rc);
    else snprintf(out, sizeof out, "ok");
  } else if (!strcmp(cmd, "flow-continue")) {
    int in_flow, rc = botrun_flow_continue(ctx, names, fns, 3, &in_flow);
    if (rc) failure(rc);
    else snprintf(out, sizeof out, in_flow ? "in-flow" : "not-in-flow");
  } else if (!strcmp(cmd, "flow-name")) {
    char name[64];
    int rc = botrun_in_flow(name, sizeof name);
    if (rc < 0) failure(rc);
    else if (rc) snprintf(out, sizeof out, "flow %s", name);
    else snprintf(out, sizeof out, "no-flow");
  } else if (!strcmp(cmd, "fail")) {
    snprintf(out, sizeof out, "failing");
    handler_rc = botrun_fail(ctx, arg(args[1]));
  } else {
    snprintf(out, sizeof out, "unknown command %s", cmd);
  }
  int rc = botrun_post(ctx, "report", out, NULL, NULL);
  free(line);
  return rc ? rc : handler_rc;
}

/* ---- the send hooks of examples/CONFORMANCE.md, chosen by the send's
 * text ---- */

/* hook_text is the hook's copy of the send's text, whose words the fields
 * it sets point into: it lives until the next hook, past the SDK's reading
 * of them. */
static char *hook_text;

/* first_word reports whether text's first word is w. */
static int first_word(const char *text, const char *w) {
  size_t n = strcspn(text, " ");
  return n == strlen(w) && !strncmp(text, w, n);
}

/* outcome is an SDK call's outcome in a probe: "ok" or its error code's
 * name (a state get's value length and NOT_FOUND, absence, are "ok"). */
static const char *outcome(int rc) { return rc >= 0 || rc == BOTRUN_NOT_FOUND ? "ok" : botrun_code_name(rc); }

static int before_send(botrun_outgoing *s) {
  free(hook_text);
  hook_text = strdup(s->text);
  if (first_word(s->text, "hook-cancel")) return BOTRUN_CANCEL;
  if (first_word(s->text, "hook-fail")) return botrun_hook_fail(s, "hook failed");
  if (first_word(s->text, "hook-same")) {
    s->text = hook_text;
  } else if (first_word(s->text, "hook-rewrite")) {
    char *words[4];
    int n = 0;
    for (char *p = strtok(hook_text, " "); p && n < 4; p = strtok(NULL, " ")) words[n++] = p;
    if (n == 3) s->chat = arg(words[1]), s->text = arg(words[2]);
  } else if (first_word(s->text, "hook-probe")) {
    char v[64];
    int state = botrun_state_get("k", v, sizeof v);
    botrun_ctx ctx = {0};
    int send = botrun_send(&ctx, "x", "y", NULL, NULL);
    const char *media = s->media && s->media->type ? s->media->type : "-";
    const char *list = s->list && s->list->button ? s->list->button : "-";
    static char probe[1024];
    snprintf(probe, sizeof probe,
             "hook=%s event=%s provider=%s chat=%s key=%s at=%lld time=%lld now=%lld media=%s buttons=%zu list=%s state=%s send=%s",
             s->hook, s->event, s->provider, s->chat, s->key, s->at, s->time, botrun_now_ms(), media, s->nbuttons, list, outcome(state),
             outcome(send));
    s->text = probe;
  }
  return BOTRUN_OK;
}

static int after_send(botrun_outgoing *s) {
  if (!strncmp(s->text, "hook-fail", strlen("hook-fail"))) return botrun_hook_fail(s, "hook failed");
  const char *f = "after_send key=%s ref=%s chat=%s text=%s time=%lld";
  int n = snprintf(NULL, 0, f, s->key, s->ref, s->chat, s->text, s->time);
  char *line = malloc((size_t)n + 1);
  snprintf(line, (size_t)n + 1, f, s->key, s->ref, s->chat, s->text, s->time);
  botrun_log(BOTRUN_LOG_INFO, line);
  free(line);
  return BOTRUN_OK;
}

BOTRUN_BEFORE_SEND(before_send)
BOTRUN_AFTER_SEND(after_send)
