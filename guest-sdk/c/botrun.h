/*
 * botrun guest SDK for C (ABI v1, see abi/SPEC.md). Build a bot with
 *
 *   clang --target=wasm32-wasi --sysroot=/usr -O2 -mexec-model=reactor \
 *     -Wl,--strip-debug -I guest-sdk/c -o bot.wasm bot.c guest-sdk/c/botrun.c
 *
 * and define the handler:
 *
 *   int botrun_handle(botrun_ctx *ctx) {
 *     char text[4200];
 *     snprintf(text, sizeof text, "echo: %s", ctx->event.text);
 *     return botrun_reply(ctx, text, NULL);
 *   }
 *
 * Return 0 when the event is handled, non-zero for a handler error (reported,
 * not retried): return botrun_fail(ctx, "why") to give it a message, or return
 * the SDK's code (the SDK then logs the code's name). The SDK has no
 * dependencies beyond wasi-libc.
 */
#ifndef BOTRUN_H
#define BOTRUN_H

#include <stddef.h>
#include <stdint.h>

/* Host error codes (SPEC.md 4.1), -1 to -10, and the SDK's own results, -100
 * and below (never on the wire). */
#define BOTRUN_OK 0
#define BOTRUN_BAD_POINTER (-1)
#define BOTRUN_BAD_PAYLOAD (-2)
#define BOTRUN_NOT_FOUND (-3)
#define BOTRUN_UNSUPPORTED (-4)
#define BOTRUN_TOO_LARGE (-5)
#define BOTRUN_NO_RESULT (-6)
#define BOTRUN_HOST_ERROR (-7)
/* botrun_media_load: the bytes cannot be had; the reason says why. */
#define BOTRUN_MEDIA_UNAVAILABLE (-8)
/* botrun_edit, botrun_typing: the channel refused or failed; the event goes
 * on, and botrun_channel_error has the channel's message. */
#define BOTRUN_CHANNEL_FAILED (-9)
/* botrun_fetch: the API call got no response; the event goes on, and
 * botrun_fetch_error says why. */
#define BOTRUN_FETCH_FAILED (-10)
/* botrun_ask: the question was sent; return it from the flow to wait. */
#define BOTRUN_WAITING (-100)
/* A send that is dead or deferred. */
#define BOTRUN_NOT_SENT (-101)
/* botrun_state_get: the value (and its NUL) does not fit the caller's buffer. */
#define BOTRUN_BUFFER_TOO_SMALL (-102)
/* botrun_fail: the handler failed with a message of its own. */
#define BOTRUN_FAILED (-103)
/* The host's result (a SendResult, a FetchResponse, or MEDIA_UNAVAILABLE's
 * reason) did not parse. */
#define BOTRUN_BAD_RESULT (-104)
/* The SDK could not allocate memory for a result (malloc failed). */
#define BOTRUN_NO_MEMORY (-105)

/* A send hook's verdict (BOTRUN_BEFORE_SEND below): cancel the send. Not an
 * error code: it is botrun_before_send's status for a cancelled send. */
#define BOTRUN_CANCEL 2

/* The SPEC name of a code above ("TOO_LARGE", "NOT_SENT", ...; "OK" for 0),
 * or "UNKNOWN". */
const char *botrun_code_name(int code);

/* Log levels of botrun_log. */
#define BOTRUN_LOG_DEBUG 0
#define BOTRUN_LOG_INFO 1
#define BOTRUN_LOG_WARN 2
#define BOTRUN_LOG_ERROR 3

/* An attachment: the provider's ref inbound (opaque), or a public URL. */
typedef struct {
  char *type, *ref, *url, *mime, *caption;
} botrun_media;

/* The press of a reply button or a list row the bot sent: id is the
 * button's or row's id, as the send gave it; title its title and message the
 * channel's id of the message it was on (the ref its send returned), "" when
 * the channel does not say. Never NULL. */
typedef struct {
  char *id, *title, *message;
} botrun_interaction;

/* Event kinds: a message (also every event of a host that sends no kind), and
 * the press of a button or a list row. Compare with strcmp. */
#define BOTRUN_KIND_MESSAGE "message"
#define BOTRUN_KIND_INTERACTION "interaction"

typedef struct {
  char *id, *provider, *chat, *from, *text;
  int attempt;
  long long received_at;
  botrun_media *media;
  int nmedia;
  /* BOTRUN_KIND_MESSAGE, BOTRUN_KIND_INTERACTION (then text holds the
   * pressed title too), or a kind a later host adds; never NULL. */
  char *kind;
  /* The press, for kind BOTRUN_KIND_INTERACTION; NULL otherwise. */
  botrun_interaction *interaction;
} botrun_event;

typedef struct {
  botrun_event event;
  int send_count; /* sends and enqueues that reached the host */
  int replaying;  /* set while a flow replays steps already taken: sends, edits and typing are not made */
  char error[512]; /* the handler's error message (botrun_fail) */
} botrun_ctx;

/* The statuses of a botrun_send_result (abi/SPEC.md section 2); REPLAYED is
 * the SDK's. Compare with strcmp. */
#define BOTRUN_STATUS_SENT "sent"
#define BOTRUN_STATUS_DEDUPED "deduped"
#define BOTRUN_STATUS_DEFERRED "deferred"
#define BOTRUN_STATUS_DEAD "dead"
#define BOTRUN_STATUS_BYPASSED "bypassed"
/* botrun_post and botrun_reply: the send is made when the handler returns. */
#define BOTRUN_STATUS_QUEUED "queued"
/* botrun_enqueue_at (or an enqueue with opts.at) a future time: the send is
 * journaled and held until then. */
#define BOTRUN_STATUS_SCHEDULED "scheduled"
/* A flow's send while it replays a step already taken: no host call. */
#define BOTRUN_STATUS_REPLAYED "replayed"

typedef struct {
  /* one of the BOTRUN_STATUS_* above */
  char status[16];
  char key[256];
  char ref[256];
  char error[512];
} botrun_send_result;

/* The handler every bot defines. When it returns non-zero, the SDK logs the
 * handler's error at level error (the host reports the last error line as the
 * handler's error): the message of botrun_fail; else, when it returns the code
 * an SDK function last failed with, that failure as the other SDKs word it
 * ("botrun.state_set: TOO_LARGE", "media unavailable: not-durable", "send
 * <key> dead: <error>"); else "botrun_handle returned <code name> (<code>)". */
int botrun_handle(botrun_ctx *ctx);

/* Record msg (cut at 511 bytes) as the handler's error and return
 * BOTRUN_FAILED: return botrun_fail(ctx, "no such order"); */
int botrun_fail(botrun_ctx *ctx, const char *msg);

/* Post text to the event's chat (botrun_post). out may be NULL. Returns 0
 * (status "queued") or a host error code. Every send function also returns
 * BOTRUN_BAD_RESULT when the SendResult does not parse, and BOTRUN_NO_MEMORY. */
int botrun_reply(botrun_ctx *ctx, const char *text, botrun_send_result *out);
/* Queue a send of text to chat and return at once (status "queued", with its
 * key): the host makes the handler's posted sends, in order, when it returns,
 * so the instance is free while they wait (abi/SPEC.md section 4.3).
 * idempotency_key may be NULL (derived key). */
int botrun_post(botrun_ctx *ctx, const char *chat, const char *text, const char *idempotency_key, botrun_send_result *out);
/* Send text to chat and wait for the outbox's answer. Returns 0 when sent or
 * deduped, BOTRUN_NOT_SENT when dead or deferred, or a host error code;
 * idempotency_key may be NULL (derived key). */
int botrun_send(botrun_ctx *ctx, const char *chat, const char *text, const char *idempotency_key, botrun_send_result *out);
/* Send text with one attachment (a ref or a public url) to chat. */
int botrun_send_media(botrun_ctx *ctx, const char *chat, const char *text, const botrun_media *media, const char *idempotency_key,
                      botrun_send_result *out);
/* Journal a send for the host to deliver in the background (status
 * "deferred"). */
int botrun_enqueue(botrun_ctx *ctx, const char *chat, const char *text, const char *idempotency_key, botrun_send_result *out);
/* Journal a send and hold it until at_ms (Unix milliseconds): the host answers
 * status "scheduled" and sends it once when it is due, across restarts
 * (`botrun outbox list --state scheduled` shows it, `botrun discard KEY`
 * cancels it). The clock is the event's: compute at_ms from
 * ctx->event.received_at (or botrun_now_ms()), e.g. + 60000. 0, or a time
 * already past, sends as soon as possible ("deferred"); a negative at_ms is
 * BOTRUN_BAD_PAYLOAD. idempotency_key may be NULL (derived key). */
int botrun_enqueue_at(botrun_ctx *ctx, const char *chat, const char *text, const char *idempotency_key, long long at_ms,
                      botrun_send_result *out);

/* A button under a message: a reply button (id and title; a press arrives as
 * an event of kind BOTRUN_KIND_INTERACTION with that id) or a URL button
 * (title and url, http or https; the user's app opens it). Give id or url,
 * not both; NULL is "". */
typedef struct {
  const char *id, *title, *url;
} botrun_button;

/* A list: a button titled button opens its sections of rows; a picked row
 * arrives as an interaction with the row's id. A section's title and a row's
 * description may be NULL or "" (none). */
typedef struct {
  const char *id, *title, *description;
} botrun_list_row;
typedef struct {
  const char *title;
  const botrun_list_row *rows;
  size_t nrows;
} botrun_list_section;
typedef struct {
  const char *button;
  const botrun_list_section *sections;
  size_t nsections;
} botrun_list;

/* The ABI's bounds of a send's choices (abi/SPEC.md section 2); a channel may
 * allow fewer. */
#define BOTRUN_MAX_BUTTONS 16
#define BOTRUN_MAX_LIST_ROWS 100
#define BOTRUN_MAX_CHOICE_ID 256 /* bytes */

/* Every option of a send; zero-initialize it ({0}) and set what you need. */
typedef struct {
  const char *idempotency_key; /* NULL or "": a derived key */
  const botrun_media *media;   /* NULL: none */
  long long at;                /* Unix ms to hold an enqueue until (0: now); send and post answer BOTRUN_BAD_PAYLOAD for any other */
  const botrun_button *buttons; /* nbuttons buttons under the message (NULL or 0: none) */
  size_t nbuttons;
  const botrun_list *list; /* a list under the message (NULL: none); not with buttons */
} botrun_send_opts;
/* botrun_send, botrun_post and botrun_enqueue with every option; opts may be
 * NULL. Only an enqueue takes opts->at: the host refuses a send or a post
 * with a non-zero at (BOTRUN_BAD_PAYLOAD), as it refuses any request it does
 * not accept.
 *
 * Buttons and a list: the host answers BOTRUN_BAD_PAYLOAD (and logs why) for
 * an empty title, a button with both an id and a url or neither, an id that
 * is not printable or over BOTRUN_MAX_CHOICE_ID bytes, a url that is not
 * http(s), more than BOTRUN_MAX_BUTTONS buttons or BOTRUN_MAX_LIST_ROWS rows,
 * a list without a button title, sections or rows, and buttons with a list.
 * A channel that cannot show them refuses the send at send time: it is dead
 * (BOTRUN_NOT_SENT from botrun_send_ex), never sent without them. A text the
 * channel splits carries them on its last part. */
int botrun_send_ex(botrun_ctx *ctx, const char *chat, const char *text, const botrun_send_opts *opts, botrun_send_result *out);
int botrun_post_ex(botrun_ctx *ctx, const char *chat, const char *text, const botrun_send_opts *opts, botrun_send_result *out);
int botrun_enqueue_ex(botrun_ctx *ctx, const char *chat, const char *text, const botrun_send_opts *opts, botrun_send_result *out);

/* The host's answer to botrun_broadcast: how many keys "<key_prefix>:<chat>"
 * it journaled now, and how many it had journaled already (a replay of the
 * event, or an earlier broadcast with the same prefix), which are not sent
 * again. replayed is the SDK's: 1 when a flow made the broadcast while it
 * replays a step already taken (no host call; the counts are 0). */
typedef struct {
  long long journaled;
  long long existing;
  int replayed;
} botrun_broadcast_result;

/* Journal one send of text to each of the n chats, under the key
 * "<key_prefix>:<chat>", for the host's sweeper to deliver, and return at
 * once. A chat listed twice is sent once; a key journaled before (the event's
 * retry, or an earlier broadcast with the same prefix) is not sent again, so
 * name the prefix after what is announced ("news:42"), not after the event.
 * at_ms (Unix milliseconds, 0 for now) holds every send until then, as
 * botrun_enqueue_at. A broadcast counts once against bot.max_sends. out may
 * be NULL. Returns 0, or BOTRUN_BAD_PAYLOAD (no chats, an empty chat or
 * key_prefix, an empty text, a negative at_ms, a control character in a chat
 * or key_prefix), BOTRUN_TOO_LARGE (over 1 MiB, or more chats than
 * bot.max_broadcast), BOTRUN_UNSUPPORTED (a host without broadcast),
 * BOTRUN_HOST_ERROR (the journal failed, or past bot.max_sends: the event's
 * attempt fails), BOTRUN_BAD_RESULT or BOTRUN_NO_MEMORY. */
int botrun_broadcast(botrun_ctx *ctx, const char *const *chats, size_t n, const char *text, const char *key_prefix,
                     long long at_ms, botrun_broadcast_result *out);
/* botrun_broadcast with one attachment (a ref or a public url); media may be
 * NULL, and text "" with a media. */
int botrun_broadcast_media(botrun_ctx *ctx, const char *const *chats, size_t n, const char *text, const botrun_media *media,
                           const char *key_prefix, long long at_ms, botrun_broadcast_result *out);

/* Conversation state of the event's chat, committed with the event. */
/* botrun_state_get copies the value and a NUL into buf and returns its length;
 * BOTRUN_NOT_FOUND when absent, BOTRUN_BUFFER_TOO_SMALL when it does not fit
 * cap, or the host's code (BOTRUN_UNSUPPORTED, BOTRUN_TOO_LARGE, ...): an
 * error is never reported as absence. */
int botrun_state_get(const char *key, char *buf, size_t cap);
int botrun_state_set(const char *key, const char *value, size_t len);
int botrun_state_delete(const char *key);

/* Why botrun_media_load has no bytes: reason is "not-durable",
 * "provider-mismatch" or "rehydrate-failed" (SPEC.md section 4). */
typedef struct {
  char reason[32];
  char message[512];
} botrun_media_unavailable;

/* Download the bytes of ctx->event.media[index]. On success returns 0 with
 * *data malloc'd (free it) and *len set. Returns BOTRUN_MEDIA_UNAVAILABLE with
 * why filled (why may be NULL; message "" when the host gave none),
 * BOTRUN_UNSUPPORTED when the channel cannot download, BOTRUN_NOT_FOUND for a
 * bad index, another host error code, BOTRUN_BAD_RESULT when the reason does
 * not parse, or BOTRUN_NO_MEMORY. */
int botrun_media_load(int index, unsigned char **data, size_t *len, botrun_media_unavailable *why);

/* The channel's error of BOTRUN_CHANNEL_FAILED: the host cuts it to 512
 * bytes; error is cut to fit. */
typedef struct {
  char error[1024];
} botrun_channel_error;

/* Replace the text of a message the bot sent in chat: message is the ref its
 * botrun_send returned (a post's send is made after the handler returns, so
 * its ref is not known: send what you mean to edit). The channel edits it
 * now; the edit is not journaled (a retry of the event edits again, which
 * changes nothing), takes no number in the event's derived keys and does not
 * count against bot.max_sends. Returns 0, or BOTRUN_CHANNEL_FAILED (the
 * channel refused or failed it: why, which may be NULL, gets its message;
 * the event goes on), BOTRUN_UNSUPPORTED (the channel cannot edit, e.g.
 * WhatsApp or Twilio, or a host without edit), BOTRUN_BAD_PAYLOAD (an empty
 * chat, message or text, or a chat or message that is not printable),
 * BOTRUN_TOO_LARGE (over 1 MiB), BOTRUN_BAD_RESULT (the channel's error does
 * not parse). While a flow replays a step already taken it makes no call and
 * returns 0. */
int botrun_edit(botrun_ctx *ctx, const char *chat, const char *message, const char *text, botrun_channel_error *why);
/* Show "typing..." in chat for a few seconds (or until the bot's next
 * message), where the channel has it: webchat, Telegram, and WhatsApp (in
 * answer to the event's message, which it marks read). Not journaled, not a
 * send; the codes are botrun_edit's (BOTRUN_UNSUPPORTED on Twilio). A bot
 * usually ignores them: the indicator is a courtesy. */
int botrun_typing(botrun_ctx *ctx, const char *chat, botrun_channel_error *why);

/* A header of an API call or of its answer. */
typedef struct {
  const char *name, *value;
} botrun_header;

/* One call of an API bot.toml names in an [[apis]] entry (botrun_fetch);
 * zero-initialize it ({0}) and set what you need. */
typedef struct {
  /* GET (NULL or "": the default), HEAD, POST, PUT, PATCH or DELETE */
  const char *method;
  /* the path under the API's url, with its query: "/orders/42?expand=items" */
  const char *path;
  /* nheaders headers (NULL or 0: none), each name once; the headers bot.toml
   * sets for the API replace those of the same name */
  const botrun_header *headers;
  size_t nheaders;
  /* body_len bytes of body (NULL or 0: none), at most 1 MiB; sent as text
   * when they are UTF-8, in base64 otherwise */
  const void *body;
  size_t body_len;
  /* replaces the call's Idempotency-Key, "<event id>:fetch:<n>" for the
   * event's n-th call (NULL or "": that one) */
  const char *key;
} botrun_request;

/* The API's answer, whatever its status: a 404 or a 500 is a response, not an
 * error. The SDK allocates headers and body: free them with
 * botrun_response_free. */
typedef struct {
  int status;
  /* the answer's headers (canonical names, the first value of each) */
  botrun_header *headers;
  size_t nheaders;
  /* body_len bytes, followed by a NUL (so a text body is a C string); never
   * NULL after a botrun_fetch that returned 0 */
  char *body;
  size_t body_len;
  /* 1 when the answer came from the journal: the event is handled again
   * (after a crash, a retry or a replay) and the call it made the first time
   * is not made again; or, in a flow, from the calls kept with it (a
   * replayed step's call, see botrun_fetch) */
  int replayed;
} botrun_response;

/* Why botrun_fetch got no response (BOTRUN_FETCH_FAILED): reason is
 * "refused" (the destination is not allowed: nothing was sent),
 * "connection", "timeout" or "too-large" (the answer is over the API's
 * max_response); message says more ("" when the host gave none). */
typedef struct {
  char reason[32];
  char message[512];
} botrun_fetch_error;

/* Call api, an [[apis]] entry of bot.toml, through the host, which adds the
 * entry's headers (the bot never sees them) and an Idempotency-Key. The
 * answer is journaled before botrun_fetch returns: when the event is handled
 * again, the same call gets the same answer (out->replayed) without calling
 * the API again. Returns 0 with *out filled (free it with
 * botrun_response_free), or BOTRUN_FETCH_FAILED (no response: why, which may
 * be NULL, says why; the event goes on), BOTRUN_NOT_FOUND (bot.toml names no
 * such API), BOTRUN_BAD_PAYLOAD (a path that is not under the API's url, a
 * method or header the host refuses), BOTRUN_TOO_LARGE (past bot.max_fetches
 * calls in one event, or a request over 1 MiB), BOTRUN_UNSUPPORTED (a host
 * without fetch, or outside an event), BOTRUN_HOST_ERROR (the answer could
 * not be journaled: the event's attempt fails), BOTRUN_BAD_RESULT or
 * BOTRUN_NO_MEMORY; on an error *out is empty (botrun_response_free is
 * harmless). A module that never calls botrun_fetch does not import fetch,
 * so it loads on a host without it.
 *
 * In a flow, a step's calls are kept with the flow (the chat's state key
 * "botrun.flow.calls", committed with each message): when a later message
 * replays the step, its calls are answered from there (out->replayed set,
 * or BOTRUN_FETCH_FAILED with the kept reason), and not made again, however
 * many messages the flow takes. A call whose API, method or path differs
 * from the kept one at its place (the module changed) is made anew. An
 * answer too large for the chat's state is not kept (logged): the replayed
 * step calls again under that message's Idempotency-Key. The kept calls'
 * format is SPEC.md section 7's, shared by every SDK. */
int botrun_fetch(const char *api, const botrun_request *req, botrun_response *out, botrun_fetch_error *why);
/* The value of the answer's header name (compared without case), or NULL. */
const char *botrun_response_header(const botrun_response *res, const char *name);
/* Free what botrun_fetch allocated in res and empty it. */
void botrun_response_free(botrun_response *res);

/* Log a line (BOTRUN_LOG_DEBUG, _INFO, _WARN or _ERROR). */
void botrun_log(int level, const char *msg);
/* The event's time in milliseconds: the deterministic clock. */
long long botrun_now_ms(void);

/* Send hooks (abi/SPEC.md section 4.7), opt-in: a bot that uses neither
 * macro exports no hook and pays nothing. At file scope, after the hook:
 *
 *   static int sign(botrun_outgoing *out) {
 *     static char text[4200];
 *     snprintf(text, sizeof text, "%s\n-- sent by botrun", out->text);
 *     out->text = text;
 *     return BOTRUN_OK;
 *   }
 *   BOTRUN_BEFORE_SEND(sign)
 *
 * BOTRUN_BEFORE_SEND(fn) exports botrun_before_send: fn runs once for each
 * send, post, enqueue and broadcast chat of a handler, before it is
 * journaled. It may point out's chat, text, media, buttons (and nbuttons)
 * and list elsewhere to rewrite the send: the SDK compares them with the
 * send it read and, when they changed, hands the whole send to the host
 * (botrun.rewrite), so what fn points at must outlive it (a static buffer or
 * a literal; the SDK frees only what it allocated). fn returns BOTRUN_OK to
 * send, BOTRUN_CANCEL to cancel the send (the handler's send answers
 * "cancelled"), or an error to fail it (the send is dead): return
 * botrun_hook_fail(out, "why") to give it a message, or an SDK function's
 * code, reported as botrun_handle's. A rewrite the host refuses (an empty
 * text without media, ...) fails the hook with "botrun.rewrite:
 * BAD_PAYLOAD".
 *
 * BOTRUN_AFTER_SEND(fn) exports botrun_after_send: fn runs at least once
 * for each send of a handler after it was delivered, with out->ref the
 * channel's message id; its error is logged, not retried.
 *
 * A hook runs outside an event: it neither sends nor reads or writes state
 * (those calls return BOTRUN_UNSUPPORTED); botrun_log and botrun_now_ms (the
 * hook's time) work. */
typedef struct {
  /* "before_send" or "after_send" */
  const char *hook;
  /* the id of the event whose handler made the send */
  const char *event;
  const char *provider, *chat;
  /* the send's idempotency key */
  const char *key;
  const char *text;
  /* the channel's message id of the send (after_send only; "" when none) */
  const char *ref;
  /* every string above is never NULL; those of media, buttons and list may
   * be (none), as in a send */
  const botrun_media *media; /* NULL: none */
  const botrun_button *buttons;
  size_t nbuttons;
  const botrun_list *list; /* NULL: none */
  /* an enqueued send's hold time in Unix ms (0: now) */
  long long at;
  /* the hook's clock in Unix ms (botrun_now_ms) */
  long long time;
  /* the hook's error message (botrun_hook_fail) */
  char error[512];
} botrun_outgoing;

/* A send hook: returns BOTRUN_OK, BOTRUN_CANCEL (botrun_before_send only) or
 * an error. */
typedef int (*botrun_send_hook)(botrun_outgoing *out);

/* Record msg (cut at 511 bytes) as the hook's error and return
 * BOTRUN_FAILED: return botrun_hook_fail(out, "no such chat"); */
int botrun_hook_fail(botrun_outgoing *out, const char *msg);

/* The bodies of the exports the macros define: they read the hook's send,
 * run fn and answer the host. */
int32_t botrun_run_before_send(int32_t len, botrun_send_hook fn);
int32_t botrun_run_after_send(int32_t len, botrun_send_hook fn);

#define BOTRUN_BEFORE_SEND(fn)                                                                 \
  __attribute__((export_name("botrun_before_send"))) int32_t botrun_before_send(int32_t len) { \
    return botrun_run_before_send(len, fn);                                                    \
  }
#define BOTRUN_AFTER_SEND(fn)                                                                \
  __attribute__((export_name("botrun_after_send"))) int32_t botrun_after_send(int32_t len) { \
    return botrun_run_after_send(len, fn);                                                   \
  }

/* Persistent flows: a flow function asks questions with botrun_ask and is
 * re-run from the start for each message with the answers so far. While it
 * replays the steps it already took (up to the botrun_ask that returns this
 * message's answer) its sends are not made: they return 0 with status
 * "replayed", so a reply between two questions goes out once (botrun_edit
 * and botrun_typing return 0 without a call, a broadcast is marked
 * replayed), and its botrun_fetch calls are answered from the answers kept
 * with the flow (see botrun_fetch). The state format is abi/SPEC.md section
 * 7, the same in every SDK; any number of answers. */
typedef struct botrun_flow botrun_flow;
typedef int (*botrun_flow_fn)(botrun_flow *f);
struct botrun_flow {
  botrun_ctx *ctx;
  const char *name;
  int asked;
  int nanswers;
  const char **answers; /* the SDK's: NUL-terminated answers */
  size_t *lens;         /* their byte lengths */
};
/* Start the flow named name (fn) in this chat. */
int botrun_flow_start(botrun_ctx *ctx, const char *name, botrun_flow_fn fn);
/* The chat's flow in progress: returns 1 and copies its name and a NUL into
 * name (cap bytes), 0 when there is none or its state does not parse
 * (botrun_flow_continue forgets it), or a negative code: the host's
 * (BOTRUN_UNSUPPORTED, BOTRUN_HOST_ERROR, ...; an error is never "no flow"),
 * BOTRUN_BUFFER_TOO_SMALL or BOTRUN_NO_MEMORY. */
int botrun_in_flow(char *name, size_t cap);
/* Feed this message to the chat's flow in progress. *in_flow is set to 1 when
 * there was one; names[i] is the name of fns[i], n pairs. A state that does
 * not parse, or names no flow in names, is deleted (logged) and *in_flow is 0:
 * handle the message as a normal message. */
int botrun_flow_continue(botrun_ctx *ctx, const char *const *names, const botrun_flow_fn *fns, int n, int *in_flow);
/* The answer to the question, or sends it and returns BOTRUN_WAITING. */
int botrun_ask(botrun_flow *f, const char *question, const char **answer);

#endif
