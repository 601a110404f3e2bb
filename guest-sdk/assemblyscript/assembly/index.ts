// botrun guest SDK for AssemblyScript (ABI v1, see abi/SPEC.md). A bot sets
// its handler at the top level and re-exports the entry points:
//
//   import { Context, setHandler } from "../../../guest-sdk/assemblyscript/assembly";
//   export { botrun_abi_v1, botrun_on_event } from "../../../guest-sdk/assemblyscript/assembly";
//   setHandler((ctx: Context): string | null => ctx.reply("echo: " + ctx.event.text).error());
//
// A bot with send hooks also defines their exports in its entry file (see
// beforeSend and afterSend); one without them exports neither.
//
// A handler returns null when done, or an error message (reported, not
// retried). Every call answers an Outcome (or a subclass carrying the value):
// code is Code.OK or a named Code, and error() the message to return. Strings are UTF-16 in AssemblyScript and UTF-8 on the wire: the SDK
// converts at the boundary. Do not use Math.random or trace: the host offers
// no env.seed or env.trace import.

@external("botrun", "event_read") declare function host_event_read(p: usize, n: i32): i32;
@external("botrun", "send") declare function host_send(p: usize, n: i32): i32;
@external("botrun", "enqueue") declare function host_enqueue(p: usize, n: i32): i32;
@external("botrun", "post") declare function host_post(p: usize, n: i32): i32;
@external("botrun", "result_read") declare function host_result_read(p: usize, n: i32): i32;
@external("botrun", "state_get") declare function host_state_get(k: usize, kn: i32): i32;
@external("botrun", "state_set") declare function host_state_set(k: usize, kn: i32, v: usize, vn: i32): i32;
@external("botrun", "state_delete") declare function host_state_delete(k: usize, kn: i32): i32;
@external("botrun", "log") declare function host_log(level: i32, p: usize, n: i32): void;
@external("botrun", "now_ms") declare function host_now_ms(): i64;
@external("botrun", "media_load") declare function host_media_load(index: i32): i32;
@external("botrun", "broadcast") declare function host_broadcast(p: usize, n: i32): i32;
@external("botrun", "edit") declare function host_edit(p: usize, n: i32): i32;
@external("botrun", "typing") declare function host_typing(p: usize, n: i32): i32;
@external("botrun", "fetch") declare function host_fetch(p: usize, n: i32): i32;
@external("botrun", "rewrite") declare function host_rewrite(p: usize, n: i32): i32;

export class Media {
  type: string = "";
  ref: string = "";
  url: string = "";
  mime: string = "";
  caption: string = "";
}

// Event kinds: a message (also every event of a host that sends no kind), and
// the press of a reply button or a list row.
export const KIND_MESSAGE = "message";
export const KIND_INTERACTION = "interaction";

// Interaction is the press of a reply button or a list row: id is the
// button's or row's id, as the send gave it; title its title and message
// the channel's id of the message it was on (the ref its send returned), ""
// when the channel does not say.
export class Interaction {
  id: string = "";
  title: string = "";
  message: string = "";
}

export class Event {
  media: Media[] = [];
  id: string = "";
  provider: string = "";
  chat: string = "";
  from: string = "";
  text: string = "";
  attempt: i64 = 0;
  received_at: i64 = 0;
  // kind is KIND_MESSAGE, KIND_INTERACTION (text then holds the pressed
  // title too), or a kind a later host adds.
  kind: string = KIND_MESSAGE;
  // interaction is the press, for kind KIND_INTERACTION; null otherwise.
  interaction: Interaction | null = null;
}

// Button is a button under a message: a reply button (id and title; a press
// arrives as an event of kind KIND_INTERACTION with that id) or a URL button
// (title and url, http or https; the user's app opens it). Give id or url,
// not both.
export class Button {
  id: string = "";
  title: string = "";
  url: string = "";
  // reply is a reply button.
  static reply(id: string, title: string): Button {
    const b = new Button();
    b.id = id;
    b.title = title;
    return b;
  }
  // link is a URL button.
  static link(title: string, url: string): Button {
    const b = new Button();
    b.title = title;
    b.url = url;
    return b;
  }
}

// ListRow is one choice of a List; description may be "".
export class ListRow {
  id: string;
  title: string;
  description: string;
  constructor(id: string, title: string, description: string = "") {
    this.id = id;
    this.title = title;
    this.description = description;
  }
}

// ListSection is a group of rows; title may be "".
export class ListSection {
  title: string;
  rows: ListRow[];
  constructor(title: string, rows: ListRow[]) { this.title = title; this.rows = rows; }
}

// List is a menu under a message: a button titled button opens its sections
// of rows; a picked row arrives as an interaction with the row's id.
export class List {
  button: string;
  sections: ListSection[];
  constructor(button: string, sections: ListSection[]) { this.button = button; this.sections = sections; }
}

// The ABI's bounds of a send's choices (abi/SPEC.md section 2); a channel
// may allow fewer.
export const MAX_BUTTONS: i32 = 16;
export const MAX_LIST_ROWS: i32 = 100;
export const MAX_CHOICE_ID: i32 = 256; // bytes

// SendOptions is every option of a send, for sendWith, postWith,
// enqueueWith and replyWith: key ("" for a derived key), media, at
// (enqueue's), and buttons or a list under the message. The host refuses
// with BadPayload an empty title, a button with both an id and a url (or
// neither), an id that is not printable or over MAX_CHOICE_ID bytes, a url
// that is not http(s), more than MAX_BUTTONS buttons or MAX_LIST_ROWS rows,
// a list without a button title, sections or rows, and buttons with a list.
// A channel that cannot show them refuses the send at send time: it is dead,
// never sent without them. A text the channel splits carries them on its
// last part.
export class SendOptions {
  key: string = "";
  media: Media | null = null;
  at: i64 = 0;
  buttons: Button[] = [];
  list: List | null = null;
}

// The statuses of a SendResult (abi/SPEC.md section 2); REPLAYED (below) is
// the SDK's.
export const SENT = "sent";
export const DEDUPED = "deduped";
export const DEFERRED = "deferred";
export const DEAD = "dead";
export const BYPASSED = "bypassed";
// QUEUED answers post and reply: the send is made when the handler returns.
export const QUEUED = "queued";
// SCHEDULED answers enqueue with a future at: the send is journaled and held
// until then.
export const SCHEDULED = "scheduled";
// CANCELLED answers send and enqueue when the module's before-send hook
// cancelled the send: nothing was journaled or sent.
export const CANCELLED = "cancelled";

// SendResult is the host's answer to a send. status is SENT, DEDUPED,
// DEFERRED, DEAD, BYPASSED or CANCELLED; QUEUED from post and reply;
// SCHEDULED from enqueue with a future at; or, from the SDK, REPLAYED (a
// flow's send while it replays a step already taken: no host call).
export class SendResult {
  status: string = "";
  key: string = "";
  ref: string = "";
  error: string = "";
}

// Code names every code a call can answer: OK, the host's codes
// (abi/SPEC.md section 4.1), and the SDK's own (NotSent, Failed,
// BadResult; -100 and below, never on the wire).
export enum Code {
  OK = 0,
  BadPointer = -1,
  BadPayload = -2,
  NotFound = -3,
  Unsupported = -4,
  TooLarge = -5,
  NoResult = -6,
  HostError = -7,
  MediaUnavailable = -8,
  // edit, typing: the channel refused or failed (see ChannelOutcome); the
  // event goes on.
  ChannelFailed = -9,
  // fetch: the API call got no response (see FetchOutcome); the event goes
  // on.
  FetchFailed = -10,
  // send: the send is dead or deferred (see SendOutcome.result).
  NotSent = -101,
  // a flow function returned an error of its own (see Outcome.message).
  Failed = -103,
  // the host's result (a SendResult, a FetchResponse, or MEDIA_UNAVAILABLE's
  // reason) did not parse.
  BadResult = -104,
}

// codeName is the SPEC name of a code, e.g. "TOO_LARGE".
export function codeName(code: i32): string {
  switch (code) {
    case Code.OK: return "OK";
    case Code.BadPointer: return "BAD_POINTER";
    case Code.BadPayload: return "BAD_PAYLOAD";
    case Code.NotFound: return "NOT_FOUND";
    case Code.Unsupported: return "UNSUPPORTED";
    case Code.TooLarge: return "TOO_LARGE";
    case Code.NoResult: return "NO_RESULT";
    case Code.HostError: return "HOST_ERROR";
    case Code.MediaUnavailable: return "MEDIA_UNAVAILABLE";
    case Code.ChannelFailed: return "CHANNEL_FAILED";
    case Code.FetchFailed: return "FETCH_FAILED";
    case Code.NotSent: return "NOT_SENT";
    case Code.Failed: return "FAILED";
    case Code.BadResult: return "BAD_RESULT";
  }
  return "UNKNOWN";
}

// Log levels of log().
export const LOG_DEBUG: i32 = 0;
export const LOG_INFO: i32 = 1;
export const LOG_WARN: i32 = 2;
export const LOG_ERROR: i32 = 3;

// Outcome is what every SDK call answers: code is Code.OK or why not, func
// the host function that answered. error() is null when ok, else a message
// a handler can return.
export class Outcome {
  code: i32 = Code.OK;
  func: string = "";
  message: string = "";
  get ok(): bool { return this.code == Code.OK; }
  error(): string | null {
    if (this.code == Code.OK) return null;
    if (this.message.length > 0) return this.message;
    return "botrun." + this.func + ": " + codeName(this.code);
  }
}

// failed sets o's func and code and returns it.
function failed<T extends Outcome>(o: T, func: string, code: i32): T {
  o.func = func;
  o.code = code;
  return o;
}

// SendOutcome answers send, post, enqueue and reply: result is the host's
// SendResult when code is OK, or NotSent (send: dead or deferred).
export class SendOutcome extends Outcome {
  result: SendResult = new SendResult();
}

// BroadcastOutcome answers broadcast: when code is OK, journaled is how many
// keys "<keyPrefix>:<chat>" the host journaled now and existing how many it
// had journaled already (a replay of the event, or an earlier broadcast with
// the same prefix), which are not sent again. replayed is the SDK's: a flow
// made the broadcast while it replays a step already taken (no host call).
export class BroadcastOutcome extends Outcome {
  journaled: i64 = 0;
  existing: i64 = 0;
  replayed: bool = false;
}

// ChannelOutcome answers edit and typing: code OK, or ChannelFailed with
// channelError the channel's message (the host cuts it to 512 bytes; error()
// is "botrun.edit: CHANNEL_FAILED: <channelError>"), or another code
// (Unsupported, BadPayload, TooLarge, BadResult).
export class ChannelOutcome extends Outcome {
  channelError: string = "";
}

// StateValue answers stateGet: value is null when the key is absent (code
// OK: NOT_FOUND is absence); any other code is an error, never absence.
export class StateValue extends Outcome {
  value: string | null = null;
  get found(): bool { return this.value != null; }
}

// FlowOutcome answers continueFlow: inFlow when the message was the flow's.
export class FlowOutcome extends Outcome {
  inFlow: bool = false;
}

// FlowName answers Context.inFlow: name is the chat's flow in progress, or
// null when there is none (code OK); any other code is an error, never "no
// flow".
export class FlowName extends Outcome {
  name: string | null = null;
}

// MediaUnavailableError says why loadMedia has no bytes: reason is
// "not-durable", "provider-mismatch" or "rehydrate-failed" (SPEC.md section 4).
// The message is processed all the same; only the download failed.
export class MediaUnavailableError {
  reason: string = "";
  message: string = "";
}

// MediaResult is loadMedia's answer: bytes when loaded; else code says why:
// MediaUnavailable (with unavailable's reason, which error() names),
// Unsupported (the channel cannot download media), NotFound (no such index),
// TooLarge, HostError; BadResult when the reason did not parse.
export class MediaResult extends Outcome {
  bytes: ArrayBuffer | null = null;
  unavailable: MediaUnavailableError | null = null;
}

// Request is one call of an API bot.toml names in an [[apis]] entry
// (Context.fetch): new Request("/orders/42"), then set what you need.
export class Request {
  // method is GET ("": the default), HEAD, POST, PUT, PATCH or DELETE.
  method: string = "";
  // path is the path under the API's url, with its query:
  // "/orders/42?expand=items".
  path: string;
  // headers are the request's headers; the headers bot.toml sets for the
  // API replace those of the same name.
  headers: Map<string, string> = new Map<string, string>();
  // body is the request's body (null: none), at most 1 MiB; sent as text
  // when it is UTF-8, in base64 otherwise. String.UTF8.encode(text) makes
  // one of a text.
  body: ArrayBuffer | null = null;
  // key replaces the call's Idempotency-Key, "<event id>:fetch:<n>" for the
  // event's n-th call ("": that one).
  key: string = "";
  constructor(path: string = "") { this.path = path; }
}

// Response is the API's answer, whatever its status: a 404 or a 500 is a
// Response, not an error.
export class Response {
  status: i32 = 0;
  // headers are the answer's headers (canonical names, the first value of
  // each); see header.
  headers: Map<string, string> = new Map<string, string>();
  body: ArrayBuffer = new ArrayBuffer(0);
  // replayed is true when the answer came from the journal: the event is
  // handled again (after a crash, a retry or a replay) and the call it made
  // the first time is not made again; or, in a flow, from the calls kept
  // with it (a replayed step's call, see Context.fetch).
  replayed: bool = false;
  // header is the value of the header name, compared without case, or null.
  header(name: string): string | null {
    const names = this.headers.keys();
    const want = name.toLowerCase();
    for (let i = 0; i < names.length; i++) {
      if (names[i].toLowerCase() == want) return this.headers.get(names[i]);
    }
    return null;
  }
  // text is the body as text.
  text(): string { return String.UTF8.decode(this.body); }
}

// FetchError says why fetch got no response: reason is "refused" (the
// destination is not allowed: nothing was sent), "connection", "timeout" or
// "too-large" (the answer is over the API's max_response); message says
// more ("" when the host gave none).
export class FetchError {
  reason: string = "";
  message: string = "";
}

// FetchOutcome answers fetch: response when code is OK; else code says why:
// FetchFailed (fetchError says why; error() is "botrun.fetch <api>:
// FETCH_FAILED: <reason>: <message>"; the event goes on), NotFound
// (bot.toml names no such API), BadPayload (a path that is not under the
// API's url, a method or header the host refuses), TooLarge (past
// bot.max_fetches calls in one event, or a request over 1 MiB), Unsupported
// (a host without fetch, or outside an event), HostError (the answer could
// not be journaled: the event's attempt fails), BadResult.
export class FetchOutcome extends Outcome {
  response: Response | null = null;
  fetchError: FetchError | null = null;
}

// ---- JSON: exactly the ABI's shapes; unknown fields are skipped ----
// quote is s as a JSON string. It copies runs of plain characters whole, so
// a 1 MiB text costs one pass (not a string concatenation per character).
function quote(s: string): string {
  const parts: string[] = ["\""];
  let run = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    let e: string | null = null;
    if (c == 0x22) e = "\\\"";
    else if (c == 0x5c) e = "\\\\";
    else if (c == 0x0a) e = "\\n";
    else if (c == 0x0d) e = "\\r";
    else if (c == 0x09) e = "\\t";
    else if (c < 0x20) e = "\\u00" + (c < 16 ? "0" : "") + c.toString(16);
    if (e == null) continue;
    if (i > run) parts.push(s.substring(run, i));
    parts.push(changetype<string>(e));
    run = i + 1;
  }
  if (s.length > run) parts.push(s.substring(run));
  parts.push("\"");
  return parts.join("");
}

class Reader {
  s: string;
  i: i32 = 0;
  ok: bool = true;
  constructor(s: string) { this.s = s; }
  ws(): void {
    while (this.i < this.s.length) {
      const c = this.s.charCodeAt(this.i);
      if (c != 0x20 && c != 0x09 && c != 0x0a && c != 0x0d) break;
      this.i++;
    }
  }
  peek(): i32 { this.ws(); return this.i < this.s.length ? this.s.charCodeAt(this.i) : -1; }
  expect(c: i32): bool {
    if (this.peek() != c) { this.ok = false; return false; }
    this.i++;
    return true;
  }
  // str reads a string. It copies runs of plain characters whole, so a
  // large body costs one pass (not a concatenation per character).
  str(): string {
    if (!this.expect(0x22)) return "";
    const parts: string[] = [];
    let run = this.i;
    while (this.i < this.s.length) {
      const c = this.s.charCodeAt(this.i);
      if (c != 0x22 && c != 0x5c) { this.i++; continue; }
      if (this.i > run) parts.push(this.s.substring(run, this.i));
      this.i++;
      if (c == 0x22) return parts.join("");
      const e = this.s.charCodeAt(this.i++);
      if (e == 0x6e) parts.push("\n");
      else if (e == 0x74) parts.push("\t");
      else if (e == 0x72) parts.push("\r");
      else if (e == 0x62) parts.push("\b");
      else if (e == 0x66) parts.push("\f");
      else if (e == 0x75) {
        parts.push(String.fromCharCode(<i32>parseInt(this.s.substr(this.i, 4), 16)));
        this.i += 4;
      } else parts.push(String.fromCharCode(e));
      run = this.i;
    }
    this.ok = false;
    return parts.join("");
  }
  // readBool reads true or false.
  readBool(): bool {
    this.ws();
    if (this.s.substr(this.i, 4) == "true") { this.i += 4; return true; }
    if (this.s.substr(this.i, 5) == "false") { this.i += 5; return false; }
    this.ok = false;
    return false;
  }
  num(): i64 {
    this.ws();
    const start = this.i;
    while (this.i < this.s.length) {
      const c = this.s.charCodeAt(this.i);
      if (c != 0x2d && (c < 0x30 || c > 0x39)) break;
      this.i++;
    }
    return I64.parseInt(this.s.substring(start, this.i));
  }
  skip(): void {
    const c = this.peek();
    if (c == 0x22) { this.str(); return; }
    if (c == 0x7b || c == 0x5b) {
      const close = c == 0x7b ? 0x7d : 0x5d;
      this.i++;
      if (this.peek() == close) { this.i++; return; }
      while (this.ok) {
        if (c == 0x7b) { this.str(); this.expect(0x3a); }
        this.skip();
        const d = this.peek();
        this.i++;
        if (d == close) return;
        if (d != 0x2c) { this.ok = false; return; }
      }
      return;
    }
    while (this.i < this.s.length) {
      const d = this.s.charCodeAt(this.i);
      if (d == 0x2c || d == 0x7d || d == 0x5d || d == 0x20) break;
      this.i++;
    }
  }
  // item reports whether an array has another element (first: its first,
  // opening the array), or false at its end.
  item(first: bool): bool {
    if (first) {
      if (!this.expect(0x5b)) return false;
      if (this.peek() == 0x5d) { this.i++; return false; }
      return true;
    }
    const d = this.peek();
    this.i++;
    if (d == 0x5d) return false;
    if (d != 0x2c) this.ok = false;
    return this.ok;
  }
  // keys returns the next key of an object, or null at its end.
  key(first: bool): string | null {
    if (first) {
      if (!this.expect(0x7b)) return null;
      if (this.peek() == 0x7d) { this.i++; return null; }
    } else {
      const d = this.peek();
      this.i++;
      if (d == 0x7d) return null;
      if (d != 0x2c) { this.ok = false; return null; }
    }
    const k = this.str();
    this.expect(0x3a);
    return this.ok ? k : null;
  }
}

function decodeEvent(s: string): Event | null {
  const e = new Event();
  const r = new Reader(s);
  let k = r.key(true);
  while (k !== null) {
    const key = changetype<string>(k);
    if (key == "id") e.id = r.str();
    else if (key == "provider") e.provider = r.str();
    else if (key == "chat") e.chat = r.str();
    else if (key == "from") e.from = r.str();
    else if (key == "text") e.text = r.str();
    else if (key == "attempt") e.attempt = r.num();
    else if (key == "received_at") e.received_at = r.num();
    else if (key == "kind") e.kind = r.str();
    else if (key == "interaction" && r.peek() == 0x7b) {
      const it = new Interaction();
      let ik = r.key(true);
      while (ik !== null) {
        const ikey = changetype<string>(ik);
        if (ikey == "id") it.id = r.str();
        else if (ikey == "title") it.title = r.str();
        else if (ikey == "message") it.message = r.str();
        else r.skip();
        ik = r.key(false);
      }
      e.interaction = it;
    }
    else if (key == "media" && r.peek() == 0x5b) {
      for (let more = r.item(true); more; more = r.item(false)) e.media.push(decodeMedia(r));
    }
    else r.skip();
    k = r.key(false);
  }
  // A host before interactions sends no kind: every event is a message.
  if (e.kind.length == 0) e.kind = KIND_MESSAGE;
  return r.ok ? e : null;
}

// decodeMedia reads a Media object.
function decodeMedia(r: Reader): Media {
  const m = new Media();
  let k = r.key(true);
  while (k !== null) {
    const key = changetype<string>(k);
    if (key == "type") m.type = r.str();
    else if (key == "ref") m.ref = r.str();
    else if (key == "url") m.url = r.str();
    else if (key == "mime") m.mime = r.str();
    else if (key == "caption") m.caption = r.str();
    else r.skip();
    k = r.key(false);
  }
  return m;
}

// decodeResult parses a SendResult, or returns null when it does not parse.
function decodeResult(s: string): SendResult | null {
  const o = new SendResult();
  const r = new Reader(s);
  let k = r.key(true);
  while (k !== null) {
    const key = changetype<string>(k);
    if (key == "status") o.status = r.str();
    else if (key == "key") o.key = r.str();
    else if (key == "ref") o.ref = r.str();
    else if (key == "error") o.error = r.str();
    else r.skip();
    k = r.key(false);
  }
  return r.ok && r.peek() == -1 ? o : null;
}

// decodeBroadcast fills o's counts from a BroadcastResult, or returns false
// when it does not parse.
function decodeBroadcast(s: string, o: BroadcastOutcome): bool {
  const r = new Reader(s);
  let k = r.key(true);
  while (k !== null) {
    const key = changetype<string>(k);
    if (key == "journaled" || key == "existing") {
      const c = r.peek();
      if (c < 0x30 || c > 0x39) return false;
      if (key == "journaled") o.journaled = r.num();
      else o.existing = r.num();
    } else r.skip();
    k = r.key(false);
  }
  return r.ok && r.peek() == -1;
}

// decodeUnavailable parses MEDIA_UNAVAILABLE's reason, or returns null when
// it does not parse.
function decodeUnavailable(s: string): MediaUnavailableError | null {
  const o = new MediaUnavailableError();
  const r = new Reader(s);
  let k = r.key(true);
  while (k !== null) {
    const key = changetype<string>(k);
    if (key == "reason") o.reason = r.str();
    else if (key == "message") o.message = r.str();
    else r.skip();
    k = r.key(false);
  }
  return r.ok && r.peek() == -1 ? o : null;
}

// decodeChannelError parses CHANNEL_FAILED's result, {"error":"…"}, or
// returns null when it does not parse.
function decodeChannelError(s: string): string | null {
  let msg = "";
  const r = new Reader(s);
  let k = r.key(true);
  while (k !== null) {
    if (changetype<string>(k) == "error") msg = r.str();
    else r.skip();
    k = r.key(false);
  }
  return r.ok && r.peek() == -1 ? msg : null;
}

const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// base64 is b in standard base64, padded.
function base64(buf: ArrayBuffer): string {
  const b = Uint8Array.wrap(buf);
  const out = new Uint8Array((b.length + 2) / 3 * 4);
  let o = 0;
  for (let i = 0; i < b.length; i += 3) {
    const v = (<u32>b[i] << 16) | (i + 1 < b.length ? <u32>b[i + 1] << 8 : 0) | (i + 2 < b.length ? <u32>b[i + 2] : 0);
    out[o++] = <u8>B64.charCodeAt(v >> 18);
    out[o++] = <u8>B64.charCodeAt((v >> 12) & 63);
    out[o++] = i + 1 < b.length ? <u8>B64.charCodeAt((v >> 6) & 63) : 0x3d;
    out[o++] = i + 2 < b.length ? <u8>B64.charCodeAt(v & 63) : 0x3d;
  }
  return String.UTF8.decode(out.buffer);
}

// b64Value is the value of the base64 digit c, or -1.
function b64Value(c: i32): i32 {
  if (c >= 0x41 && c <= 0x5a) return c - 0x41;
  if (c >= 0x61 && c <= 0x7a) return c - 0x61 + 26;
  if (c >= 0x30 && c <= 0x39) return c - 0x30 + 52;
  if (c == 0x2b) return 62;
  if (c == 0x2f) return 63;
  return -1;
}

// unbase64 decodes standard padded base64, or returns null when s is not
// base64.
function unbase64(s: string): ArrayBuffer | null {
  const n = s.length;
  if (n % 4 != 0) return null;
  let pad = 0;
  if (n > 0 && s.charCodeAt(n - 1) == 0x3d) pad++;
  if (n > 1 && s.charCodeAt(n - 2) == 0x3d) pad++;
  const out = new Uint8Array(n / 4 * 3 - pad);
  let o = 0;
  for (let i = 0; i < n; i += 4) {
    let v: u32 = 0;
    for (let k = 0; k < 4; k++) {
      const at = i + k;
      let d = 0;
      if (at < n - pad) {
        d = b64Value(s.charCodeAt(at));
        if (d < 0) return null;
      }
      v = (v << 6) | <u32>d;
    }
    if (o < out.length) out[o++] = <u8>(v >> 16);
    if (o < out.length) out[o++] = <u8>(v >> 8);
    if (o < out.length) out[o++] = <u8>v;
  }
  return out.buffer;
}

// validUTF8 reports whether buf is UTF-8 (as Go's utf8.Valid: no overlong
// forms, surrogates or code points past U+10FFFF).
function validUTF8(buf: ArrayBuffer): bool {
  const s = Uint8Array.wrap(buf);
  const n = s.length;
  let i = 0;
  while (i < n) {
    const c = <u32>s[i];
    if (c < 0x80) { i++; continue; }
    let more = 0;
    let cp: u32 = 0;
    let min: u32 = 0;
    if (c >= 0xc2 && c <= 0xdf) { more = 1; cp = c & 0x1f; min = 0x80; }
    else if (c >= 0xe0 && c <= 0xef) { more = 2; cp = c & 0x0f; min = 0x800; }
    else if (c >= 0xf0 && c <= 0xf4) { more = 3; cp = c & 0x07; min = 0x10000; }
    else return false;
    if (n - i <= more) return false;
    for (let k = 1; k <= more; k++) {
      const d = <u32>s[i + k];
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += more + 1;
  }
  return true;
}

// fetchRequest is the FetchRequest of req to api: the headers sorted by name
// (the same request, the same bytes), the body as text when it is UTF-8 and
// in base64 otherwise.
function fetchRequest(api: string, req: Request): string {
  const parts: string[] = ["{\"api\":" + quote(api)];
  if (req.method.length > 0) parts.push(",\"method\":" + quote(req.method));
  parts.push(",\"path\":" + quote(req.path));
  const names = req.headers.keys();
  if (names.length > 0) {
    names.sort((a: string, b: string): i32 => a < b ? -1 : a > b ? 1 : 0);
    parts.push(",\"headers\":{");
    for (let i = 0; i < names.length; i++) {
      if (i > 0) parts.push(",");
      parts.push(quote(names[i]) + ":" + quote(req.headers.get(names[i])));
    }
    parts.push("}");
  }
  const body = req.body;
  if (body != null && body.byteLength > 0) {
    if (validUTF8(body)) parts.push(",\"body\":" + quote(String.UTF8.decode(body)));
    else parts.push(",\"body_base64\":\"" + base64(body) + "\"");
  }
  if (req.key.length > 0) parts.push(",\"key\":" + quote(req.key));
  parts.push("}");
  return parts.join("");
}

// decodeFetchResponse parses a FetchResponse, or returns null when it does
// not parse.
function decodeFetchResponse(s: string): Response | null {
  const res = new Response();
  const r = new Reader(s);
  let k = r.key(true);
  while (k !== null) {
    const key = changetype<string>(k);
    if (key == "status") res.status = <i32>r.num();
    else if (key == "headers" && r.peek() == 0x7b) {
      let hk = r.key(true);
      while (hk !== null) {
        res.headers.set(changetype<string>(hk), r.str());
        hk = r.key(false);
      }
    }
    else if (key == "body") res.body = utf8(r.str());
    else if (key == "body_base64") {
      const b = unbase64(r.str());
      if (b == null) return null;
      res.body = changetype<ArrayBuffer>(b);
    }
    else if (key == "replayed") res.replayed = r.readBool();
    else r.skip();
    k = r.key(false);
  }
  return r.ok && r.peek() == -1 ? res : null;
}

// channelOp fills o, the answer of edit or typing (o.func), from the code n:
// on ChannelFailed, the channel's message from the pending result.
function channelOp(o: ChannelOutcome, n: i32): ChannelOutcome {
  if (n == 0) return o;
  if (n != Code.ChannelFailed) return failed(o, o.func, n < 0 ? n : Code.BadResult);
  // The host cuts the channel's message to 512 bytes; escaped in JSON (six
  // bytes for a '<') that is at most about 3 KiB.
  const b = new ArrayBuffer(4096);
  const got = host_result_read(changetype<usize>(b), 4096);
  if (got < 0) return failed(o, "result_read", got);
  const msg = decodeChannelError(String.UTF8.decode(b.slice(0, got)));
  if (msg == null) {
    o.message = "botrun." + o.func + ": bad result";
    return failed(o, o.func, Code.BadResult);
  }
  o.channelError = changetype<string>(msg);
  o.message = "botrun." + o.func + ": CHANNEL_FAILED" + (o.channelError.length > 0 ? ": " + o.channelError : "");
  return failed(o, o.func, Code.ChannelFailed);
}

// mediaField is the request's "media" field for media, or "" for none.
function mediaField(media: Media | null): string {
  if (media == null) return "";
  const m = changetype<Media>(media);
  let f = ",\"media\":{\"type\":" + quote(m.type);
  if (m.ref.length > 0) f += ",\"ref\":" + quote(m.ref);
  if (m.url.length > 0) f += ",\"url\":" + quote(m.url);
  if (m.mime.length > 0) f += ",\"mime\":" + quote(m.mime);
  if (m.caption.length > 0) f += ",\"caption\":" + quote(m.caption);
  return f + "}";
}

// choicesFields are the request's "buttons" and "list" fields, each when
// given.
function choicesFields(buttons: Button[], list: List | null): string {
  const parts: string[] = [];
  if (buttons.length > 0) {
    parts.push(",\"buttons\":[");
    for (let i = 0; i < buttons.length; i++) {
      const b = buttons[i];
      if (i > 0) parts.push(",");
      parts.push("{");
      if (b.id.length > 0) parts.push("\"id\":" + quote(b.id) + ",");
      parts.push("\"title\":" + quote(b.title));
      if (b.url.length > 0) parts.push(",\"url\":" + quote(b.url));
      parts.push("}");
    }
    parts.push("]");
  }
  if (list != null) {
    const l = changetype<List>(list);
    parts.push(",\"list\":{\"button\":" + quote(l.button) + ",\"sections\":[");
    for (let i = 0; i < l.sections.length; i++) {
      const sec = l.sections[i];
      if (i > 0) parts.push(",");
      parts.push("{");
      if (sec.title.length > 0) parts.push("\"title\":" + quote(sec.title) + ",");
      parts.push("\"rows\":[");
      for (let j = 0; j < sec.rows.length; j++) {
        const row = sec.rows[j];
        if (j > 0) parts.push(",");
        parts.push("{\"id\":" + quote(row.id) + ",\"title\":" + quote(row.title));
        if (row.description.length > 0) parts.push(",\"description\":" + quote(row.description));
        parts.push("}");
      }
      parts.push("]}");
    }
    parts.push("]}");
  }
  return parts.join("");
}

// ---- host calls ----
function utf8(s: string): ArrayBuffer { return String.UTF8.encode(s); }

function pull(n: i32): ArrayBuffer | null {
  if (n < 0) return null;
  const b = new ArrayBuffer(n);
  if (n > 0 && host_result_read(changetype<usize>(b), n) != n) return null;
  return b;
}

export function log(level: i32, msg: string): void {
  const b = utf8(msg);
  host_log(level, changetype<usize>(b), b.byteLength);
}

export function nowMs(): i64 { return host_now_ms(); }

const FLOW_KEY = "botrun.flow";

// The host function a send goes through.
const SEND: i32 = 0;
const ENQUEUE: i32 = 1;
const POST: i32 = 2;

export class Context {
  event: Event;
  // replaying is set while a flow replays the steps it already took: its
  // sends are not made.
  replaying: bool = false;
  // calls are the kept calls of the flow running now (null outside a flow):
  // fetch answers a replayed step's calls from them.
  calls: FlowCalls | null = null;
  constructor(e: Event) { this.event = e; }

  // send sends text to chat (key: "" for a derived key) and waits for the
  // outbox's answer; a dead or deferred send is Code.NotSent. at is
  // enqueue's: the host refuses a send with a non-zero at (Code.BadPayload),
  // as it refuses any request it does not accept.
  send(chat: string, text: string, key: string = "", media: Media | null = null, at: i64 = 0): SendOutcome {
    const opts = new SendOptions();
    opts.key = key;
    opts.media = media;
    opts.at = at;
    return this.sendWith(chat, text, opts);
  }

  // sendWith is send with every option (SendOptions: buttons and a list
  // too).
  sendWith(chat: string, text: string, opts: SendOptions): SendOutcome {
    const o = this.call(SEND, chat, text, opts);
    if (o.ok && (o.result.status == DEAD || o.result.status == DEFERRED)) {
      o.code = Code.NotSent;
      o.message = "send " + o.result.key + " " + o.result.status + ": " + o.result.error;
    }
    return o;
  }

  // reply posts text to the event's chat (see post).
  reply(text: string): SendOutcome { return this.post(this.event.chat, text); }

  // post queues a send of text to chat and returns at once (status
  // "queued", with its key): the host makes the handler's posted sends, in
  // order, when it returns, so the instance is free while they wait
  // (abi/SPEC.md section 4.3). at is enqueue's: the host refuses a post
  // with a non-zero at (Code.BadPayload).
  post(chat: string, text: string, key: string = "", media: Media | null = null, at: i64 = 0): SendOutcome {
    const opts = new SendOptions();
    opts.key = key;
    opts.media = media;
    opts.at = at;
    return this.call(POST, chat, text, opts);
  }

  // postWith is post with every option (SendOptions: buttons and a list
  // too).
  postWith(chat: string, text: string, opts: SendOptions): SendOutcome { return this.call(POST, chat, text, opts); }

  // replyWith posts text to the event's chat with every option.
  replyWith(text: string, opts: SendOptions): SendOutcome { return this.call(POST, this.event.chat, text, opts); }

  // enqueue journals a send for the host to deliver in the background
  // (status DEFERRED). A non-zero at (Unix milliseconds) holds it until
  // then: the host answers SCHEDULED and sends it once when it is due, across
  // restarts (`botrun outbox list --state scheduled` shows it, `botrun
  // discard KEY` cancels it). The clock is the event's: compute at from
  // ctx.event.received_at (or nowMs()), e.g. + 60000. 0, or a time already
  // past, sends as soon as possible; a negative at is Code.BadPayload.
  enqueue(chat: string, text: string, key: string = "", at: i64 = 0, media: Media | null = null): SendOutcome {
    const opts = new SendOptions();
    opts.key = key;
    opts.media = media;
    opts.at = at;
    return this.call(ENQUEUE, chat, text, opts);
  }

  // enqueueWith is enqueue with every option (SendOptions: buttons and a
  // list too).
  enqueueWith(chat: string, text: string, opts: SendOptions): SendOutcome { return this.call(ENQUEUE, chat, text, opts); }

  private call(fn: i32, chat: string, text: string, opts: SendOptions): SendOutcome {
    const o = new SendOutcome();
    o.func = fn == ENQUEUE ? "enqueue" : fn == POST ? "post" : "send";
    if (this.replaying) {
      // The host numbers sends, so one that does not reach it takes no
      // derived key: the live sends keep their numbers on every replay.
      o.result.status = REPLAYED;
      return o;
    }
    let req = "{\"chat\":" + quote(chat) + ",\"text\":" + quote(text) + mediaField(opts.media);
    if (opts.key.length > 0) req += ",\"idempotency_key\":" + quote(opts.key);
    if (opts.at != 0) req += ",\"at\":" + opts.at.toString();
    const b = utf8(req + choicesFields(opts.buttons, opts.list) + "}");
    const n = fn == ENQUEUE ? host_enqueue(changetype<usize>(b), b.byteLength)
      : fn == POST ? host_post(changetype<usize>(b), b.byteLength)
      : host_send(changetype<usize>(b), b.byteLength);
    const out = pull(n);
    if (out == null) return failed(o, o.func, n < 0 ? n : Code.NoResult);
    const res = decodeResult(String.UTF8.decode(changetype<ArrayBuffer>(out)));
    if (res == null) {
      o.message = "botrun." + o.func + ": bad result";
      return failed(o, o.func, Code.BadResult);
    }
    o.result = changetype<SendResult>(res);
    return o;
  }

  // broadcast journals one send of text to each of chats, under the key
  // "<keyPrefix>:<chat>", for the host's sweeper to deliver, and returns at
  // once with the counts. A chat listed twice is sent once; a key journaled
  // before (the event's retry, or an earlier broadcast with the same prefix)
  // is not sent again, so name the prefix after what is announced
  // ("news:42"), not after the event. A non-zero at (Unix milliseconds) holds
  // every send until then, as enqueue's; media attaches one item (text may
  // then be ""). A broadcast counts once against bot.max_sends. Codes:
  // BadPayload (no chats, an empty chat or prefix, no text and no media, a
  // negative at, a control character in a chat or the prefix), TooLarge
  // (over 1 MiB, or more chats than bot.max_broadcast), Unsupported (a host
  // without broadcast), HostError (the journal failed, or past
  // bot.max_sends: the event's attempt fails), BadResult.
  broadcast(chats: string[], text: string, keyPrefix: string, at: i64 = 0, media: Media | null = null): BroadcastOutcome {
    const o = new BroadcastOutcome();
    o.func = "broadcast";
    if (this.replaying) {
      // As a flow's sends: the host numbers a broadcast like a send.
      o.replayed = true;
      return o;
    }
    const parts: string[] = ["{\"chats\":["];
    for (let i = 0; i < chats.length; i++) {
      if (i > 0) parts.push(",");
      parts.push(quote(chats[i]));
    }
    parts.push("],\"text\":" + quote(text) + mediaField(media) + ",\"key_prefix\":" + quote(keyPrefix));
    if (at != 0) parts.push(",\"at\":" + at.toString());
    parts.push("}");
    const b = utf8(parts.join(""));
    const n = host_broadcast(changetype<usize>(b), b.byteLength);
    const out = pull(n);
    if (out == null) return failed(o, "broadcast", n < 0 ? n : Code.NoResult);
    if (!decodeBroadcast(String.UTF8.decode(changetype<ArrayBuffer>(out)), o)) {
      o.journaled = 0;
      o.existing = 0;
      o.message = "botrun.broadcast: bad result";
      return failed(o, "broadcast", Code.BadResult);
    }
    return o;
  }

  // edit replaces the text of a message the bot sent in chat: message is the
  // ref its send returned (a post's send is made after the handler returns,
  // so its ref is not known: send what you mean to edit). The channel edits
  // it now; the edit is not journaled (a retry of the event edits again,
  // which changes nothing), takes no number in the event's derived keys and
  // does not count against bot.max_sends. Codes: ChannelFailed (the channel
  // refused or failed it: channelError says why; the event goes on),
  // Unsupported (the channel cannot edit, e.g. WhatsApp or Twilio, or a host
  // without edit), BadPayload (an empty chat, message or text, or a chat or
  // message that is not printable), TooLarge (over 1 MiB), BadResult. While
  // a flow replays a step already taken it makes no call (code OK).
  edit(chat: string, message: string, text: string): ChannelOutcome {
    const o = new ChannelOutcome();
    o.func = "edit";
    if (this.replaying) return o; // the step's edit was made with the message that took it
    const b = utf8("{\"chat\":" + quote(chat) + ",\"message\":" + quote(message) + ",\"text\":" + quote(text) + "}");
    return channelOp(o, host_edit(changetype<usize>(b), b.byteLength));
  }

  // typing shows "typing…" in chat for a few seconds (or until the bot's
  // next message), where the channel has it: webchat, Telegram, and WhatsApp
  // (in answer to the event's message, which it marks read). Not journaled,
  // not a send; its codes are edit's (Unsupported on Twilio). A bot usually
  // ignores them: the indicator is a courtesy. While a flow replays a step
  // already taken it makes no call.
  typing(chat: string): ChannelOutcome {
    const o = new ChannelOutcome();
    o.func = "typing";
    if (this.replaying) return o;
    const b = utf8("{\"chat\":" + quote(chat) + "}");
    return channelOp(o, host_typing(changetype<usize>(b), b.byteLength));
  }

  // fetch calls api, an [[apis]] entry of bot.toml, through the host, which
  // adds the entry's headers (the bot never sees them) and an
  // Idempotency-Key. The answer is journaled before fetch returns: when the
  // event is handled again, the same call gets the same answer
  // (Response.replayed) without calling the API again. See FetchOutcome for
  // the codes. A module that never calls fetch does not import it, so it
  // loads on a host without it.
  //
  // In a flow, a step's calls are kept with the flow (the chat's state key
  // "botrun.flow.calls", committed with each message): when a later message
  // replays the step, its calls are answered from there (marked replayed, or
  // the kept FetchFailed), and not made again, however many messages the
  // flow takes. A call whose API, method or path differs from the kept one
  // at its place (the module changed) is made anew. An answer too large for
  // the chat's state is not kept (logged): the replayed step calls again
  // under that message's Idempotency-Key. The kept calls' format is SPEC.md
  // section 7's, shared by every SDK.
  fetch(api: string, req: Request): FetchOutcome {
    if (this.calls == null) return this.fetchHost(api, req);
    const calls = changetype<FlowCalls>(this.calls);
    const id = utf8(api + " " + (req.method.length > 0 ? req.method : "GET") + " " + req.path);
    if (this.replaying) {
      const kept = calls.take(api, id);
      if (kept != null) return changetype<FetchOutcome>(kept);
    }
    const o = this.fetchHost(api, req);
    if (!this.replaying) calls.keep(id, o);
    return o;
  }

  // fetchHost makes the call through the host.
  private fetchHost(api: string, req: Request): FetchOutcome {
    const o = new FetchOutcome();
    o.func = "fetch";
    const b = utf8(fetchRequest(api, req));
    const n = host_fetch(changetype<usize>(b), b.byteLength);
    if (n == Code.FetchFailed) {
      // The host cuts the message to 160 bytes: the FetchError's JSON is at
      // most 1 KiB.
      const buf = new ArrayBuffer(4096);
      const got = host_result_read(changetype<usize>(buf), 4096);
      if (got < 0) return failed(o, "result_read", got);
      const u = decodeUnavailable(String.UTF8.decode(buf.slice(0, got)));
      if (u == null) {
        o.message = "botrun.fetch: bad result";
        return failed(o, "fetch", Code.BadResult);
      }
      const e = new FetchError();
      e.reason = changetype<MediaUnavailableError>(u).reason;
      e.message = changetype<MediaUnavailableError>(u).message;
      o.fetchError = e;
      o.message = "botrun.fetch " + api + ": FETCH_FAILED: " + e.reason + (e.message.length > 0 ? ": " + e.message : "");
      return failed(o, "fetch", Code.FetchFailed);
    }
    const out = pull(n);
    if (out == null) return failed(o, "fetch", n < 0 ? n : Code.NoResult);
    const res = decodeFetchResponse(String.UTF8.decode(changetype<ArrayBuffer>(out)));
    if (res == null) {
      o.message = "botrun.fetch: bad result";
      return failed(o, "fetch", Code.BadResult);
    }
    o.response = res;
    return o;
  }

  // loadMedia downloads the bytes of event.media[index] through the host.
  loadMedia(index: i32): MediaResult {
    const res = new MediaResult();
    const n = host_media_load(index);
    if (n == Code.MediaUnavailable) {
      // The reason is a JSON object of at most 1 KiB (SPEC.md section 4).
      const b = new ArrayBuffer(1024);
      const got = host_result_read(changetype<usize>(b), 1024);
      if (got < 0) return failed(res, "result_read", got);
      const u = decodeUnavailable(String.UTF8.decode(b.slice(0, got)));
      if (u == null) {
        res.message = "botrun.media_load: bad result";
        return failed(res, "media_load", Code.BadResult);
      }
      const why = changetype<MediaUnavailableError>(u);
      res.unavailable = why;
      res.message = "media unavailable: " + why.reason + (why.message.length > 0 ? ": " + why.message : "");
      return failed(res, "media_load", Code.MediaUnavailable);
    }
    const out = pull(n);
    if (out == null) return failed(res, "media_load", n < 0 ? n : Code.NoResult);
    res.bytes = out;
    return res;
  }

  // stateGet reads the value of key in this chat: value null when absent;
  // UNSUPPORTED, TOO_LARGE, BAD_PAYLOAD and HOST_ERROR are codes, never
  // absence (abi/SPEC.md section 4).
  stateGet(key: string): StateValue {
    const res = new StateValue();
    const k = utf8(key);
    const n = host_state_get(changetype<usize>(k), k.byteLength);
    if (n == Code.NotFound) { res.func = "state_get"; return res; }
    const out = pull(n);
    if (out == null) return failed(res, "state_get", n < 0 ? n : Code.NoResult);
    res.value = String.UTF8.decode(changetype<ArrayBuffer>(out));
    return res;
  }

  // stateSet writes a value; it commits with the event.
  stateSet(key: string, value: string): Outcome {
    const k = utf8(key), v = utf8(value);
    return setState(k, v);
  }

  // stateDelete removes a value; it commits with the event.
  stateDelete(key: string): Outcome {
    const k = utf8(key);
    const n = host_state_delete(changetype<usize>(k), k.byteLength);
    const o = new Outcome();
    return n < 0 ? failed(o, "state_delete", n) : o;
  }

  // inFlow reads the chat's flow in progress: name is null when there is
  // none, or when its state does not parse (continueFlow forgets it). An
  // error reading the state is a code, never "no flow".
  inFlow(): FlowName {
    const res = new FlowName();
    const k = utf8(FLOW_KEY);
    const n = host_state_get(changetype<usize>(k), k.byteLength);
    if (n == Code.NotFound) return res;
    const st = pull(n);
    if (st == null) return failed(res, "state_get", n < 0 ? n : Code.NoResult);
    const fields = decodeFlow(changetype<ArrayBuffer>(st));
    if (fields != null) res.name = changetype<string[]>(fields)[0];
    return res;
  }

  // start begins the flow in this chat.
  start(flow: Flow): Outcome { return runFlow(this, flow, []); }

  // continueFlow feeds this message to the chat's flow in progress; inFlow
  // is false when there is none. A state that does not parse, or names a
  // flow not in flows, is deleted (logged) and inFlow is false: handle the
  // message as a normal message.
  continueFlow(flows: Flow[]): FlowOutcome {
    const res = new FlowOutcome();
    // The raw bytes: a flow state may hold any bytes (SPEC.md section 7).
    const k = utf8(FLOW_KEY);
    const n = host_state_get(changetype<usize>(k), k.byteLength);
    if (n == Code.NotFound) return res;
    const st = pull(n);
    if (st == null) return failed(res, "state_get", n < 0 ? n : Code.NoResult);
    const fields = decodeFlow(changetype<ArrayBuffer>(st));
    if (fields == null) {
      log(LOG_WARN, "botrun flow: forgetting the chat's flow: its state is not a sequence of netstrings (SPEC.md section 7); the message is handled as a normal message");
      const d = this.stateDelete(FLOW_KEY);
      return d.ok ? res : failed(res, d.func, d.code);
    }
    const parts = changetype<string[]>(fields);
    const answers = parts.slice(1);
    answers.push(this.event.text);
    for (let i = 0; i < flows.length; i++) {
      if (flows[i].name == parts[0]) {
        const o = runFlow(this, flows[i], answers);
        res.inFlow = true;
        res.message = o.message;
        return o.ok ? res : failed(res, o.func, o.code);
      }
    }
    log(LOG_WARN, "botrun flow: forgetting the chat's flow \"" + parts[0] + "\": this module has no flow of that name; the message is handled as a normal message");
    const d = this.stateDelete(FLOW_KEY);
    return d.ok ? res : failed(res, d.func, d.code);
  }
}

function setState(k: ArrayBuffer, v: ArrayBuffer): Outcome {
  const n = host_state_set(changetype<usize>(k), k.byteLength, changetype<usize>(v), v.byteLength);
  const o = new Outcome();
  return n < 0 ? failed(o, "state_set", n) : o;
}

// ---- flows: state "botrun.flow" = netstrings (SPEC.md section 7): the
// flow's name, then each answer in order ----
export const WAITING = "botrun flow: waiting for an answer";

// REPLAYED is the status of a send a flow makes while it replays a step
// already taken.
export const REPLAYED = "replayed";

// FlowContext is what a flow function gets. The function is re-run from the
// start for each message with the answers so far; while it replays the steps
// it already took (up to the ask that returns this message's answer) its
// sends are not made, so a reply between two questions goes out once (edit
// and typing make no call and answer OK, a broadcast is marked replayed), and
// its fetch calls are answered from the answers kept with the flow (see
// Context.fetch).
export class FlowContext {
  ctx: Context;
  answers: string[];
  asked: i32 = 0;
  // failed is the question's send when the host refused it: the flow ends
  // with its code.
  failed: Outcome | null = null;
  constructor(ctx: Context, answers: string[]) { this.ctx = ctx; this.answers = answers; }
  // ask returns the answer, or sends the question and returns null: return
  // WAITING from the flow then (if the send failed, the flow's outcome is
  // the send's).
  ask(question: string): string | null {
    this.asked++;
    if (this.asked <= this.answers.length) {
      if (this.asked == this.answers.length) {
        this.ctx.replaying = false; // this message's answer: what follows is new
        if (this.ctx.calls != null) {
          const calls = changetype<FlowCalls>(this.ctx.calls);
          if (calls.next < calls.ends.length) {
            calls.truncate(calls.next); // kept calls the replayed steps no longer made
            calls.dirty = true;
          }
        }
      }
      return this.answers[this.asked - 1];
    }
    const o = this.ctx.reply(question);
    if (!o.ok) this.failed = o;
    return null;
  }
}

export class Flow {
  name: string;
  fn: (f: FlowContext) => string | null;
  constructor(name: string, fn: (f: FlowContext) => string | null) { this.name = name; this.fn = fn; }
}

// Netstrings reads netstrings (SPEC.md section 7: no leading zero, nothing
// cut short) from b, of n bytes, from at.
class Netstrings {
  b: Uint8Array;
  n: i32;
  at: i32;
  // start and len are where the bytes of the netstring next read are.
  start: i32 = 0;
  len: i32 = 0;
  constructor(b: Uint8Array, at: i32, n: i32) { this.b = b; this.at = at; this.n = n; }
  // next reads the netstring at at, and at moves past it; false when there
  // is none.
  next(): bool {
    const b = this.b, n = this.n, at = this.at;
    let len = 0;
    let i = at;
    for (; i < n && b[i] >= 0x30 && b[i] <= 0x39; i++) {
      if (i > at && len == 0) return false; // a leading zero
      if (len > n / 10) return false; // longer than the value
      len = len * 10 + <i32>(b[i] - 0x30);
      if (len > n) return false;
    }
    if (i == at || i >= n || b[i] != 0x3a || len >= n - i - 1 || b[i + 1 + len] != 0x2c) return false;
    this.start = i + 1;
    this.len = len;
    this.at = i + 2 + len;
    return true;
  }
  // bytes are the bytes of the netstring read last.
  bytes(): ArrayBuffer { return this.b.slice(this.start, this.start + this.len).buffer; }
  text(): string { return String.UTF8.decode(this.bytes()); }
}

// decodeFlow returns the fields of a flow state (the name, then the answers),
// or null when the value is not a non-empty sequence of netstrings.
function decodeFlow(buf: ArrayBuffer): string[] | null {
  const r = new Netstrings(Uint8Array.wrap(buf), 0, buf.byteLength);
  const fields: string[] = [];
  while (r.at < r.n) {
    if (!r.next()) return null;
    fields.push(r.text());
  }
  return fields.length > 0 ? fields : null;
}

// Bytes builds netstrings.
class Bytes {
  parts: ArrayBuffer[] = [];
  total: i32 = 0;
  add(b: ArrayBuffer): void {
    this.parts.push(b);
    this.total += b.byteLength;
  }
  netstring(v: ArrayBuffer): void {
    this.add(utf8(v.byteLength.toString() + ":"));
    this.add(v);
    this.add(utf8(","));
  }
  join(): ArrayBuffer {
    const out = new Uint8Array(this.total);
    let at = 0;
    for (let i = 0; i < this.parts.length; i++) {
      out.set(Uint8Array.wrap(this.parts[i]), at);
      at += this.parts[i].byteLength;
    }
    return out.buffer;
  }
}

function encodeFlow(name: string, answers: string[]): ArrayBuffer {
  const o = new Bytes();
  o.netstring(utf8(name));
  for (let i = 0; i < answers.length; i++) o.netstring(utf8(answers[i]));
  return o.join();
}

// ---- a flow's API calls: state "botrun.flow.calls" (SPEC.md section 7),
// netstrings: for each call the flow made, in order, its id "<api> <method>
// <path>", then "R", the status, the number of headers, each header's name
// and value (sorted by name, byte order) and the body; or "E", the reason
// and the message of a call that got no response ----
const FLOW_CALLS_KEY = "botrun.flow.calls";

// decimal reads a number of the kept calls, the netstring r read last: 1 to
// 9 digits, no leading zero; -1 when it is not one.
function decimal(r: Netstrings): i32 {
  const b = r.b, s = r.start, n = r.len;
  if (n == 0 || n > 9 || (b[s] == 0x30 && n > 1)) return -1;
  let v = 0;
  for (let i = s; i < s + n; i++) {
    if (b[i] < 0x30 || b[i] > 0x39) return -1;
    v = v * 10 + <i32>(b[i] - 0x30);
  }
  return v;
}

// compareBytes compares a[as, as+an) with b[bs, bs+bn) in byte order.
function compareBytes(a: Uint8Array, as: i32, an: i32, b: Uint8Array, bs: i32, bn: i32): i32 {
  const n = an < bn ? an : bn;
  for (let i = 0; i < n; i++) {
    if (a[as + i] != b[bs + i]) return a[as + i] < b[bs + i] ? -1 : 1;
  }
  return an < bn ? -1 : an > bn ? 1 : 0;
}

// KeptCall is a kept call read in place: where its fields are in the kept
// calls' bytes.
class KeptCall {
  idStart: i32 = 0;
  idLen: i32 = 0;
  // failed is "E" (reason and message); else "R" (the rest).
  failed: bool = false;
  reasonStart: i32 = 0;
  reasonLen: i32 = 0;
  messageStart: i32 = 0;
  messageLen: i32 = 0;
  status: i32 = 0;
  nheaders: i32 = 0;
  // headers is where the headers' netstrings begin.
  headers: i32 = 0;
  bodyStart: i32 = 0;
  bodyLen: i32 = 0;
}

// readCall reads the call at r.at, and r.at moves past it; null when the
// bytes there are not a call the SDKs write (a field missing, a kind other
// than R or E, a number that is not decimal, the headers not sorted by name
// or a name twice). Each header read consumes bytes, so no number in the
// value makes it run longer than the value.
function readCall(r: Netstrings): KeptCall | null {
  const c = new KeptCall();
  if (!r.next()) return null;
  c.idStart = r.start;
  c.idLen = r.len;
  if (!r.next() || r.len != 1) return null;
  const kind = r.b[r.start];
  if (kind == 0x45) { // E
    c.failed = true;
    if (!r.next()) return null;
    c.reasonStart = r.start;
    c.reasonLen = r.len;
    if (!r.next()) return null;
    c.messageStart = r.start;
    c.messageLen = r.len;
    return c;
  }
  if (kind != 0x52) return null; // R
  if (!r.next() || (c.status = decimal(r)) < 0) return null;
  if (!r.next() || (c.nheaders = decimal(r)) < 0) return null;
  c.headers = r.at;
  let prevStart = -1, prevLen = 0;
  for (let i = 0; i < c.nheaders; i++) {
    if (!r.next()) return null;
    if (prevStart >= 0 && compareBytes(r.b, prevStart, prevLen, r.b, r.start, r.len) >= 0) return null; // not sorted, or a name twice
    prevStart = r.start;
    prevLen = r.len;
    if (!r.next()) return null;
  }
  if (!r.next()) return null;
  c.bodyStart = r.start;
  c.bodyLen = r.len;
  return c;
}

// FlowCalls are the kept calls of the flow running now: enc holds them as
// the state does, ends[i] is where call i ends in it.
export class FlowCalls {
  loaded: bool = false;
  // dirty says the kept calls changed in this run.
  dirty: bool = false;
  enc: ArrayBuffer = new ArrayBuffer(0);
  ends: i32[] = [];
  // next is the kept call a replayed step's next call reads.
  next: i32 = 0;

  // truncate keeps the first n calls only.
  truncate(n: i32): void {
    const end = n > 0 ? this.ends[n - 1] : 0;
    this.ends.length = n;
    this.enc = this.enc.slice(0, end);
  }

  // load reads the kept calls once, when a replayed step first calls fetch.
  // A value it cannot read, or that does not parse, is as none (the calls
  // are made again): nothing of it is kept, not even a prefix.
  load(): void {
    if (this.loaded) return;
    this.loaded = true;
    const k = utf8(FLOW_CALLS_KEY);
    const n = host_state_get(changetype<usize>(k), k.byteLength);
    const st = pull(n);
    if (st == null) return;
    const b = changetype<ArrayBuffer>(st);
    const r = new Netstrings(Uint8Array.wrap(b), 0, b.byteLength);
    const ends: i32[] = [];
    while (r.at < r.n) {
      if (readCall(r) == null) return;
      ends.push(r.at);
    }
    this.enc = b;
    this.ends = ends;
  }

  // take answers a replayed step's call (id) from the kept call at its
  // place, if that one has the same id, as the host answered the message
  // that took the step; null when there is none: the call is made through
  // the host.
  take(api: string, id: ArrayBuffer): FetchOutcome | null {
    this.load();
    if (this.next >= this.ends.length) return null;
    const b = Uint8Array.wrap(this.enc);
    const r = new Netstrings(b, this.next > 0 ? this.ends[this.next - 1] : 0, this.ends[this.next]);
    const kept = readCall(r);
    if (kept == null) return null;
    const c = changetype<KeptCall>(kept);
    if (compareBytes(b, c.idStart, c.idLen, Uint8Array.wrap(id), 0, id.byteLength) != 0) return null;
    this.next++;
    const o = new FetchOutcome();
    o.func = "fetch";
    if (c.failed) {
      const e = new FetchError();
      e.reason = String.UTF8.decode(this.enc.slice(c.reasonStart, c.reasonStart + c.reasonLen));
      e.message = String.UTF8.decode(this.enc.slice(c.messageStart, c.messageStart + c.messageLen));
      o.fetchError = e;
      o.message = "botrun.fetch " + api + ": FETCH_FAILED: " + e.reason + (e.message.length > 0 ? ": " + e.message : "");
      return failed(o, "fetch", Code.FetchFailed);
    }
    const res = new Response();
    res.status = c.status;
    const h = new Netstrings(b, c.headers, this.enc.byteLength);
    for (let i = 0; i < c.nheaders; i++) {
      h.next();
      const name = h.text();
      h.next();
      res.headers.set(name, h.text());
    }
    res.body = this.enc.slice(c.bodyStart, c.bodyStart + c.bodyLen);
    res.replayed = true;
    o.response = res;
    return o;
  }

  // keep appends the answer of a call of the step this message takes (o),
  // after dropping what the replayed steps did not read (they no longer make
  // it). A call the host refused (another code) got no answer and is not
  // kept.
  keep(id: ArrayBuffer, o: FetchOutcome): void {
    const out = new Bytes();
    out.add(this.enc.slice(0, this.next > 0 ? this.ends[this.next - 1] : 0));
    out.netstring(id);
    if (o.ok && o.response != null) {
      const res = changetype<Response>(o.response);
      out.netstring(utf8("R"));
      out.netstring(utf8(res.status.toString()));
      out.netstring(utf8(res.headers.size.toString()));
      // sorted by name, byte order (an insertion sort): the same answer,
      // the same bytes
      const names = res.headers.keys();
      const raw: ArrayBuffer[] = [];
      for (let i = 0; i < names.length; i++) raw.push(utf8(names[i]));
      for (let i = 1; i < names.length; i++) {
        const name = names[i], nb = raw[i];
        let j = i;
        for (; j > 0 && compareBytes(Uint8Array.wrap(raw[j - 1]), 0, raw[j - 1].byteLength, Uint8Array.wrap(nb), 0, nb.byteLength) > 0; j--) {
          raw[j] = raw[j - 1];
          names[j] = names[j - 1];
        }
        raw[j] = nb;
        names[j] = name;
      }
      for (let i = 0; i < names.length; i++) {
        out.netstring(raw[i]);
        out.netstring(utf8(res.headers.get(names[i])));
      }
      out.netstring(res.body);
    } else if (o.code == Code.FetchFailed && o.fetchError != null) {
      const e = changetype<FetchError>(o.fetchError);
      out.netstring(utf8("E"));
      out.netstring(utf8(e.reason));
      out.netstring(utf8(e.message));
    } else return;
    this.ends.length = this.next;
    this.enc = out.join();
    this.ends.push(this.enc.byteLength);
    this.next = this.ends.length;
    this.dirty = true;
  }

  // save writes the kept calls when this run changed them; an answer over
  // the chat's state limits is not kept (logged).
  save(ctx: Context): Outcome {
    if (!this.dirty) return new Outcome();
    const o = setState(utf8(FLOW_CALLS_KEY), this.enc);
    if (o.code != Code.TooLarge) return o;
    log(LOG_WARN, "botrun flow: the answers of the flow's API calls are too large for the chat's state (bot.max_chat_state): a later message of the flow calls its APIs again");
    return ctx.stateDelete(FLOW_CALLS_KEY);
  }
}

function runFlow(ctx: Context, flow: Flow, answers: string[]): Outcome {
  const f = new FlowContext(ctx, answers);
  ctx.replaying = answers.length > 0;
  // A new flow starts with no kept calls; a continued one reads them when a
  // replayed step first calls fetch.
  const calls = new FlowCalls();
  calls.loaded = answers.length == 0;
  const outer = ctx.calls;
  ctx.calls = calls;
  const err = flow.fn(f);
  ctx.calls = outer;
  if (ctx.replaying) {
    ctx.replaying = false;
    log(LOG_WARN, "botrun flow: flow \"" + flow.name + "\" ended before the question this message answers (was the module changed?); sends of the steps it replayed were not repeated");
  }
  if (f.failed != null) return changetype<Outcome>(f.failed);
  if (err != null && changetype<string>(err) == WAITING) {
    const s = calls.save(ctx);
    if (!s.ok) return s;
    return setState(utf8(FLOW_KEY), encodeFlow(flow.name, answers));
  }
  if (err != null) {
    const o = failed(new Outcome(), "flow", Code.Failed);
    o.message = changetype<string>(err);
    return o;
  }
  // Finished: its kept calls go with it, if it had any.
  if (calls.ends.length > 0 || calls.dirty) {
    const d = ctx.stateDelete(FLOW_CALLS_KEY);
    if (!d.ok) return d;
  }
  return ctx.stateDelete(FLOW_KEY);
}

// ---- entry points ----
let handler: ((ctx: Context) => string | null) | null = null;

export function setHandler(h: (ctx: Context) => string | null): void { handler = h; }

export function botrun_abi_v1(): void {}

// readPayload reads the n bytes of the event (or the send hook's payload),
// or logs why not and returns null.
function readPayload(n: i32): string | null {
  const raw = new ArrayBuffer(n);
  const got = host_event_read(changetype<usize>(raw), n);
  if (got != n) {
    log(LOG_ERROR, "botrun sdk: event_read returned " + got.toString() + ", want " + n.toString());
    return null;
  }
  return String.UTF8.decode(raw);
}

export function botrun_on_event(n: i32): i32 {
  const raw = readPayload(n);
  if (raw == null) return 1;
  const e = decodeEvent(changetype<string>(raw));
  if (e == null) { log(LOG_ERROR, "botrun sdk: bad event"); return 1; }
  if (handler == null) { log(LOG_ERROR, "botrun sdk: no handler: call setHandler at the top level"); return 1; }
  const h = changetype<(ctx: Context) => string | null>(handler);
  const err = h(new Context(changetype<Event>(e)));
  if (err != null) { log(LOG_ERROR, changetype<string>(err)); return 1; }
  return 0;
}

// ---- send hooks (abi/SPEC.md section 4.7) ----
// A bot opts in to a hook by exporting it from its entry file, so that a bot
// without hooks exports (and pays for) none:
//
//   export function botrun_before_send(n: i32): i32 { return beforeSend(n, sign); }
//   export function botrun_after_send(n: i32): i32 { return afterSend(n, audit); }
//
// Inside a hook only log and nowMs work: a Context's calls answer
// Code.Unsupported, so a hook neither sends nor reads or writes state.

// Outgoing is one send as a send hook sees it.
export class Outgoing {
  // hook is "before_send" or "after_send".
  hook: string = "";
  // event is the id of the event whose handler made the send.
  event: string = "";
  provider: string = "";
  chat: string = "";
  // key is the send's idempotency key.
  key: string = "";
  text: string = "";
  media: Media | null = null;
  buttons: Button[] = [];
  list: List | null = null;
  // at is an enqueued send's hold time in Unix milliseconds (0: now).
  at: i64 = 0;
  // ref is the channel's message id of the send (after_send only; "" when
  // the channel gave none).
  ref: string = "";
  // time is the hook's clock in Unix milliseconds (nowMs answers it).
  time: i64 = 0;
}

// HookResult is a send hook's answer: Send (in beforeSend, the send as the
// hook left the Outgoing), Cancel (beforeSend: the send is not journaled and
// answers "cancelled"; afterSend: as Send) or Fail(message), the hook's
// error (beforeSend: the send is dead; afterSend: logged, not retried).
export class HookResult {
  // status is the hook's ABI status: 0 send, 1 handler error, 2 cancel.
  readonly status: i32;
  // message is Fail's error message.
  readonly message: string;
  private constructor(status: i32, message: string) { this.status = status; this.message = message; }
  static readonly Send: HookResult = new HookResult(0, "");
  static readonly Cancel: HookResult = new HookResult(2, "");
  // Fail fails the hook with message, as a handler's returned error.
  static Fail(message: string): HookResult { return new HookResult(1, message); }
}

// decodeOutgoing parses a SendHook, or returns null when it does not parse.
function decodeOutgoing(s: string): Outgoing | null {
  const o = new Outgoing();
  const r = new Reader(s);
  let k = r.key(true);
  while (k !== null) {
    const key = changetype<string>(k);
    if (key == "hook") o.hook = r.str();
    else if (key == "event") o.event = r.str();
    else if (key == "provider") o.provider = r.str();
    else if (key == "chat") o.chat = r.str();
    else if (key == "key") o.key = r.str();
    else if (key == "text") o.text = r.str();
    else if (key == "ref") o.ref = r.str();
    else if (key == "at") o.at = r.num();
    else if (key == "time") o.time = r.num();
    else if (key == "media" && r.peek() == 0x7b) o.media = decodeMedia(r);
    else if (key == "buttons" && r.peek() == 0x5b) {
      for (let more = r.item(true); more; more = r.item(false)) o.buttons.push(decodeButton(r));
    }
    else if (key == "list" && r.peek() == 0x7b) o.list = decodeList(r);
    else r.skip();
    k = r.key(false);
  }
  return r.ok && r.peek() == -1 ? o : null;
}

function decodeButton(r: Reader): Button {
  const b = new Button();
  let k = r.key(true);
  while (k !== null) {
    const key = changetype<string>(k);
    if (key == "id") b.id = r.str();
    else if (key == "title") b.title = r.str();
    else if (key == "url") b.url = r.str();
    else r.skip();
    k = r.key(false);
  }
  return b;
}

function decodeList(r: Reader): List {
  const l = new List("", []);
  let k = r.key(true);
  while (k !== null) {
    const key = changetype<string>(k);
    if (key == "button") l.button = r.str();
    else if (key == "sections" && r.peek() == 0x5b) {
      for (let more = r.item(true); more; more = r.item(false)) l.sections.push(decodeSection(r));
    }
    else r.skip();
    k = r.key(false);
  }
  return l;
}

function decodeSection(r: Reader): ListSection {
  const sec = new ListSection("", []);
  let k = r.key(true);
  while (k !== null) {
    const key = changetype<string>(k);
    if (key == "title") sec.title = r.str();
    else if (key == "rows" && r.peek() == 0x5b) {
      for (let more = r.item(true); more; more = r.item(false)) {
        const row = new ListRow("", "");
        let rk = r.key(true);
        while (rk !== null) {
          const rkey = changetype<string>(rk);
          if (rkey == "id") row.id = r.str();
          else if (rkey == "title") row.title = r.str();
          else if (rkey == "description") row.description = r.str();
          else r.skip();
          rk = r.key(false);
        }
        sec.rows.push(row);
      }
    }
    else r.skip();
    k = r.key(false);
  }
  return sec;
}

// sameMedia, sameButtons and sameList report whether a hook left the
// content as it was.
function sameMedia(a: Media | null, b: Media | null): bool {
  if (a == null || b == null) return a == b;
  const x = changetype<Media>(a), y = changetype<Media>(b);
  return x.type == y.type && x.ref == y.ref && x.url == y.url && x.mime == y.mime && x.caption == y.caption;
}

function sameButtons(a: Button[], b: Button[]): bool {
  if (a.length != b.length) return false;
  for (let i = 0; i < a.length; i++) {
    if (a[i].id != b[i].id || a[i].title != b[i].title || a[i].url != b[i].url) return false;
  }
  return true;
}

function sameList(a: List | null, b: List | null): bool {
  if (a == null || b == null) return a == b;
  const x = changetype<List>(a), y = changetype<List>(b);
  if (x.button != y.button || x.sections.length != y.sections.length) return false;
  for (let i = 0; i < x.sections.length; i++) {
    const s = x.sections[i], t = y.sections[i];
    if (s.title != t.title || s.rows.length != t.rows.length) return false;
    for (let j = 0; j < s.rows.length; j++) {
      const p = s.rows[j], q = t.rows[j];
      if (p.id != q.id || p.title != q.title || p.description != q.description) return false;
    }
  }
  return true;
}

// beforeSend is the body of the module's botrun_before_send export: it runs
// fn on the send, which may change the Outgoing's chat, text, media, buttons
// and list to rewrite it (the SDK calls rewrite only when they changed; a
// rewrite the host refuses fails the hook with "botrun.rewrite: <CODE>"),
// and answers as fn's HookResult.
export function beforeSend(n: i32, fn: (out: Outgoing) => HookResult): i32 {
  const raw = readPayload(n);
  if (raw == null) return 1;
  const out = decodeOutgoing(changetype<string>(raw));
  if (out == null) { log(LOG_ERROR, "botrun sdk: bad send hook"); return 1; }
  // A second copy to compare with: fn may change the first in place.
  const orig = changetype<Outgoing>(decodeOutgoing(changetype<string>(raw)));
  const res = fn(out);
  if (res.status == 1) { log(LOG_ERROR, res.message); return 1; }
  if (res.status != 0) return res.status;
  if (out.chat == orig.chat && out.text == orig.text && sameMedia(out.media, orig.media) &&
    sameButtons(out.buttons, orig.buttons) && sameList(out.list, orig.list)) return 0;
  const b = utf8("{\"chat\":" + quote(out.chat) + ",\"text\":" + quote(out.text) + mediaField(out.media) + choicesFields(out.buttons, out.list) + "}");
  const code = host_rewrite(changetype<usize>(b), b.byteLength);
  if (code < 0) { log(LOG_ERROR, changetype<string>(failed(new Outcome(), "rewrite", code).error())); return 1; }
  return 0;
}

// afterSend is the body of the module's botrun_after_send export: it runs fn
// on the send once it was delivered (at least once per send). A Fail is
// logged, not retried.
export function afterSend(n: i32, fn: (out: Outgoing) => HookResult): i32 {
  const raw = readPayload(n);
  if (raw == null) return 1;
  const out = decodeOutgoing(changetype<string>(raw));
  if (out == null) { log(LOG_ERROR, "botrun sdk: bad send hook"); return 1; }
  const res = fn(out);
  if (res.status == 1) { log(LOG_ERROR, res.message); return 1; }
  return 0;
}
