// botrun guest SDK for AssemblyScript (ABI v1, see abi/SPEC.md). A bot sets
// its handler at the top level and re-exports the entry points:
//
//   import { Context, setHandler } from "../../../guest-sdk/assemblyscript/assembly";
//   export { botrun_abi_v1, botrun_on_event } from "../../../guest-sdk/assemblyscript/assembly";
//   setHandler((ctx: Context): string | null => ctx.reply("echo: " + ctx.event.text));
//
// A handler returns null when done, or an error message (reported, not
// retried). Strings are UTF-16 in AssemblyScript and UTF-8 on the wire: the SDK
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

export class Media {
  type: string = "";
  ref: string = "";
  url: string = "";
  mime: string = "";
  caption: string = "";
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
}

// SendResult is the host's answer to a send. status is sent, deduped,
// deferred, dead or bypassed; or, from the SDK, replayed (a flow's send while
// it replays a step already taken: no host call).
export class SendResult {
  status: string = "";
  key: string = "";
  ref: string = "";
  error: string = "";
}

// MediaUnavailableError says why loadMedia has no bytes: reason is
// "not-durable", "provider-mismatch" or "rehydrate-failed" (SPEC.md section 4).
// The message is processed all the same; only the download failed.
export class MediaUnavailableError {
  reason: string = "";
  message: string = "";
}

// MediaResult is loadMedia's answer: bytes when loaded; else unavailable
// (with its reason) or a host error code (-4 UNSUPPORTED: the channel cannot
// download media).
export class MediaResult {
  bytes: ArrayBuffer | null = null;
  unavailable: MediaUnavailableError | null = null;
  code: i32 = 0;
}

// ---- JSON: exactly the ABI's shapes; unknown fields are skipped ----
function quote(s: string): string {
  let out = "\"";
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c == 0x22) out += "\\\"";
    else if (c == 0x5c) out += "\\\\";
    else if (c == 0x0a) out += "\\n";
    else if (c == 0x0d) out += "\\r";
    else if (c == 0x09) out += "\\t";
    else if (c < 0x20) out += "\\u00" + (c < 16 ? "0" : "") + c.toString(16);
    else out += String.fromCharCode(c);
  }
  return out + "\"";
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
  str(): string {
    if (!this.expect(0x22)) return "";
    let out = "";
    while (this.i < this.s.length) {
      const c = this.s.charCodeAt(this.i++);
      if (c == 0x22) return out;
      if (c != 0x5c) { out += String.fromCharCode(c); continue; }
      const e = this.s.charCodeAt(this.i++);
      if (e == 0x6e) out += "\n";
      else if (e == 0x74) out += "\t";
      else if (e == 0x72) out += "\r";
      else if (e == 0x62) out += "\b";
      else if (e == 0x66) out += "\f";
      else if (e == 0x75) {
        out += String.fromCharCode(<i32>parseInt(this.s.substr(this.i, 4), 16));
        this.i += 4;
      } else out += String.fromCharCode(e);
    }
    this.ok = false;
    return out;
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
    else if (key == "media" && r.peek() == 0x5b) {
      r.i++;
      if (r.peek() == 0x5d) r.i++;
      else {
        while (r.ok) {
          const m = new Media();
          let mk = r.key(true);
          while (mk !== null) {
            const mkey = changetype<string>(mk);
            if (mkey == "type") m.type = r.str();
            else if (mkey == "ref") m.ref = r.str();
            else if (mkey == "url") m.url = r.str();
            else if (mkey == "mime") m.mime = r.str();
            else if (mkey == "caption") m.caption = r.str();
            else r.skip();
            mk = r.key(false);
          }
          e.media.push(m);
          const d = r.peek();
          r.i++;
          if (d == 0x5d) break;
          if (d != 0x2c) r.ok = false;
        }
      }
    }
    else r.skip();
    k = r.key(false);
  }
  return r.ok ? e : null;
}

function decodeResult(s: string): SendResult {
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
  return o;
}

function decodeUnavailable(s: string): MediaUnavailableError {
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
  return o;
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
  constructor(e: Event) { this.event = e; }

  // send sends text to chat (key: "" for a derived key); null when sent or
  // deduped, else why not.
  send(chat: string, text: string, key: string = "", media: Media | null = null): string | null {
    const r = this.call(SEND, chat, text, key, media);
    if (r == null) return "botrun.send failed";
    const res = changetype<SendResult>(r);
    if (res.status == "dead" || res.status == "deferred") return "send " + res.key + " " + res.status + ": " + res.error;
    return null;
  }

  // reply posts text to the event's chat (see post); null when queued.
  reply(text: string): string | null { return this.post(this.event.chat, text) == null ? "botrun.post failed" : null; }

  // post queues a send of text to chat and returns at once (status
  // "queued", with its key): the host makes the handler's posted sends, in
  // order, when it returns, so the instance is free while they wait
  // (abi/SPEC.md section 4.3). null when the host refused it.
  post(chat: string, text: string, key: string = "", media: Media | null = null): SendResult | null { return this.call(POST, chat, text, key, media); }

  enqueue(chat: string, text: string, key: string = ""): SendResult | null { return this.call(ENQUEUE, chat, text, key, null); }

  private call(fn: i32, chat: string, text: string, key: string, media: Media | null): SendResult | null {
    if (this.replaying) {
      // The host numbers sends, so one that does not reach it takes no
      // derived key: the live sends keep their numbers on every replay.
      const r = new SendResult();
      r.status = REPLAYED;
      return r;
    }
    let req = "{\"chat\":" + quote(chat) + ",\"text\":" + quote(text);
    if (media != null) {
      const m = changetype<Media>(media);
      req += ",\"media\":{\"type\":" + quote(m.type);
      if (m.ref.length > 0) req += ",\"ref\":" + quote(m.ref);
      if (m.url.length > 0) req += ",\"url\":" + quote(m.url);
      if (m.mime.length > 0) req += ",\"mime\":" + quote(m.mime);
      if (m.caption.length > 0) req += ",\"caption\":" + quote(m.caption);
      req += "}";
    }
    if (key.length > 0) req += ",\"idempotency_key\":" + quote(key);
    const b = utf8(req + "}");
    const n = fn == ENQUEUE ? host_enqueue(changetype<usize>(b), b.byteLength)
      : fn == POST ? host_post(changetype<usize>(b), b.byteLength)
      : host_send(changetype<usize>(b), b.byteLength);
    const out = pull(n);
    if (out == null) return null;
    return decodeResult(String.UTF8.decode(changetype<ArrayBuffer>(out)));
  }

  // loadMedia downloads the bytes of event.media[index] through the host.
  loadMedia(index: i32): MediaResult {
    const res = new MediaResult();
    const n = host_media_load(index);
    if (n == -8) {
      // The reason is a JSON object of at most 1 KiB (SPEC.md section 4).
      const b = new ArrayBuffer(1024);
      const got = host_result_read(changetype<usize>(b), 1024);
      if (got < 0) { res.code = got; return res; }
      res.unavailable = decodeUnavailable(String.UTF8.decode(b.slice(0, got)));
      res.code = -8;
      return res;
    }
    const out = pull(n);
    if (out == null) { res.code = n < 0 ? n : -6; return res; }
    res.bytes = out;
    return res;
  }

  // stateGet returns the value of key in this chat, or null.
  stateGet(key: string): string | null {
    const k = utf8(key);
    const n = host_state_get(changetype<usize>(k), k.byteLength);
    const out = pull(n);
    return out == null ? null : String.UTF8.decode(changetype<ArrayBuffer>(out));
  }

  stateSet(key: string, value: string): bool {
    const k = utf8(key), v = utf8(value);
    return host_state_set(changetype<usize>(k), k.byteLength, changetype<usize>(v), v.byteLength) == 0;
  }

  stateDelete(key: string): bool {
    const k = utf8(key);
    return host_state_delete(changetype<usize>(k), k.byteLength) == 0;
  }

  // start begins the flow in this chat.
  start(flow: Flow): string | null { return runFlow(this, flow, []); }

  // continueFlow feeds this message to the chat's flow in progress; false
  // when there is none. A state that does not parse, or names a flow not in
  // flows, is deleted (logged) and false returned: handle the message as a
  // normal message.
  continueFlow(flows: Flow[]): bool {
    const k = utf8(FLOW_KEY);
    const st = pull(host_state_get(changetype<usize>(k), k.byteLength));
    if (st == null) return false;
    const fields = decodeFlow(changetype<ArrayBuffer>(st));
    if (fields == null) {
      log(2, "botrun flow: forgetting the chat's flow: its state is not a sequence of netstrings (SPEC.md section 7); the message is handled as a normal message");
      this.stateDelete(FLOW_KEY);
      return false;
    }
    const parts = changetype<string[]>(fields);
    const answers = parts.slice(1);
    answers.push(this.event.text);
    for (let i = 0; i < flows.length; i++) {
      if (flows[i].name == parts[0]) {
        const err = runFlow(this, flows[i], answers);
        if (err != null) log(3, changetype<string>(err));
        return true;
      }
    }
    log(2, "botrun flow: forgetting the chat's flow \"" + parts[0] + "\": this module has no flow of that name; the message is handled as a normal message");
    this.stateDelete(FLOW_KEY);
    return false;
  }
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
// sends are not made, so a reply between two questions goes out once.
export class FlowContext {
  ctx: Context;
  answers: string[];
  asked: i32 = 0;
  constructor(ctx: Context, answers: string[]) { this.ctx = ctx; this.answers = answers; }
  // ask returns the answer, or sends the question and returns null: return
  // WAITING from the flow then.
  ask(question: string): string | null {
    this.asked++;
    if (this.asked <= this.answers.length) {
      if (this.asked == this.answers.length) this.ctx.replaying = false; // this message's answer: what follows is new
      return this.answers[this.asked - 1];
    }
    this.ctx.reply(question);
    return null;
  }
}

export class Flow {
  name: string;
  fn: (f: FlowContext) => string | null;
  constructor(name: string, fn: (f: FlowContext) => string | null) { this.name = name; this.fn = fn; }
}

// decodeFlow returns the fields of a flow state (the name, then the answers),
// or null when the value is not a non-empty sequence of netstrings.
function decodeFlow(buf: ArrayBuffer): string[] | null {
  const b = Uint8Array.wrap(buf);
  const n = b.length;
  const fields: string[] = [];
  let at = 0;
  while (at < n) {
    let len = 0;
    let i = at;
    for (; i < n && b[i] >= 0x30 && b[i] <= 0x39; i++) {
      if (i > at && len == 0) return null; // a leading zero
      if (len > n / 10) return null; // longer than the value
      len = len * 10 + <i32>(b[i] - 0x30);
      if (len > n) return null;
    }
    if (i == at || i >= n || b[i] != 0x3a || len >= n - i - 1 || b[i + 1 + len] != 0x2c) return null;
    fields.push(String.UTF8.decode(buf.slice(i + 1, i + 1 + len)));
    at = i + 2 + len;
  }
  return fields.length > 0 ? fields : null;
}

function encodeFlow(name: string, answers: string[]): ArrayBuffer {
  const parts: ArrayBuffer[] = [];
  let total = 0;
  const all = [name].concat(answers);
  for (let i = 0; i < all.length; i++) {
    const v = utf8(all[i]);
    const p = utf8(v.byteLength.toString() + ":");
    parts.push(p);
    parts.push(v);
    parts.push(utf8(","));
    total += p.byteLength + v.byteLength + 1;
  }
  const out = new Uint8Array(total);
  let at = 0;
  for (let i = 0; i < parts.length; i++) {
    out.set(Uint8Array.wrap(parts[i]), at);
    at += parts[i].byteLength;
  }
  return out.buffer;
}

function runFlow(ctx: Context, flow: Flow, answers: string[]): string | null {
  const f = new FlowContext(ctx, answers);
  ctx.replaying = answers.length > 0;
  const err = flow.fn(f);
  if (ctx.replaying) {
    ctx.replaying = false;
    log(2, "botrun flow: flow \"" + flow.name + "\" ended before the question this message answers (was the module changed?); sends of the steps it replayed were not repeated");
  }
  if (err != null && changetype<string>(err) == WAITING) {
    const k = utf8(FLOW_KEY), v = encodeFlow(flow.name, answers);
    host_state_set(changetype<usize>(k), k.byteLength, changetype<usize>(v), v.byteLength);
    return null;
  }
  if (err != null) return err;
  ctx.stateDelete(FLOW_KEY);
  return null;
}

// ---- entry points ----
let handler: ((ctx: Context) => string | null) | null = null;

export function setHandler(h: (ctx: Context) => string | null): void { handler = h; }

export function botrun_abi_v1(): void {}

export function botrun_on_event(n: i32): i32 {
  const raw = new ArrayBuffer(n);
  if (host_event_read(changetype<usize>(raw), n) != n) return 1;
  const e = decodeEvent(String.UTF8.decode(raw));
  if (e == null) { log(3, "botrun sdk: bad event"); return 1; }
  if (handler == null) { log(3, "botrun sdk: no handler: call setHandler at the top level"); return 1; }
  const h = changetype<(ctx: Context) => string | null>(handler);
  const err = h(new Context(changetype<Event>(e)));
  if (err != null) { log(3, changetype<string>(err)); return 1; }
  return 0;
}
