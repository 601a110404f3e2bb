/* botrun guest SDK for C: the ABI v1 exports, the host imports, and a small
 * JSON codec for exactly the ABI's payloads. See botrun.h. */
#include "botrun.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IMPORT(name) __attribute__((import_module("botrun"), import_name(name)))
#define EXPORT(name) __attribute__((export_name(name)))

IMPORT("event_read") int32_t host_event_read(void *p, int32_t n);
IMPORT("send") int32_t host_send(const void *p, int32_t n);
IMPORT("enqueue") int32_t host_enqueue(const void *p, int32_t n);
IMPORT("post") int32_t host_post(const void *p, int32_t n);
IMPORT("result_read") int32_t host_result_read(void *p, int32_t n);
IMPORT("state_get") int32_t host_state_get(const void *k, int32_t kn);
IMPORT("state_set") int32_t host_state_set(const void *k, int32_t kn, const void *v, int32_t vn);
IMPORT("state_delete") int32_t host_state_delete(const void *k, int32_t kn);
IMPORT("log") void host_log(int32_t level, const void *p, int32_t n);
IMPORT("now_ms") int64_t host_now_ms(void);
IMPORT("media_load") int32_t host_media_load(int32_t index);
IMPORT("broadcast") int32_t host_broadcast(const void *p, int32_t n);
IMPORT("edit") int32_t host_edit(const void *p, int32_t n);
IMPORT("typing") int32_t host_typing(const void *p, int32_t n);
IMPORT("fetch") int32_t host_fetch(const void *p, int32_t n);
IMPORT("rewrite") int32_t host_rewrite(const void *p, int32_t n);

EXPORT("botrun_abi_v1") void botrun_abi_v1(void) {}

/* grow reallocs p to n bytes, and traps when memory is out: in wasm32 a NULL
 * pointer is a valid address, so writing through it would corrupt memory
 * instead of faulting. A trap is a fault: the host retries the event. */
static void *grow(void *p, size_t n) {
  void *q = realloc(p, n);
  if (!q) abort();
  return q;
}

/* ---- a growable buffer ---- */
typedef struct {
  char *b;
  size_t n, cap;
} buf;

static void put(buf *o, const char *s, size_t n) {
  if (o->n + n + 1 > o->cap) {
    o->cap = (o->n + n + 1) * 2;
    o->b = grow(o->b, o->cap);
  }
  memcpy(o->b + o->n, s, n);
  o->n += n;
  o->b[o->n] = 0;
}

static void puts_(buf *o, const char *s) { put(o, s, strlen(s)); }

/* put_json_bytes puts the n bytes at s as a JSON string (NULs included). */
static void put_json_bytes(buf *o, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  put(o, "\"", 1);
  for (const char *end = s + n; s < end; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      char e[2] = {'\\', (char)c};
      put(o, e, 2);
    } else if (c < 0x20) {
      char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
      put(o, e, 6);
    } else {
      put(o, (const char *)&c, 1);
    }
  }
  put(o, "\"", 1);
}

static void put_json_string(buf *o, const char *s) { put_json_bytes(o, s, strlen(s)); }

/* ---- a JSON reader for the host's payloads ---- */
typedef struct {
  const char *p, *end;
} reader;

static void ws(reader *r) {
  while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r')) r->p++;
}

static int expect(reader *r, char c) {
  ws(r);
  if (r->p >= r->end || *r->p != c) return 0;
  r->p++;
  return 1;
}

static void put_utf8(buf *o, unsigned cp) {
  char e[4];
  if (cp < 0x80) {
    e[0] = (char)cp;
    put(o, e, 1);
  } else if (cp < 0x800) {
    e[0] = (char)(0xc0 | cp >> 6), e[1] = (char)(0x80 | (cp & 63));
    put(o, e, 2);
  } else if (cp < 0x10000) {
    e[0] = (char)(0xe0 | cp >> 12), e[1] = (char)(0x80 | ((cp >> 6) & 63)), e[2] = (char)(0x80 | (cp & 63));
    put(o, e, 3);
  } else {
    e[0] = (char)(0xf0 | cp >> 18), e[1] = (char)(0x80 | ((cp >> 12) & 63)), e[2] = (char)(0x80 | ((cp >> 6) & 63)),
    e[3] = (char)(0x80 | (cp & 63));
    put(o, e, 4);
  }
}

static int hex4(reader *r, unsigned *out) {
  if (r->end - r->p < 4) return 0;
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = r->p[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    else return 0;
  }
  r->p += 4;
  *out = v;
  return 1;
}

/* strn reads a JSON string into a new malloc'd C string, its length (NULs
 * included) in *len when len is not NULL. */
static char *strn(reader *r, size_t *len) {
  ws(r);
  if (r->p >= r->end || *r->p != '"') return NULL;
  r->p++;
  buf o = {0};
  put(&o, "", 0);
  while (r->p < r->end) {
    char c = *r->p++;
    if (c == '"') {
      if (len) *len = o.n;
      return o.b;
    }
    if (c != '\\') {
      put(&o, &c, 1);
      continue;
    }
    if (r->p >= r->end) break;
    char e = *r->p++;
    unsigned cp;
    switch (e) {
    case 'n': put(&o, "\n", 1); break;
    case 't': put(&o, "\t", 1); break;
    case 'r': put(&o, "\r", 1); break;
    case 'b': put(&o, "\b", 1); break;
    case 'f': put(&o, "\f", 1); break;
    case 'u':
      if (!hex4(r, &cp)) goto bad;
      if (cp >= 0xd800 && cp < 0xdc00 && r->end - r->p >= 6 && r->p[0] == '\\' && r->p[1] == 'u') {
        unsigned lo;
        r->p += 2;
        if (!hex4(r, &lo)) goto bad;
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
      }
      put_utf8(&o, cp);
      break;
    default: put(&o, &e, 1);
    }
  }
bad:
  free(o.b);
  return NULL;
}

/* str reads a JSON string into a new malloc'd C string. */
static char *str(reader *r) { return strn(r, NULL); }

static int skip(reader *r);

static int skip_container(reader *r, char open, char close, int object) {
  if (!expect(r, open)) return 0;
  ws(r);
  if (r->p < r->end && *r->p == close) {
    r->p++;
    return 1;
  }
  for (;;) {
    if (object) {
      char *k = str(r);
      if (!k) return 0;
      free(k);
      if (!expect(r, ':')) return 0;
    }
    if (!skip(r)) return 0;
    ws(r);
    if (r->p >= r->end) return 0;
    if (*r->p == ',') {
      r->p++;
      continue;
    }
    if (*r->p == close) {
      r->p++;
      return 1;
    }
    return 0;
  }
}

static int skip(reader *r) {
  ws(r);
  if (r->p >= r->end) return 0;
  switch (*r->p) {
  case '"': {
    char *s = str(r);
    free(s);
    return s != NULL;
  }
  case '{': return skip_container(r, '{', '}', 1);
  case '[': return skip_container(r, '[', ']', 0);
  default:
    while (r->p < r->end && strchr("+-0123456789.eEtruefalsn", *r->p)) r->p++;
    return 1;
  }
}

static long long num(reader *r) {
  ws(r);
  return strtoll(r->p, (char **)&r->p, 10);
}

/* null consumes a JSON null, and reports whether there was one. */
static int null(reader *r) {
  ws(r);
  if (r->end - r->p < 4 || strncmp(r->p, "null", 4)) return 0;
  r->p += 4;
  return 1;
}

/* object reads {"key": value, ...}; field consumes known keys' values. */
static int object(reader *r, int (*field)(reader *r, const char *key, void *dst), void *dst) {
  if (!expect(r, '{')) return 0;
  ws(r);
  if (r->p < r->end && *r->p == '}') {
    r->p++;
    return 1;
  }
  for (;;) {
    char *k = str(r);
    if (!k || !expect(r, ':')) {
      free(k);
      return 0;
    }
    int ok = field(r, k, dst);
    free(k);
    if (!ok) return 0;
    ws(r);
    if (r->p >= r->end) return 0;
    if (*r->p == ',') {
      r->p++;
      continue;
    }
    if (*r->p == '}') {
      r->p++;
      return 1;
    }
    return 0;
  }
}

/* array reads [value, ...] or null; item consumes each value. */
static int array(reader *r, int (*item)(reader *r, void *dst), void *dst) {
  if (null(r)) return 1;
  if (!expect(r, '[')) return 0;
  ws(r);
  if (r->p < r->end && *r->p == ']') return r->p++, 1;
  for (;;) {
    if (!item(r, dst)) return 0;
    ws(r);
    if (r->p >= r->end) return 0;
    if (*r->p == ',') {
      r->p++;
      continue;
    }
    if (*r->p == ']') return r->p++, 1;
    return 0;
  }
}

/* at_end reports whether only whitespace is left. */
static int at_end(reader *r) {
  ws(r);
  return r->p == r->end;
}

static int set_str(reader *r, char **dst) {
  free(*dst);
  *dst = str(r);
  return *dst != NULL;
}

static int media_field(reader *r, const char *k, void *dst) {
  botrun_media *m = dst;
  if (!strcmp(k, "type")) return set_str(r, &m->type);
  if (!strcmp(k, "ref")) return set_str(r, &m->ref);
  if (!strcmp(k, "url")) return set_str(r, &m->url);
  if (!strcmp(k, "mime")) return set_str(r, &m->mime);
  if (!strcmp(k, "caption")) return set_str(r, &m->caption);
  return skip(r);
}

static int media_item(reader *r, void *dst) {
  botrun_event *e = dst;
  e->media = grow(e->media, sizeof(botrun_media) * (size_t)(e->nmedia + 1));
  botrun_media *m = &e->media[e->nmedia++];
  memset(m, 0, sizeof *m);
  return object(r, media_field, m);
}

static void free_media_fields(const botrun_media *m) { free(m->type), free(m->ref), free(m->url), free(m->mime), free(m->caption); }

static int interaction_field(reader *r, const char *k, void *dst) {
  botrun_interaction *in = dst;
  if (!strcmp(k, "id")) return set_str(r, &in->id);
  if (!strcmp(k, "title")) return set_str(r, &in->title);
  if (!strcmp(k, "message")) return set_str(r, &in->message);
  return skip(r);
}

static void free_interaction(botrun_interaction *in) {
  if (!in) return;
  free(in->id), free(in->title), free(in->message);
  free(in);
}

static int interaction(reader *r, botrun_event *e) {
  free_interaction(e->interaction);
  e->interaction = NULL;
  if (null(r)) return 1;
  e->interaction = grow(NULL, sizeof *e->interaction);
  memset(e->interaction, 0, sizeof *e->interaction);
  return object(r, interaction_field, e->interaction);
}

/* empty fills a NULL string with a malloc'd "". */
static void empty(char **s) {
  if (!*s) *s = grow(NULL, 1), (*s)[0] = 0;
}

static int event_field(reader *r, const char *k, void *dst) {
  botrun_event *e = dst;
  if (!strcmp(k, "media")) return array(r, media_item, e);
  if (!strcmp(k, "kind")) return set_str(r, &e->kind);
  if (!strcmp(k, "interaction")) return interaction(r, e);
  if (!strcmp(k, "id")) return set_str(r, &e->id);
  if (!strcmp(k, "provider")) return set_str(r, &e->provider);
  if (!strcmp(k, "chat")) return set_str(r, &e->chat);
  if (!strcmp(k, "from")) return set_str(r, &e->from);
  if (!strcmp(k, "text")) return set_str(r, &e->text);
  if (!strcmp(k, "attempt")) return e->attempt = (int)num(r), 1;
  if (!strcmp(k, "received_at")) return e->received_at = num(r), 1;
  return skip(r);
}

/* ---- a send hook's SendHook, decoded into a botrun_outgoing whose every
 * pointer the SDK allocated (free_outgoing) ---- */
static int set_const(reader *r, const char **dst) {
  char *s = str(r);
  if (!s) return 0;
  free((void *)*dst);
  *dst = s;
  return 1;
}

static int button_field(reader *r, const char *k, void *dst) {
  botrun_button *b = dst;
  if (!strcmp(k, "id")) return set_const(r, &b->id);
  if (!strcmp(k, "title")) return set_const(r, &b->title);
  if (!strcmp(k, "url")) return set_const(r, &b->url);
  return skip(r);
}

static int button_item(reader *r, void *dst) {
  botrun_outgoing *o = dst;
  botrun_button *bs = grow((void *)o->buttons, sizeof *bs * (o->nbuttons + 1));
  o->buttons = bs;
  memset(&bs[o->nbuttons], 0, sizeof *bs);
  return object(r, button_field, &bs[o->nbuttons++]);
}

static int row_field(reader *r, const char *k, void *dst) {
  botrun_list_row *row = dst;
  if (!strcmp(k, "id")) return set_const(r, &row->id);
  if (!strcmp(k, "title")) return set_const(r, &row->title);
  if (!strcmp(k, "description")) return set_const(r, &row->description);
  return skip(r);
}

static int row_item(reader *r, void *dst) {
  botrun_list_section *sec = dst;
  botrun_list_row *rows = grow((void *)sec->rows, sizeof *rows * (sec->nrows + 1));
  sec->rows = rows;
  memset(&rows[sec->nrows], 0, sizeof *rows);
  return object(r, row_field, &rows[sec->nrows++]);
}

static int section_field(reader *r, const char *k, void *dst) {
  botrun_list_section *sec = dst;
  if (!strcmp(k, "title")) return set_const(r, &sec->title);
  if (!strcmp(k, "rows")) return array(r, row_item, sec);
  return skip(r);
}

static int section_item(reader *r, void *dst) {
  botrun_list *l = dst;
  botrun_list_section *secs = grow((void *)l->sections, sizeof *secs * (l->nsections + 1));
  l->sections = secs;
  memset(&secs[l->nsections], 0, sizeof *secs);
  return object(r, section_field, &secs[l->nsections++]);
}

static int list_field(reader *r, const char *k, void *dst) {
  botrun_list *l = dst;
  if (!strcmp(k, "button")) return set_const(r, &l->button);
  if (!strcmp(k, "sections")) return array(r, section_item, l);
  return skip(r);
}

static void free_buttons(const botrun_button *bs, size_t n) {
  for (size_t i = 0; i < n; i++) free((void *)bs[i].id), free((void *)bs[i].title), free((void *)bs[i].url);
  free((void *)bs);
}

static void free_list(const botrun_list *l) {
  if (!l) return;
  for (size_t i = 0; i < l->nsections; i++) {
    const botrun_list_section *sec = &l->sections[i];
    for (size_t j = 0; j < sec->nrows; j++) {
      const botrun_list_row *row = &sec->rows[j];
      free((void *)row->id), free((void *)row->title), free((void *)row->description);
    }
    free((void *)sec->title), free((void *)sec->rows);
  }
  free((void *)l->button), free((void *)l->sections), free((void *)l);
}

static void free_outgoing(botrun_outgoing *o) {
  free((void *)o->hook), free((void *)o->event), free((void *)o->provider), free((void *)o->chat), free((void *)o->key);
  free((void *)o->text), free((void *)o->ref);
  if (o->media) free_media_fields(o->media), free((void *)o->media);
  free_buttons(o->buttons, o->nbuttons);
  free_list(o->list);
}

static int outgoing_field(reader *r, const char *k, void *dst) {
  botrun_outgoing *o = dst;
  if (!strcmp(k, "hook")) return set_const(r, &o->hook);
  if (!strcmp(k, "event")) return set_const(r, &o->event);
  if (!strcmp(k, "provider")) return set_const(r, &o->provider);
  if (!strcmp(k, "chat")) return set_const(r, &o->chat);
  if (!strcmp(k, "key")) return set_const(r, &o->key);
  if (!strcmp(k, "text")) return set_const(r, &o->text);
  if (!strcmp(k, "ref")) return set_const(r, &o->ref);
  if (!strcmp(k, "at")) return o->at = num(r), 1;
  if (!strcmp(k, "time")) return o->time = num(r), 1;
  if (!strcmp(k, "media")) {
    if (o->media) free_media_fields(o->media), free((void *)o->media);
    o->media = NULL;
    if (null(r)) return 1;
    botrun_media *m = grow(NULL, sizeof *m);
    memset(m, 0, sizeof *m);
    o->media = m;
    return object(r, media_field, m);
  }
  if (!strcmp(k, "buttons")) {
    free_buttons(o->buttons, o->nbuttons);
    o->buttons = NULL;
    o->nbuttons = 0;
    return array(r, button_item, o);
  }
  if (!strcmp(k, "list")) {
    free_list(o->list);
    o->list = NULL;
    if (null(r)) return 1;
    botrun_list *l = grow(NULL, sizeof *l);
    memset(l, 0, sizeof *l);
    o->list = l;
    return object(r, list_field, l);
  }
  return skip(r);
}

static void copy_field(reader *r, char *dst, size_t cap, int *ok) {
  char *s = str(r);
  if (!s) {
    *ok = 0;
    return;
  }
  snprintf(dst, cap, "%s", s);
  free(s);
}

static int result_field(reader *r, const char *k, void *dst) {
  botrun_send_result *o = dst;
  int ok = 1;
  if (!strcmp(k, "status")) copy_field(r, o->status, sizeof o->status, &ok);
  else if (!strcmp(k, "key")) copy_field(r, o->key, sizeof o->key, &ok);
  else if (!strcmp(k, "ref")) copy_field(r, o->ref, sizeof o->ref, &ok);
  else if (!strcmp(k, "error")) copy_field(r, o->error, sizeof o->error, &ok);
  else ok = skip(r);
  return ok;
}

static int broadcast_field(reader *r, const char *k, void *dst) {
  botrun_broadcast_result *o = dst;
  ws(r);
  if (!strcmp(k, "journaled") || !strcmp(k, "existing")) {
    if (r->p >= r->end || *r->p < '0' || *r->p > '9') return 0;
    long long v = num(r);
    if (!strcmp(k, "journaled")) o->journaled = v;
    else o->existing = v;
    return 1;
  }
  return skip(r);
}

static int unavailable_field(reader *r, const char *k, void *dst) {
  botrun_media_unavailable *o = dst;
  int ok = 1;
  if (!strcmp(k, "reason")) copy_field(r, o->reason, sizeof o->reason, &ok);
  else if (!strcmp(k, "message")) copy_field(r, o->message, sizeof o->message, &ok);
  else ok = skip(r);
  return ok;
}

static int channel_error_field(reader *r, const char *k, void *dst) {
  botrun_channel_error *o = dst;
  int ok = 1;
  if (!strcmp(k, "error")) copy_field(r, o->error, sizeof o->error, &ok);
  else ok = skip(r);
  return ok;
}

/* ---- errors ---- */
/* The last error an SDK function returned, as the other SDKs word it
 * ("botrun.state_set: TOO_LARGE", "media unavailable: <reason>: <message>"):
 * a handler that returns that code without botrun_fail has it logged as its
 * error. */
static char last_error[512];
static int last_code;

static int failed(const char *func, int code) {
  last_code = code;
  snprintf(last_error, sizeof last_error, "botrun.%s: %s", func, botrun_code_name(code));
  return code;
}

/* ---- API ---- */
const char *botrun_code_name(int code) {
  switch (code) {
  case BOTRUN_OK: return "OK";
  case BOTRUN_BAD_POINTER: return "BAD_POINTER";
  case BOTRUN_BAD_PAYLOAD: return "BAD_PAYLOAD";
  case BOTRUN_NOT_FOUND: return "NOT_FOUND";
  case BOTRUN_UNSUPPORTED: return "UNSUPPORTED";
  case BOTRUN_TOO_LARGE: return "TOO_LARGE";
  case BOTRUN_NO_RESULT: return "NO_RESULT";
  case BOTRUN_HOST_ERROR: return "HOST_ERROR";
  case BOTRUN_MEDIA_UNAVAILABLE: return "MEDIA_UNAVAILABLE";
  case BOTRUN_CHANNEL_FAILED: return "CHANNEL_FAILED";
  case BOTRUN_FETCH_FAILED: return "FETCH_FAILED";
  case BOTRUN_WAITING: return "WAITING";
  case BOTRUN_NOT_SENT: return "NOT_SENT";
  case BOTRUN_BUFFER_TOO_SMALL: return "BUFFER_TOO_SMALL";
  case BOTRUN_FAILED: return "FAILED";
  case BOTRUN_BAD_RESULT: return "BAD_RESULT";
  case BOTRUN_NO_MEMORY: return "NO_MEMORY";
  case BOTRUN_CANCEL: return "CANCEL";
  }
  return "UNKNOWN";
}

int botrun_media_load(int index, unsigned char **data, size_t *len, botrun_media_unavailable *why) {
  *data = NULL;
  *len = 0;
  int32_t n = host_media_load(index);
  if (n == BOTRUN_MEDIA_UNAVAILABLE) {
    char res[1024];
    int32_t got = host_result_read(res, sizeof res);
    if (got < 0) return failed("result_read", got);
    botrun_media_unavailable tmp;
    if (!why) why = &tmp;
    memset(why, 0, sizeof *why);
    reader r = {res, res + got};
    if (!object(&r, unavailable_field, why) || !at_end(&r)) return failed("media_load", BOTRUN_BAD_RESULT);
    last_code = BOTRUN_MEDIA_UNAVAILABLE;
    snprintf(last_error, sizeof last_error, "media unavailable: %s%s%s", why->reason, why->message[0] ? ": " : "", why->message);
    return BOTRUN_MEDIA_UNAVAILABLE;
  }
  if (n < 0) return failed("media_load", n);
  unsigned char *b = malloc(n ? (size_t)n : 1);
  if (!b) return failed("media_load", BOTRUN_NO_MEMORY);
  if (n > 0 && host_result_read(b, n) != n) {
    free(b);
    return failed("result_read", BOTRUN_NO_RESULT);
  }
  *data = b;
  *len = (size_t)n;
  return 0;
}

/* channel_op answers edit or typing (func) with n: 0, a host code, or
 * BOTRUN_CHANNEL_FAILED with why filled from the pending result. */
static int channel_op(const char *func, int32_t n, botrun_channel_error *why) {
  botrun_channel_error tmp;
  if (!why) why = &tmp;
  memset(why, 0, sizeof *why);
  if (n == 0) return 0;
  if (n != BOTRUN_CHANNEL_FAILED) return failed(func, n < 0 ? n : BOTRUN_BAD_RESULT);
  /* The host cuts the channel's message to 512 bytes; escaped in JSON
   * (six bytes for a '<') that is at most about 3 KiB. */
  char res[4096];
  int32_t got = host_result_read(res, sizeof res);
  if (got < 0) return failed("result_read", got);
  reader r = {res, res + got};
  if (!object(&r, channel_error_field, why) || !at_end(&r)) {
    why->error[0] = 0;
    return failed(func, BOTRUN_BAD_RESULT);
  }
  last_code = BOTRUN_CHANNEL_FAILED;
  snprintf(last_error, sizeof last_error, "botrun.%s: CHANNEL_FAILED%s%s", func, why->error[0] ? ": " : "", why->error);
  return BOTRUN_CHANNEL_FAILED;
}

int botrun_edit(botrun_ctx *ctx, const char *chat, const char *message, const char *text, botrun_channel_error *why) {
  if (why) memset(why, 0, sizeof *why);
  if (ctx->replaying) return 0; /* the step's edit was made with the message that took it */
  buf o = {0};
  puts_(&o, "{\"chat\":");
  put_json_string(&o, chat ? chat : "");
  puts_(&o, ",\"message\":");
  put_json_string(&o, message ? message : "");
  puts_(&o, ",\"text\":");
  put_json_string(&o, text ? text : "");
  puts_(&o, "}");
  int32_t n = host_edit(o.b, (int32_t)o.n);
  free(o.b);
  return channel_op("edit", n, why);
}

int botrun_typing(botrun_ctx *ctx, const char *chat, botrun_channel_error *why) {
  if (why) memset(why, 0, sizeof *why);
  if (ctx->replaying) return 0;
  buf o = {0};
  puts_(&o, "{\"chat\":");
  put_json_string(&o, chat ? chat : "");
  puts_(&o, "}");
  int32_t n = host_typing(o.b, (int32_t)o.n);
  free(o.b);
  return channel_op("typing", n, why);
}

void botrun_log(int level, const char *msg) { host_log(level, msg, (int32_t)strlen(msg)); }

long long botrun_now_ms(void) { return host_now_ms(); }

static void put_media(buf *o, const botrun_media *m) {
  puts_(o, ",\"media\":{\"type\":");
  put_json_string(o, m->type ? m->type : "");
  const char *names[] = {"ref", "url", "mime", "caption"};
  const char *vals[] = {m->ref, m->url, m->mime, m->caption};
  for (int i = 0; i < 4; i++) {
    if (vals[i] && *vals[i]) {
      puts_(o, ",\"");
      puts_(o, names[i]);
      puts_(o, "\":");
      put_json_string(o, vals[i]);
    }
  }
  puts_(o, "}");
}

enum { SEND, ENQUEUE, POST };

/* put_json_field puts ,"name":"value" (or "name":"value" when first), and
 * nothing for a NULL or empty value unless always. */
static void put_json_field(buf *o, const char *name, const char *v, int first, int always) {
  if (!always && !(v && *v)) return;
  if (!first) puts_(o, ",");
  puts_(o, "\"");
  puts_(o, name);
  puts_(o, "\":");
  put_json_string(o, v ? v : "");
}

/* put_choices puts the "buttons" and "list" fields of opts, each when given. */
static void put_choices(buf *o, const botrun_send_opts *opts) {
  if (opts->buttons && opts->nbuttons) {
    puts_(o, ",\"buttons\":[");
    for (size_t i = 0; i < opts->nbuttons; i++) {
      const botrun_button *b = &opts->buttons[i];
      puts_(o, i ? ",{" : "{");
      int has_id = b->id && *b->id;
      put_json_field(o, "id", b->id, 1, 0);
      put_json_field(o, "title", b->title, !has_id, 1);
      put_json_field(o, "url", b->url, 0, 0);
      puts_(o, "}");
    }
    puts_(o, "]");
  }
  const botrun_list *l = opts->list;
  if (l) {
    puts_(o, ",\"list\":{");
    put_json_field(o, "button", l->button, 1, 1);
    puts_(o, ",\"sections\":[");
    for (size_t i = 0; l->sections && i < l->nsections; i++) {
      const botrun_list_section *sec = &l->sections[i];
      puts_(o, i ? ",{" : "{");
      if (sec->title && *sec->title) {
        put_json_field(o, "title", sec->title, 1, 1);
        puts_(o, ",");
      }
      puts_(o, "\"rows\":[");
      for (size_t j = 0; sec->rows && j < sec->nrows; j++) {
        const botrun_list_row *row = &sec->rows[j];
        puts_(o, j ? ",{" : "{");
        put_json_field(o, "id", row->id, 1, 1);
        put_json_field(o, "title", row->title, 0, 1);
        put_json_field(o, "description", row->description, 0, 0);
        puts_(o, "}");
      }
      puts_(o, "]}");
    }
    puts_(o, "]}");
  }
}

/* put_request puts the SendRequest of chat and text; media, key and opts may
 * be NULL, and at 0 (none). */
static void put_request(buf *o, const char *chat, const char *text, const botrun_media *media, const char *key, long long at,
                        const botrun_send_opts *opts) {
  puts_(o, "{\"chat\":");
  put_json_string(o, chat);
  puts_(o, ",\"text\":");
  put_json_string(o, text);
  if (media) put_media(o, media);
  if (key && *key) {
    puts_(o, ",\"idempotency_key\":");
    put_json_string(o, key);
  }
  if (at) {
    char num[32];
    snprintf(num, sizeof num, ",\"at\":%lld", at);
    puts_(o, num);
  }
  if (opts) put_choices(o, opts);
  puts_(o, "}");
}

static int do_send(int fn, const char *chat, const char *text, const botrun_media *media, const char *key, long long at,
                   const botrun_send_opts *opts, botrun_send_result *out) {
  buf o = {0};
  put_request(&o, chat, text, media, key, at, opts);
  int32_t n = fn == ENQUEUE ? host_enqueue(o.b, (int32_t)o.n) : fn == POST ? host_post(o.b, (int32_t)o.n) : host_send(o.b, (int32_t)o.n);
  free(o.b);
  const char *func = fn == ENQUEUE ? "enqueue" : fn == POST ? "post" : "send";
  if (n < 0) return failed(func, n);
  char *res = malloc((size_t)n + 1);
  if (!res) return failed(func, BOTRUN_NO_MEMORY);
  if (host_result_read(res, n) != n) {
    free(res);
    return failed("result_read", BOTRUN_NO_RESULT);
  }
  botrun_send_result tmp = {0};
  if (!out) out = &tmp;
  memset(out, 0, sizeof *out);
  reader r = {res, res + n};
  int ok = object(&r, result_field, out) && at_end(&r);
  free(res);
  if (!ok) return failed(func, BOTRUN_BAD_RESULT);
  if (fn == SEND && (!strcmp(out->status, BOTRUN_STATUS_DEAD) || !strcmp(out->status, BOTRUN_STATUS_DEFERRED))) {
    last_code = BOTRUN_NOT_SENT;
    snprintf(last_error, sizeof last_error, "send %s %s: %s", out->key, out->status, out->error);
    return BOTRUN_NOT_SENT;
  }
  return 0;
}

/* replayed answers a send a flow makes while it replays a step already taken:
 * the host is not called, so the send takes no derived key (the host numbers
 * sends) and the live sends keep their numbers on every replay. */
static int replayed(botrun_ctx *ctx, botrun_send_result *out) {
  if (!ctx->replaying) return 0;
  if (out) {
    memset(out, 0, sizeof *out);
    strcpy(out->status, BOTRUN_STATUS_REPLAYED);
  }
  return 1;
}

int botrun_send(botrun_ctx *ctx, const char *chat, const char *text, const char *key, botrun_send_result *out) {
  if (replayed(ctx, out)) return 0;
  ctx->send_count++;
  return do_send(SEND, chat, text, NULL, key, 0, NULL, out);
}

int botrun_post(botrun_ctx *ctx, const char *chat, const char *text, const char *key, botrun_send_result *out) {
  if (replayed(ctx, out)) return 0;
  ctx->send_count++;
  return do_send(POST, chat, text, NULL, key, 0, NULL, out);
}

int botrun_send_media(botrun_ctx *ctx, const char *chat, const char *text, const botrun_media *media, const char *key,
                      botrun_send_result *out) {
  if (replayed(ctx, out)) return 0;
  ctx->send_count++;
  return do_send(SEND, chat, text, media, key, 0, NULL, out);
}

int botrun_enqueue(botrun_ctx *ctx, const char *chat, const char *text, const char *key, botrun_send_result *out) {
  if (replayed(ctx, out)) return 0;
  ctx->send_count++;
  return do_send(ENQUEUE, chat, text, NULL, key, 0, NULL, out);
}

int botrun_enqueue_at(botrun_ctx *ctx, const char *chat, const char *text, const char *key, long long at_ms,
                      botrun_send_result *out) {
  if (replayed(ctx, out)) return 0;
  ctx->send_count++;
  return do_send(ENQUEUE, chat, text, NULL, key, at_ms, NULL, out);
}

static int send_ex(int fn, botrun_ctx *ctx, const char *chat, const char *text, const botrun_send_opts *opts,
                   botrun_send_result *out) {
  if (replayed(ctx, out)) return 0;
  ctx->send_count++;
  botrun_send_opts none = {0};
  if (!opts) opts = &none;
  return do_send(fn, chat, text, opts->media, opts->idempotency_key, opts->at, opts, out);
}

int botrun_send_ex(botrun_ctx *ctx, const char *chat, const char *text, const botrun_send_opts *opts, botrun_send_result *out) {
  return send_ex(SEND, ctx, chat, text, opts, out);
}

int botrun_post_ex(botrun_ctx *ctx, const char *chat, const char *text, const botrun_send_opts *opts, botrun_send_result *out) {
  return send_ex(POST, ctx, chat, text, opts, out);
}

int botrun_enqueue_ex(botrun_ctx *ctx, const char *chat, const char *text, const botrun_send_opts *opts, botrun_send_result *out) {
  return send_ex(ENQUEUE, ctx, chat, text, opts, out);
}

/* ---- API calls (SPEC.md section 4.8) ---- */
static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* put_base64 puts the n bytes at p in standard base64, padded. */
static void put_base64(buf *o, const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i += 3) {
    unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
    char e[4] = {b64[v >> 18], b64[(v >> 12) & 63], i + 1 < n ? b64[(v >> 6) & 63] : '=', i + 2 < n ? b64[v & 63] : '='};
    put(o, e, 4);
  }
}

/* unbase64 decodes standard padded base64 in place (s, n bytes) and returns
 * the decoded length, or -1 when s is not base64. */
static long unbase64(char *s, size_t n) {
  if (n % 4) return -1;
  size_t out = 0;
  for (size_t i = 0; i < n; i += 4) {
    unsigned v = 0;
    int pad = 0;
    for (int k = 0; k < 4; k++) {
      char c = s[i + k];
      const char *at = c ? strchr(b64, c) : NULL;
      if (c == '=' && i + 4 == n && k >= 2 && (k == 3 || s[i + 3] == '=')) pad++, at = b64;
      else if (!at || pad) return -1;
      v = v << 6 | (unsigned)(at - b64);
    }
    s[out++] = (char)(v >> 16);
    if (pad < 2) s[out++] = (char)(v >> 8);
    if (pad < 1) s[out++] = (char)v;
  }
  return (long)out;
}

/* valid_utf8 reports whether the n bytes at s are UTF-8 (as Go's
 * utf8.Valid: no overlong forms, surrogates or code points past U+10FFFF). */
static int valid_utf8(const unsigned char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    unsigned c = s[i], cp, min;
    size_t more;
    if (c < 0x80) {
      i++;
      continue;
    }
    if (c >= 0xc2 && c <= 0xdf) more = 1, cp = c & 0x1f, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef) more = 2, cp = c & 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4) more = 3, cp = c & 0x07, min = 0x10000;
    else return 0;
    if (n - i <= more) return 0;
    for (size_t k = 1; k <= more; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return 0;
      cp = cp << 6 | (s[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    i += more + 1;
  }
  return 1;
}

/* put_fetch_request puts the FetchRequest of api and req: the headers sorted
 * by name (the same request, the same bytes), the body as text when it is
 * UTF-8 and in base64 otherwise. */
static void put_fetch_request(buf *o, const char *api, const botrun_request *req) {
  puts_(o, "{\"api\":");
  put_json_string(o, api ? api : "");
  put_json_field(o, "method", req->method, 0, 0);
  put_json_field(o, "path", req->path, 0, 1);
  if (req->headers && req->nheaders) {
    const botrun_header **hs = grow(NULL, sizeof *hs * req->nheaders);
    for (size_t i = 0; i < req->nheaders; i++) {
      /* an insertion sort: stable, so of a name given twice the host keeps the last */
      size_t j = i;
      for (; j > 0 && strcmp(hs[j - 1]->name ? hs[j - 1]->name : "", req->headers[i].name ? req->headers[i].name : "") > 0; j--)
        hs[j] = hs[j - 1];
      hs[j] = &req->headers[i];
    }
    puts_(o, ",\"headers\":{");
    for (size_t i = 0; i < req->nheaders; i++) {
      if (i) puts_(o, ",");
      put_json_string(o, hs[i]->name ? hs[i]->name : "");
      puts_(o, ":");
      put_json_string(o, hs[i]->value ? hs[i]->value : "");
    }
    puts_(o, "}");
    free(hs);
  }
  if (req->body && req->body_len) {
    if (valid_utf8(req->body, req->body_len)) {
      puts_(o, ",\"body\":");
      put_json_bytes(o, req->body, req->body_len);
    } else {
      puts_(o, ",\"body_base64\":\"");
      put_base64(o, req->body, req->body_len);
      puts_(o, "\"");
    }
  }
  put_json_field(o, "key", req->key, 0, 0);
  puts_(o, "}");
}

static int header_field(reader *r, const char *k, void *dst) {
  botrun_response *res = dst;
  char *v = str(r);
  if (!v) return 0;
  res->headers = grow(res->headers, sizeof *res->headers * (res->nheaders + 1));
  res->headers[res->nheaders].name = strcpy(grow(NULL, strlen(k) + 1), k);
  res->headers[res->nheaders++].value = v;
  return 1;
}

/* set_body sets res's body to s (n bytes and a NUL, malloc'd). */
static void set_body(botrun_response *res, char *s, size_t n) {
  free(res->body);
  res->body = s;
  res->body_len = n;
}

static int response_field(reader *r, const char *k, void *dst) {
  botrun_response *res = dst;
  if (!strcmp(k, "status")) {
    ws(r);
    if (r->p >= r->end || *r->p < '0' || *r->p > '9') return 0;
    res->status = (int)num(r);
    return 1;
  }
  if (!strcmp(k, "headers")) return null(r) || object(r, header_field, res);
  if (!strcmp(k, "body") || !strcmp(k, "body_base64")) {
    size_t n;
    char *s = strn(r, &n);
    if (!s) return 0;
    if (k[4]) {
      long m = unbase64(s, n);
      if (m < 0) {
        free(s);
        return 0;
      }
      n = (size_t)m;
      s[n] = 0;
    }
    set_body(res, s, n);
    return 1;
  }
  if (!strcmp(k, "replayed")) {
    ws(r);
    res->replayed = r->end - r->p >= 4 && !strncmp(r->p, "true", 4);
    return skip(r);
  }
  return skip(r);
}

static int fetch_error_field(reader *r, const char *k, void *dst) {
  botrun_fetch_error *o = dst;
  int ok = 1;
  if (!strcmp(k, "reason")) copy_field(r, o->reason, sizeof o->reason, &ok);
  else if (!strcmp(k, "message")) copy_field(r, o->message, sizeof o->message, &ok);
  else ok = skip(r);
  return ok;
}

void botrun_response_free(botrun_response *res) {
  if (!res) return;
  for (size_t i = 0; i < res->nheaders; i++) free((void *)res->headers[i].name), free((void *)res->headers[i].value);
  free(res->headers);
  free(res->body);
  memset(res, 0, sizeof *res);
}

/* lower is c in lower case (ASCII only). */
static char lower(char c) { return c >= 'A' && c <= 'Z' ? (char)(c + ('a' - 'A')) : c; }

const char *botrun_response_header(const botrun_response *res, const char *name) {
  for (size_t i = 0; res && name && i < res->nheaders; i++) {
    const char *a = res->headers[i].name, *b = name;
    while (*a && lower(*a) == lower(*b)) a++, b++;
    if (!*a && !*b) return res->headers[i].value;
  }
  return NULL;
}

/* fetch_host makes the call through the host: 0 with *out filled, or a code
 * (BOTRUN_FETCH_FAILED with *why filled); out and why are empty. */
static int fetch_host(const char *api, const botrun_request *req, botrun_response *out, botrun_fetch_error *why) {
  buf o = {0};
  put_fetch_request(&o, api, req);
  int32_t n = host_fetch(o.b, (int32_t)o.n);
  free(o.b);
  if (n == BOTRUN_FETCH_FAILED) {
    /* The host cuts the message to 160 bytes: the FetchError's JSON is at
     * most 1 KiB. */
    char res[4096];
    int32_t got = host_result_read(res, sizeof res);
    if (got < 0) return failed("result_read", got);
    reader r = {res, res + got};
    if (!object(&r, fetch_error_field, why) || !at_end(&r)) {
      memset(why, 0, sizeof *why);
      return failed("fetch", BOTRUN_BAD_RESULT);
    }
    last_code = BOTRUN_FETCH_FAILED;
    snprintf(last_error, sizeof last_error, "botrun.fetch %s: FETCH_FAILED: %s%s%s", api ? api : "", why->reason,
             why->message[0] ? ": " : "", why->message);
    return BOTRUN_FETCH_FAILED;
  }
  if (n < 0) return failed("fetch", n);
  char *res = malloc((size_t)n + 1);
  if (!res) return failed("fetch", BOTRUN_NO_MEMORY);
  if (host_result_read(res, n) != n) {
    free(res);
    return failed("result_read", BOTRUN_NO_RESULT);
  }
  reader r = {res, res + n};
  int ok = object(&r, response_field, out) && at_end(&r);
  free(res);
  if (ok && !out->body) set_body(out, strcpy(grow(NULL, 1), ""), 0);
  if (!ok) {
    botrun_response_free(out);
    return failed("fetch", BOTRUN_BAD_RESULT);
  }
  return 0;
}

/* ---- a flow's API calls: state "botrun.flow.calls" (SPEC.md section 7),
 * netstrings: for each call the flow made, in order, its id "<api> <method>
 * <path>", then "R", the status, the number of headers, each header's name
 * and value (sorted by name) and the body; or "E", the reason and the
 * message of a call that got no response ---- */
#define FLOW_CALLS_KEY "botrun.flow.calls"

static void put_netstring(buf *o, const char *s, size_t n) {
  char len[24];
  put(o, len, (size_t)snprintf(len, sizeof len, "%zu:", n));
  put(o, s, n);
  put(o, ",", 1);
}

/* netstring reads the netstring at s[*at], of the n bytes at s: its bytes
 * at *f (*len of them), and *at moves past it. It returns 0 when there is
 * none: not digits (a leading zero included), no ':', cut short, no ','. */
static int netstring(const char *s, size_t n, size_t *at, const char **f, size_t *len) {
  size_t l = 0, i = *at;
  for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
    if (i > *at && l == 0) return 0; /* a leading zero */
    if (l > n / 10) return 0;        /* longer than the value */
    l = l * 10 + (size_t)(s[i] - '0');
    if (l > n) return 0;
  }
  if (i == *at || i >= n || s[i] != ':' || l >= n - i - 1 || s[i + 1 + l] != ',') return 0;
  *f = s + i + 1;
  *len = l;
  *at = i + 2 + l;
  return 1;
}

/* decimal reads a number of the kept calls, the n bytes at f: 1 to 9
 * digits, no leading zero. It returns -1 when they are not one. */
static int decimal(const char *f, size_t n) {
  if (n == 0 || n > 9 || (f[0] == '0' && n > 1)) return -1;
  int v = 0;
  for (size_t i = 0; i < n; i++) {
    if (f[i] < '0' || f[i] > '9') return -1;
    v = v * 10 + (f[i] - '0');
  }
  return v;
}

/* bytes_cmp compares the a_len bytes at a with the b_len bytes at b, in
 * byte order. */
static int bytes_cmp(const char *a, size_t a_len, const char *b, size_t b_len) {
  int c = memcmp(a, b, a_len < b_len ? a_len : b_len);
  return c ? c : a_len < b_len ? -1 : a_len > b_len;
}

/* A kept call, read in place: pointers into the kept calls' bytes. */
typedef struct {
  const char *id, *reason, *message, *body;
  size_t id_len, reason_len, message_len, body_len;
  int failed; /* "E": reason and message; else "R": the rest */
  int status, nheaders;
  size_t headers; /* where the headers' netstrings begin */
} kept_call;

/* read_call reads the call at s[*at] (of n bytes) into *c, and *at moves past
 * it. It returns 0 when the bytes there are not a call the SDKs write: a
 * field missing, a kind other than R or E, a number that is not decimal, the
 * headers not sorted by name or a name twice. Every loop consumes bytes, so
 * no number in the value makes it run longer than the value. */
static int read_call(const char *s, size_t n, size_t *at, kept_call *c) {
  const char *f, *prev = NULL;
  size_t len, prev_len = 0;
  memset(c, 0, sizeof *c);
  if (!netstring(s, n, at, &c->id, &c->id_len) || !netstring(s, n, at, &f, &len) || len != 1) return 0;
  if (f[0] == 'E') {
    c->failed = 1;
    return netstring(s, n, at, &c->reason, &c->reason_len) && netstring(s, n, at, &c->message, &c->message_len);
  }
  if (f[0] != 'R' || !netstring(s, n, at, &f, &len) || (c->status = decimal(f, len)) < 0 || !netstring(s, n, at, &f, &len) ||
      (c->nheaders = decimal(f, len)) < 0)
    return 0;
  c->headers = *at;
  for (int i = 0; i < c->nheaders; i++) {
    const char *name, *value;
    size_t name_len, value_len;
    if (!netstring(s, n, at, &name, &name_len) || !netstring(s, n, at, &value, &value_len)) return 0;
    if (prev && bytes_cmp(prev, prev_len, name, name_len) >= 0) return 0;
    prev = name, prev_len = name_len;
  }
  return netstring(s, n, at, &c->body, &c->body_len);
}

/* The kept calls of the flow running now: enc holds them as the state does,
 * ends[i] is where call i ends in it. */
typedef struct {
  botrun_ctx *ctx;
  int loaded, dirty; /* dirty: the kept calls changed in this run */
  buf enc;
  size_t *ends;
  size_t n, cap;
  size_t next; /* the kept call a replayed step's next call reads */
} flow_calls;

/* running_calls are those of the flow running now; NULL outside a flow. */
static flow_calls *running_calls;

/* push_end records a kept call ending at end; 0 when memory is out. */
static int push_end(flow_calls *fc, size_t end) {
  if (fc->n == fc->cap) {
    size_t cap = fc->cap ? fc->cap * 2 : 8;
    size_t *e = realloc(fc->ends, sizeof *e * cap);
    if (!e) return 0;
    fc->ends = e, fc->cap = cap;
  }
  fc->ends[fc->n++] = end;
  return 1;
}

/* drop_calls keeps the first n calls only. */
static void drop_calls(flow_calls *fc, size_t n) {
  fc->n = n;
  fc->enc.n = n ? fc->ends[n - 1] : 0;
}

/* load_calls reads the kept calls once, when a replayed step first calls
 * botrun_fetch. A value it cannot read, or that does not parse, is as none
 * (the calls are made again): nothing of it is kept, not even a prefix. */
static void load_calls(flow_calls *fc) {
  if (fc->loaded) return;
  fc->loaded = 1;
  int32_t len = host_state_get(FLOW_CALLS_KEY, (int32_t)strlen(FLOW_CALLS_KEY));
  if (len < 0) return;
  char *s = malloc((size_t)len + 1);
  if (!s) return;
  if (len > 0 && host_result_read(s, len) != len) {
    free(s);
    return;
  }
  size_t at = 0;
  kept_call c;
  while (at < (size_t)len) {
    if (!read_call(s, (size_t)len, &at, &c) || !push_end(fc, at)) {
      fc->n = 0;
      free(s);
      return;
    }
  }
  s[len] = 0;
  fc->enc = (buf){s, (size_t)len, (size_t)len + 1};
}

/* dup_bytes is a malloc'd copy of the n bytes at s, and a NUL. */
static char *dup_bytes(const char *s, size_t n) {
  char *d = grow(NULL, n + 1);
  memcpy(d, s, n);
  d[n] = 0;
  return d;
}

/* cut_copy copies the n bytes at s into dst (cap bytes), cut to fit its NUL. */
static void cut_copy(char *dst, size_t cap, const char *s, size_t n) {
  if (n > cap - 1) n = cap - 1;
  memcpy(dst, s, n);
  dst[n] = 0;
}

/* take_call answers a replayed step's call (api, its id) from the kept call
 * at its place, if that one has the same id: 0 with *out filled and marked
 * replayed, or BOTRUN_FETCH_FAILED with *why filled, as the host answered
 * the message that took the step. It returns 1 when there is no such kept
 * call: the call is made through the host. */
static int take_call(flow_calls *fc, const char *api, const buf *id, botrun_response *out, botrun_fetch_error *why) {
  load_calls(fc);
  if (fc->next >= fc->n) return 1;
  size_t at = fc->next ? fc->ends[fc->next - 1] : 0;
  kept_call c;
  if (!read_call(fc->enc.b, fc->ends[fc->next], &at, &c) || bytes_cmp(c.id, c.id_len, id->b, id->n)) return 1;
  fc->next++;
  if (c.failed) {
    cut_copy(why->reason, sizeof why->reason, c.reason, c.reason_len);
    cut_copy(why->message, sizeof why->message, c.message, c.message_len);
    last_code = BOTRUN_FETCH_FAILED;
    snprintf(last_error, sizeof last_error, "botrun.fetch %s: FETCH_FAILED: %s%s%s", api ? api : "", why->reason,
             why->message[0] ? ": " : "", why->message);
    return BOTRUN_FETCH_FAILED;
  }
  out->status = c.status;
  out->headers = grow(NULL, sizeof *out->headers * ((size_t)c.nheaders + 1));
  at = c.headers;
  for (int i = 0; i < c.nheaders; i++) {
    const char *f;
    size_t len;
    netstring(fc->enc.b, fc->enc.n, &at, &f, &len);
    out->headers[i].name = dup_bytes(f, len);
    netstring(fc->enc.b, fc->enc.n, &at, &f, &len);
    out->headers[i].value = dup_bytes(f, len);
    out->nheaders++;
  }
  out->body = dup_bytes(c.body, c.body_len);
  out->body_len = c.body_len;
  out->replayed = 1;
  return 0;
}

/* keep_call appends the answer of a call of the step this message takes
 * (rc: botrun_fetch's), after dropping what the replayed steps did not read
 * (they no longer make it). A call the host refused (another code) got no
 * answer and is not kept. */
static void keep_call(flow_calls *fc, const buf *id, int rc, const botrun_response *res, const botrun_fetch_error *why) {
  if (rc != 0 && rc != BOTRUN_FETCH_FAILED) return;
  drop_calls(fc, fc->next);
  buf *o = &fc->enc;
  size_t start = o->n;
  put_netstring(o, id->b, id->n);
  if (rc) {
    put_netstring(o, "E", 1);
    put_netstring(o, why->reason, strlen(why->reason));
    put_netstring(o, why->message, strlen(why->message));
  } else {
    char num[24];
    put_netstring(o, "R", 1);
    put_netstring(o, num, (size_t)snprintf(num, sizeof num, "%d", res->status));
    put_netstring(o, num, (size_t)snprintf(num, sizeof num, "%zu", res->nheaders));
    /* sorted by name (an insertion sort): the same answer, the same bytes */
    const botrun_header **hs = grow(NULL, sizeof *hs * (res->nheaders + 1));
    for (size_t i = 0; i < res->nheaders; i++) {
      size_t j = i;
      for (; j > 0 && strcmp(hs[j - 1]->name, res->headers[i].name) > 0; j--) hs[j] = hs[j - 1];
      hs[j] = &res->headers[i];
    }
    for (size_t i = 0; i < res->nheaders; i++) {
      put_netstring(o, hs[i]->name, strlen(hs[i]->name));
      put_netstring(o, hs[i]->value, strlen(hs[i]->value));
    }
    free(hs);
    put_netstring(o, res->body ? res->body : "", res->body_len);
  }
  if (!push_end(fc, o->n)) {
    o->n = start; /* no memory to keep it: the replay calls again */
    return;
  }
  fc->next = fc->n;
  fc->dirty = 1;
}

int botrun_fetch(const char *api, const botrun_request *req, botrun_response *out, botrun_fetch_error *why) {
  botrun_response tmp_res;
  botrun_fetch_error tmp_why;
  if (!out) out = &tmp_res;
  if (!why) why = &tmp_why;
  memset(out, 0, sizeof *out);
  memset(why, 0, sizeof *why);
  botrun_request none = {0};
  if (!req) req = &none;
  flow_calls *fc = running_calls;
  int rc;
  if (!fc) {
    rc = fetch_host(api, req, out, why);
  } else {
    /* the call's id: "<api> <method> <path>", GET when the guest gave none */
    buf id = {0};
    put(&id, "", 0);
    puts_(&id, api ? api : "");
    puts_(&id, " ");
    puts_(&id, req->method && *req->method ? req->method : "GET");
    puts_(&id, " ");
    puts_(&id, req->path ? req->path : "");
    rc = fc->ctx->replaying ? take_call(fc, api, &id, out, why) : 1;
    if (rc == 1) {
      rc = fetch_host(api, req, out, why);
      if (!fc->ctx->replaying) keep_call(fc, &id, rc, out, why);
    }
    free(id.b);
  }
  if (out == &tmp_res) botrun_response_free(out);
  return rc;
}

int botrun_broadcast_media(botrun_ctx *ctx, const char *const *chats, size_t n, const char *text, const botrun_media *media,
                           const char *key_prefix, long long at_ms, botrun_broadcast_result *out) {
  botrun_broadcast_result tmp;
  if (!out) out = &tmp;
  memset(out, 0, sizeof *out);
  if (ctx->replaying) {
    /* As a flow's sends: the host numbers a broadcast like a send. */
    out->replayed = 1;
    return 0;
  }
  ctx->send_count++;
  buf o = {0};
  puts_(&o, "{\"chats\":[");
  for (size_t i = 0; i < n; i++) {
    if (i) puts_(&o, ",");
    put_json_string(&o, chats[i] ? chats[i] : "");
  }
  puts_(&o, "],\"text\":");
  put_json_string(&o, text ? text : "");
  if (media) put_media(&o, media);
  puts_(&o, ",\"key_prefix\":");
  put_json_string(&o, key_prefix ? key_prefix : "");
  if (at_ms) {
    char num[32];
    snprintf(num, sizeof num, ",\"at\":%lld", at_ms);
    puts_(&o, num);
  }
  puts_(&o, "}");
  int32_t got = host_broadcast(o.b, (int32_t)o.n);
  free(o.b);
  if (got < 0) return failed("broadcast", got);
  char *res = malloc((size_t)got + 1);
  if (!res) return failed("broadcast", BOTRUN_NO_MEMORY);
  if (host_result_read(res, got) != got) {
    free(res);
    return failed("result_read", BOTRUN_NO_RESULT);
  }
  reader r = {res, res + got};
  int ok = object(&r, broadcast_field, out) && at_end(&r);
  free(res);
  if (!ok) return failed("broadcast", BOTRUN_BAD_RESULT);
  return 0;
}

int botrun_broadcast(botrun_ctx *ctx, const char *const *chats, size_t n, const char *text, const char *key_prefix,
                     long long at_ms, botrun_broadcast_result *out) {
  return botrun_broadcast_media(ctx, chats, n, text, NULL, key_prefix, at_ms, out);
}

int botrun_reply(botrun_ctx *ctx, const char *text, botrun_send_result *out) {
  return botrun_post(ctx, ctx->event.chat, text, NULL, out);
}

int botrun_state_get(const char *key, char *b, size_t cap) {
  int32_t n = host_state_get(key, (int32_t)strlen(key));
  if (n == BOTRUN_NOT_FOUND) return n;
  if (n < 0) return failed("state_get", n);
  if ((size_t)n + 1 > cap) return failed("state_get", BOTRUN_BUFFER_TOO_SMALL);
  if (host_result_read(b, n) != n) return failed("result_read", BOTRUN_NO_RESULT);
  b[n] = 0;
  return n;
}

int botrun_state_set(const char *key, const char *value, size_t len) {
  int32_t n = host_state_set(key, (int32_t)strlen(key), value, (int32_t)len);
  return n < 0 ? failed("state_set", n) : 0;
}

int botrun_state_delete(const char *key) {
  int32_t n = host_state_delete(key, (int32_t)strlen(key));
  return n < 0 ? failed("state_delete", n) : 0;
}

/* ---- flows: state "botrun.flow" = netstrings (SPEC.md section 7): the
 * flow's name, then each answer in order ---- */
#define FLOW_KEY "botrun.flow"

static int save_flow(botrun_flow *f) {
  buf o = {0};
  put_netstring(&o, f->name, strlen(f->name));
  for (int i = 0; i < f->nanswers; i++) put_netstring(&o, f->answers[i], f->lens[i]);
  int rc = botrun_state_set(FLOW_KEY, o.b, o.n);
  free(o.b);
  return rc;
}

/* parse_flow splits a flow state of n bytes in place: each netstring's ','
 * becomes its terminating NUL. It returns the number of fields (at least 1),
 * with one spare slot in *fields and *lens for the caller, -1 when the value
 * is not the format, or BOTRUN_NO_MEMORY (a failed allocation is not a bad
 * value: the state is kept). */
static int parse_flow(char *s, size_t n, const char ***fields, size_t **lens) {
  int count = 0;
  size_t at = 0;
  *fields = NULL;
  *lens = NULL;
  while (at < n) {
    const char *f;
    size_t len;
    if (!netstring(s, n, &at, &f, &len)) goto bad;
    const char **fs = realloc(*fields, sizeof **fields * (size_t)(count + 2));
    if (fs) *fields = fs;
    size_t *ls = realloc(*lens, sizeof **lens * (size_t)(count + 2));
    if (ls) *lens = ls;
    if (!fs || !ls) {
      count = BOTRUN_NO_MEMORY;
      goto bad;
    }
    s[at - 1] = 0; /* the ',' */
    (*fields)[count] = f;
    (*lens)[count++] = len;
  }
  if (count > 0) return count;
bad:
  free(*fields);
  free(*lens);
  *fields = NULL;
  *lens = NULL;
  return count == BOTRUN_NO_MEMORY ? BOTRUN_NO_MEMORY : -1;
}

/* save_calls writes the kept calls when this run changed them; an answer
 * over the chat's state limits is not kept (logged). */
static int save_calls(flow_calls *fc) {
  if (!fc->dirty) return 0;
  int rc = botrun_state_set(FLOW_CALLS_KEY, fc->enc.b ? fc->enc.b : "", fc->enc.n);
  if (rc != BOTRUN_TOO_LARGE) return rc;
  botrun_log(BOTRUN_LOG_WARN, "botrun flow: the answers of the flow's API calls are too large for the chat's state "
                              "(bot.max_chat_state): a later message of the flow calls its APIs again");
  return botrun_state_delete(FLOW_CALLS_KEY);
}

static int run_flow(botrun_flow *f, botrun_flow_fn fn) {
  f->ctx->replaying = f->nanswers > 0;
  /* A new flow starts with no kept calls; a continued one reads them when a
   * replayed step first calls botrun_fetch. */
  flow_calls fc = {.ctx = f->ctx, .loaded = f->nanswers == 0};
  flow_calls *outer = running_calls;
  running_calls = &fc;
  int rc = fn(f);
  running_calls = outer;
  if (f->ctx->replaying) {
    f->ctx->replaying = 0;
    char msg[512];
    snprintf(msg, sizeof msg,
             "botrun flow: flow \"%s\" ended before the question this message answers (was the module changed?); sends of the steps "
             "it replayed were not repeated",
             f->name);
    botrun_log(BOTRUN_LOG_WARN, msg);
  }
  if (rc == BOTRUN_WAITING) {
    rc = save_calls(&fc);
    if (rc == 0) rc = save_flow(f);
  } else if (rc == 0) {
    /* finished: its kept calls go with it, if it had any */
    if (fc.n || fc.dirty) rc = botrun_state_delete(FLOW_CALLS_KEY);
    if (rc == 0) rc = botrun_state_delete(FLOW_KEY);
  }
  free(fc.enc.b);
  free(fc.ends);
  return rc;
}

int botrun_ask(botrun_flow *f, const char *question, const char **answer) {
  f->asked++;
  if (f->asked <= f->nanswers) {
    if (f->asked == f->nanswers) {
      f->ctx->replaying = 0; /* this message's answer: what follows is new */
      flow_calls *fc = running_calls;
      if (fc && fc->next < fc->n) {
        drop_calls(fc, fc->next); /* kept calls the replayed steps no longer made */
        fc->dirty = 1;
      }
    }
    *answer = f->answers[f->asked - 1];
    return 0;
  }
  int rc = botrun_reply(f->ctx, question, NULL);
  return rc == 0 ? BOTRUN_WAITING : rc;
}

int botrun_flow_start(botrun_ctx *ctx, const char *name, botrun_flow_fn fn) {
  botrun_flow f = {.ctx = ctx, .name = name};
  return run_flow(&f, fn);
}

/* forget_flow deletes a flow state the module cannot continue. */
static int forget_flow(const char *why, const char *name) {
  char msg[512];
  snprintf(msg, sizeof msg, "botrun flow: forgetting the chat's flow%s%s%s: %s; the message is handled as a normal message",
           name ? " \"" : "", name ? name : "", name ? "\"" : "", why);
  botrun_log(BOTRUN_LOG_WARN, msg);
  return botrun_state_delete(FLOW_KEY);
}

int botrun_in_flow(char *name, size_t cap) {
  int32_t len = host_state_get(FLOW_KEY, (int32_t)strlen(FLOW_KEY));
  if (len == BOTRUN_NOT_FOUND) return 0;
  if (len < 0) return failed("state_get", len);
  char *state = malloc((size_t)len + 1);
  if (!state) return failed("state_get", BOTRUN_NO_MEMORY);
  if (host_result_read(state, len) != len) {
    free(state);
    return failed("result_read", BOTRUN_NO_RESULT);
  }
  const char **fields;
  size_t *lens;
  int rc = parse_flow(state, (size_t)len, &fields, &lens);
  if (rc == BOTRUN_NO_MEMORY) rc = failed("state_get", rc);
  else if (rc < 0) rc = 0;
  else {
    if (lens[0] + 1 > cap) rc = failed("state_get", BOTRUN_BUFFER_TOO_SMALL);
    else {
      memcpy(name, fields[0], lens[0] + 1);
      rc = 1;
    }
    free(fields);
    free(lens);
  }
  free(state);
  return rc;
}

int botrun_flow_continue(botrun_ctx *ctx, const char *const *names, const botrun_flow_fn *fns, int n, int *in_flow) {
  *in_flow = 0;
  int32_t len = host_state_get(FLOW_KEY, (int32_t)strlen(FLOW_KEY));
  if (len == BOTRUN_NOT_FOUND) return 0;
  if (len < 0) return failed("state_get", len);
  char *state = malloc((size_t)len + 1);
  if (!state) return failed("state_get", BOTRUN_NO_MEMORY);
  if (host_result_read(state, len) != len) {
    free(state);
    return failed("result_read", BOTRUN_NO_RESULT);
  }
  const char **fields;
  size_t *lens;
  int nfields = parse_flow(state, (size_t)len, &fields, &lens);
  if (nfields == BOTRUN_NO_MEMORY) {
    free(state);
    return failed("state_get", BOTRUN_NO_MEMORY);
  }
  if (nfields < 0) {
    free(state);
    return forget_flow("its state is not a sequence of netstrings (SPEC.md section 7)", NULL);
  }
  int rc = 0;
  for (int i = 0; i < n; i++) {
    if (strcmp(names[i], fields[0])) continue;
    /* the stored answers, then this message's (parse_flow left a spare slot) */
    fields[nfields] = ctx->event.text;
    lens[nfields] = strlen(ctx->event.text);
    botrun_flow f = {.ctx = ctx, .name = fields[0], .nanswers = nfields, .answers = fields + 1, .lens = lens + 1};
    *in_flow = 1;
    rc = run_flow(&f, fns[i]);
    break;
  }
  if (!*in_flow) rc = forget_flow("this module has no flow of that name", fields[0]);
  free(fields);
  free(lens);
  free(state);
  return rc;
}

/* ---- the entry point ---- */
int botrun_fail(botrun_ctx *ctx, const char *msg) {
  snprintf(ctx->error, sizeof ctx->error, "%s", msg && *msg ? msg : "handler failed");
  return BOTRUN_FAILED;
}

/* read_payload reads the n bytes of the event (or a send hook's SendHook)
 * into a new buffer; NULL when it cannot (logged). It forgets the last
 * error. */
static char *read_payload(int32_t n) {
  char *raw = malloc(n > 0 ? (size_t)n : 1);
  int32_t got = raw ? host_event_read(raw, n) : BOTRUN_NO_MEMORY;
  if (got != n) {
    free(raw);
    char msg[96];
    snprintf(msg, sizeof msg, "botrun sdk: event_read returned %d, want %d", (int)got, (int)n);
    botrun_log(BOTRUN_LOG_ERROR, msg);
    return NULL;
  }
  last_code = 0;
  last_error[0] = 0;
  return raw;
}

/* report logs the error of fn (botrun_handle, or a send hook), which
 * returned rc, at level error: the host reports the last line logged at
 * level error as the handler's error (SPEC.md section 3), as the other SDKs
 * log theirs. The error is msg (botrun_fail's); else, when rc is the code an
 * SDK function last failed with, that failure; else "<fn> returned <code
 * name> (<code>)". */
static void report(const char *fn, int rc, const char *msg) {
  if (!msg[0] && rc == last_code) msg = last_error;
  if (msg[0]) {
    botrun_log(BOTRUN_LOG_ERROR, msg);
    return;
  }
  char line[128];
  snprintf(line, sizeof line, "%s returned %s (%d)", fn, botrun_code_name(rc), rc);
  botrun_log(BOTRUN_LOG_ERROR, line);
}

EXPORT("botrun_on_event") int32_t botrun_on_event(int32_t n) {
  char *raw = read_payload(n);
  if (!raw) return 1;
  botrun_ctx ctx = {0};
  reader r = {raw, raw + n};
  int ok = object(&r, event_field, &ctx.event);
  free(raw);
  if (!ok) {
    botrun_log(BOTRUN_LOG_ERROR, "botrun sdk: bad event");
    return 1;
  }
  empty(&ctx.event.text);
  empty(&ctx.event.chat);
  if (ctx.event.kind && !*ctx.event.kind) free(ctx.event.kind), ctx.event.kind = NULL;
  /* A host before interactions sends no kind: every event is a message. */
  if (!ctx.event.kind) ctx.event.kind = grow(NULL, sizeof BOTRUN_KIND_MESSAGE), strcpy(ctx.event.kind, BOTRUN_KIND_MESSAGE);
  if (ctx.event.interaction) {
    empty(&ctx.event.interaction->id);
    empty(&ctx.event.interaction->title);
    empty(&ctx.event.interaction->message);
  }
  int rc = botrun_handle(&ctx);
  if (rc != 0) report("botrun_handle", rc, ctx.error);
  free(ctx.event.id), free(ctx.event.provider), free(ctx.event.chat), free(ctx.event.from), free(ctx.event.text);
  free(ctx.event.kind);
  free_interaction(ctx.event.interaction);
  for (int i = 0; i < ctx.event.nmedia; i++) free_media_fields(&ctx.event.media[i]);
  free(ctx.event.media);
  return rc == 0 ? 0 : 1;
}

/* ---- send hooks (SPEC.md section 4.7) ---- */
int botrun_hook_fail(botrun_outgoing *out, const char *msg) {
  snprintf(out->error, sizeof out->error, "%s", msg && *msg ? msg : "hook failed");
  return BOTRUN_FAILED;
}

/* read_hook reads the hook's SendHook (n bytes) into *o, its strings never
 * NULL; 0 when it cannot (logged). */
static int read_hook(int32_t n, botrun_outgoing *o) {
  memset(o, 0, sizeof *o);
  char *raw = read_payload(n);
  if (!raw) return 0;
  reader r = {raw, raw + n};
  int ok = object(&r, outgoing_field, o) && at_end(&r);
  free(raw);
  if (!ok) {
    free_outgoing(o);
    botrun_log(BOTRUN_LOG_ERROR, "botrun sdk: bad send hook");
    return 0;
  }
  const char **strs[] = {&o->hook, &o->event, &o->provider, &o->chat, &o->key, &o->text, &o->ref};
  for (size_t i = 0; i < sizeof strs / sizeof *strs; i++)
    if (!*strs[i]) *strs[i] = strcpy(grow(NULL, 1), "");
  return 1;
}

/* same compares two strings, NULL as "". */
static int same(const char *a, const char *b) { return !strcmp(a ? a : "", b ? b : ""); }

static int same_media(const botrun_media *a, const botrun_media *b) {
  if (!a || !b) return a == b;
  return same(a->type, b->type) && same(a->ref, b->ref) && same(a->url, b->url) && same(a->mime, b->mime) &&
         same(a->caption, b->caption);
}

static int same_list(const botrun_list *a, const botrun_list *b) {
  if (!a || !b) return a == b;
  if (!same(a->button, b->button) || a->nsections != b->nsections) return 0;
  for (size_t i = 0; i < a->nsections; i++) {
    const botrun_list_section *s = &a->sections[i], *t = &b->sections[i];
    if (!same(s->title, t->title) || s->nrows != t->nrows) return 0;
    for (size_t j = 0; j < s->nrows; j++)
      if (!same(s->rows[j].id, t->rows[j].id) || !same(s->rows[j].title, t->rows[j].title) ||
          !same(s->rows[j].description, t->rows[j].description))
        return 0;
  }
  return 1;
}

/* changed reports whether the hook changed the send's chat or content. */
static int changed(const botrun_outgoing *out, const botrun_outgoing *orig) {
  size_t n = out->buttons ? out->nbuttons : 0;
  if (!same(out->chat, orig->chat) || !same(out->text, orig->text) || !same_media(out->media, orig->media) ||
      n != orig->nbuttons || !same_list(out->list, orig->list))
    return 1;
  for (size_t i = 0; i < n; i++)
    if (!same(out->buttons[i].id, orig->buttons[i].id) || !same(out->buttons[i].title, orig->buttons[i].title) ||
        !same(out->buttons[i].url, orig->buttons[i].url))
      return 1;
  return 0;
}

/* rewrite hands the host the send as the hook left it (botrun.rewrite). */
static int rewrite(const botrun_outgoing *out) {
  botrun_send_opts opts = {.buttons = out->buttons, .nbuttons = out->nbuttons, .list = out->list};
  buf o = {0};
  put_request(&o, out->chat ? out->chat : "", out->text ? out->text : "", out->media, NULL, 0, &opts);
  int32_t n = host_rewrite(o.b, (int32_t)o.n);
  free(o.b);
  return n < 0 ? failed("rewrite", n) : 0;
}

int32_t botrun_run_before_send(int32_t n, botrun_send_hook fn) {
  botrun_outgoing orig;
  if (!read_hook(n, &orig)) return 1;
  /* The hook repoints out's fields; the SDK frees what it allocated. */
  botrun_outgoing out = orig;
  int rc = fn(&out);
  if (rc == BOTRUN_OK && changed(&out, &orig)) rc = rewrite(&out);
  if (rc != BOTRUN_OK && rc != BOTRUN_CANCEL) report("the before_send hook", rc, out.error);
  free_outgoing(&orig);
  return rc == BOTRUN_OK ? 0 : rc == BOTRUN_CANCEL ? 2 : 1;
}

int32_t botrun_run_after_send(int32_t n, botrun_send_hook fn) {
  botrun_outgoing orig;
  if (!read_hook(n, &orig)) return 1;
  botrun_outgoing out = orig;
  int rc = fn(&out);
  if (rc != BOTRUN_OK) report("the after_send hook", rc, out.error);
  free_outgoing(&orig);
  return rc == BOTRUN_OK ? 0 : 1;
}
