// The AssemblyScript SDK's conformance guest: every event's text is one
// command, which it runs through the SDK and whose outcome it posts, as one
// line, to the chat "report" (examples/CONFORMANCE.md; host/wasm's
// TestConformance drives it).
import { Button, ChannelOutcome, Code, Context, Event, FetchError, FetchOutcome, Flow, FlowContext, HookResult, Interaction, List, ListRow, ListSection, LOG_INFO, Media, MediaUnavailableError, Outcome, Outgoing, Request, Response, SendOptions, SendOutcome, WAITING, afterSend, beforeSend, codeName, log, nowMs, setHandler } from "../../../guest-sdk/assemblyscript/assembly/index";
export { botrun_abi_v1, botrun_on_event } from "../../../guest-sdk/assemblyscript/assembly/index";

// arg decodes an argument: "-" is "", "@N" N bytes of 'x'.
function arg(s: string): string {
  if (s == "-") return "";
  if (s.startsWith("@")) return "x".repeat(<i32>parseInt(s.substr(1)));
  return s;
}

function failure(o: Outcome): string { return "err " + codeName(o.code); }

function sendOutcome(o: SendOutcome): string {
  const r = o.result;
  const fields = r.status + " key=" + r.key + " ref=" + r.ref + " error=" + r.error;
  if (o.code == Code.NotSent) return "not-sent " + fields;
  if (!o.ok) return failure(o);
  return fields;
}

function done(o: Outcome): string { return o.ok ? "ok" : failure(o); }

// channelDone is the outcome line of edit and typing.
function channelDone(o: ChannelOutcome): string {
  if (o.code == Code.ChannelFailed) return "channel-failed " + o.channelError;
  return done(o);
}

// sendFn runs the send function FN of buttons and list: send, post or
// enqueue.
function sendFn(ctx: Context, fn: string, chat: string, text: string, opts: SendOptions): SendOutcome {
  if (fn == "send") return ctx.sendWith(chat, text, opts);
  if (fn == "enqueue") return ctx.enqueueWith(chat, text, opts);
  return ctx.postWith(chat, text, opts);
}

// cut splits s at the first sep: [before, after], or [s, ""] without one.
function cut(s: string, sep: string): string[] {
  const i = s.indexOf(sep);
  if (i < 0) return [s, ""];
  return [s.substring(0, i), s.substring(i + sep.length)];
}

// button decodes a button SPEC: "id:ID:TITLE" (a reply button) or
// "url:TITLE:URL" (a URL button).
function button(spec: string): Button {
  const k = cut(spec, ":");
  const ab = cut(k[1], ":");
  if (k[0] == "url") return Button.link(arg(ab[0]), arg(ab[1]));
  return Button.reply(arg(ab[0]), arg(ab[1]));
}

// section decodes a list SECTION: "TITLE/ROW/ROW…", each ROW
// "ID:TITLE[:DESCRIPTION]".
function section(spec: string): ListSection {
  const parts = spec.split("/");
  const rows: ListRow[] = [];
  for (let i = 1; i < parts.length; i++) {
    const f = cut(parts[i], ":");
    const td = cut(f[1], ":");
    rows.push(new ListRow(arg(f[0]), arg(td[0]), arg(td[1])));
  }
  return new ListSection(arg(parts[0]), rows);
}

// argAt is the argument i decoded, or "" past the last.
function argAt(args: string[], i: i32): string { return i < args.length ? arg(args[i]) : ""; }

// hexBytes decodes hex.
function hexBytes(h: string): ArrayBuffer {
  const out = new Uint8Array(h.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = <u8>parseInt(h.substr(2 * i, 2), 16);
  return out.buffer;
}

// fetchRequest decodes the arguments of fetch: API PATH [METHOD] [BODY]
// [KEY] [NAME:VALUE...]; a BODY "hex:HEX" is those bytes.
function fetchRequest(args: string[]): Request {
  const req = new Request(argAt(args, 2));
  req.method = argAt(args, 3);
  const body = argAt(args, 4);
  if (body.length > 0) req.body = body.startsWith("hex:") ? hexBytes(body.substr(4)) : String.UTF8.encode(body);
  req.key = argAt(args, 5);
  for (let i = 6; i < args.length; i++) {
    const h = cut(args[i], ":");
    req.headers.set(h[0], h[1]);
  }
  return req;
}

// fetchDone is the outcome line of fetch: a response's body's first 64
// bytes as text when they are printable ASCII, else in hex.
function fetchDone(o: FetchOutcome): string {
  if (o.code == Code.FetchFailed && o.fetchError != null) {
    const e = changetype<FetchError>(o.fetchError);
    return "fetch-failed " + e.reason + " " + e.message;
  }
  if (!o.ok) return failure(o);
  const r = changetype<Response>(o.response);
  const b = Uint8Array.wrap(r.body);
  const n = b.length < 64 ? b.length : 64;
  let printable = true;
  for (let i = 0; i < n; i++) if (b[i] < 0x20 || b[i] > 0x7e) printable = false;
  let body = String.UTF8.decode(r.body.slice(0, n));
  if (!printable) {
    const parts: string[] = ["hex:"];
    for (let i = 0; i < n; i++) parts.push((b[i] < 16 ? "0" : "") + (<i32>b[i]).toString(16));
    body = parts.join("");
  }
  const type = r.header("Content-Type");
  return "fetch " + r.status.toString() + " replayed=" + (r.replayed ? "true" : "false") + " headers=" + r.headers.size.toString() +
    " type=" + (type != null ? changetype<string>(type) : "") + " len=" + r.body.byteLength.toString() + " body=" + body;
}

const signup = new Flow("signup", (f: FlowContext): string | null => {
  const name = f.ask("name?");
  if (name == null) return WAITING;
  const hi = f.ctx.reply("hi " + name).error();
  if (hi != null) return hi;
  const city = f.ask("city?");
  if (city == null) return WAITING;
  return f.ctx.reply("bye " + name + " from " + city).error();
});

// typist shows typing, asks "q?", and edits the message m-1 to the answer:
// replayed, its typing is not shown again.
const typist = new Flow("typist", (f: FlowContext): string | null => {
  const t = f.ctx.typing(f.ctx.event.chat).error();
  if (t != null) return t;
  const a = f.ask("q?");
  if (a == null) return WAITING;
  return f.ctx.edit(f.ctx.event.chat, "m-1", a).error();
});

// fetcher calls orders GET /orders/42 and replies its outcome, asks
// "next?", replies that outcome again, calls orders POST /orders/42/pay and
// replies its outcome, asks "last?" and replies the second outcome again. A
// replayed step's call is answered from the calls kept with the flow,
// marked replayed, and does not reach the host (abi/SPEC.md section 7).
const fetcher = new Flow("fetcher", (f: FlowContext): string | null => {
  const first = fetchDone(f.ctx.fetch("orders", new Request("/orders/42")));
  let e = f.ctx.reply("first " + first).error();
  if (e != null) return e;
  if (f.ask("next?") == null) return WAITING;
  e = f.ctx.reply("had " + first).error();
  if (e != null) return e;
  const pay = new Request("/orders/42/pay");
  pay.method = "POST";
  const second = fetchDone(f.ctx.fetch("orders", pay));
  e = f.ctx.reply("paid " + second).error();
  if (e != null) return e;
  if (f.ask("last?") == null) return WAITING;
  return f.ctx.reply("end " + second).error();
});

let handlerError: string | null = null;

function run(ctx: Context, args: string[]): string {
  const cmd = args[0];
  const key = args.length > 3 ? arg(args[3]) : "";
  if (cmd == "now") return "now " + nowMs().toString();
  if (cmd == "state-get") {
    const v = ctx.stateGet(arg(args[1]));
    if (!v.ok) return failure(v);
    return v.found ? "value " + changetype<string>(v.value) : "absent";
  }
  if (cmd == "state-set") return done(ctx.stateSet(arg(args[1]), arg(args[2])));
  if (cmd == "fail-state-set") {
    // The SDK's error, returned as the handler's own.
    const o = ctx.stateSet(arg(args[1]), arg(args[2]));
    handlerError = o.error();
    return done(o);
  }
  if (cmd == "state-delete") return done(ctx.stateDelete(arg(args[1])));
  if (cmd == "media" || cmd == "fail-media") {
    const m = ctx.loadMedia(<i32>parseInt(args[1]));
    // fail-media: the SDK's error, returned as the handler's own.
    if (cmd == "fail-media") handlerError = m.error();
    if (m.code == Code.MediaUnavailable && m.unavailable != null) {
      const u = changetype<MediaUnavailableError>(m.unavailable);
      return "unavailable " + u.reason + " " + u.message;
    }
    if (!m.ok) return failure(m);
    return "bytes " + changetype<ArrayBuffer>(m.bytes).byteLength.toString();
  }
  if (cmd == "send") return sendOutcome(ctx.send(arg(args[1]), arg(args[2]), key));
  if (cmd == "post") return sendOutcome(ctx.post(arg(args[1]), arg(args[2]), key));
  if (cmd == "enqueue") return sendOutcome(ctx.enqueue(arg(args[1]), arg(args[2]), key));
  if (cmd == "send-at" || cmd == "post-at" || cmd == "enqueue-at") {
    // AT: "+N" is the event's time plus N ms, any other number a Unix time in
    // ms ("0": none); the key, if any, follows the text.
    const at: i64 = args[2].startsWith("+") ? ctx.event.received_at + I64.parseInt(args[2].substr(1)) : I64.parseInt(args[2]);
    const k = args.length > 4 ? arg(args[4]) : "";
    if (cmd == "send-at") return sendOutcome(ctx.send(arg(args[1]), arg(args[3]), k, null, at));
    if (cmd == "post-at") return sendOutcome(ctx.post(arg(args[1]), arg(args[3]), k, null, at));
    return sendOutcome(ctx.enqueue(arg(args[1]), arg(args[3]), k, at));
  }
  if (cmd == "broadcast" || cmd == "broadcast-at") {
    // broadcast PREFIX TEXT CHAT..., broadcast-at PREFIX AT TEXT CHAT...
    const withAt = cmd == "broadcast-at";
    let at: i64 = 0;
    if (withAt) at = args[2].startsWith("+") ? ctx.event.received_at + I64.parseInt(args[2].substr(1)) : I64.parseInt(args[2]);
    const first = withAt ? 4 : 3;
    const chats: string[] = [];
    for (let i = first; i < args.length; i++) chats.push(arg(args[i]));
    const b = ctx.broadcast(chats, arg(args[first - 1]), arg(args[1]), at);
    if (!b.ok) return failure(b);
    return "journaled " + b.journaled.toString() + " existing " + b.existing.toString();
  }
  if (cmd == "buttons") {
    // buttons FN CHAT TEXT SPEC...
    const o = new SendOptions();
    for (let i = 4; i < args.length; i++) o.buttons.push(button(args[i]));
    return sendOutcome(sendFn(ctx, args[1], arg(args[2]), arg(args[3]), o));
  }
  if (cmd == "list") {
    // list FN CHAT TEXT BUTTON SECTION...
    const sections: ListSection[] = [];
    for (let i = 5; i < args.length; i++) sections.push(section(args[i]));
    const o = new SendOptions();
    o.list = new List(arg(args[4]), sections);
    return sendOutcome(sendFn(ctx, args[1], arg(args[2]), arg(args[3]), o));
  }
  if (cmd == "buttons-list") {
    const o = new SendOptions();
    o.buttons = [Button.reply("a", "A")];
    o.list = new List("Menu", [new ListSection("", [new ListRow("r1", "R1")])]);
    return sendOutcome(ctx.postWith(arg(args[1]), arg(args[2]), o));
  }
  if (cmd == "event") return "kind=" + ctx.event.kind + " interaction=none";
  if (cmd == "reply") return sendOutcome(ctx.reply(arg(args[1])));
  if (cmd == "sends") {
    const n = <i32>parseInt(args[1]);
    for (let i = 1; i <= n; i++) {
      const o = ctx.send("c1", "n" + i.toString());
      if (!o.ok) return failure(o) + " at " + i.toString();
    }
    return "sent " + n.toString();
  }
  if (cmd == "log") {
    const count = args.length > 3 ? <i32>parseInt(args[3]) : 1;
    const msg = arg(args[2]);
    const level = args.length > 1 ? <i32>parseInt(args[1]) : LOG_INFO;
    for (let i = 0; i < count; i++) log(level, msg);
    return "ok";
  }
  if (cmd == "edit") return channelDone(ctx.edit(arg(args[1]), arg(args[2]), arg(args[3])));
  if (cmd == "fail-edit") {
    // The SDK's error, returned as the handler's own.
    const o = ctx.edit(arg(args[1]), arg(args[2]), arg(args[3]));
    handlerError = o.error();
    return channelDone(o);
  }
  if (cmd == "typing") return channelDone(ctx.typing(arg(args[1])));
  if (cmd == "fetch" || cmd == "fail-fetch") {
    const o = ctx.fetch(argAt(args, 1), fetchRequest(args));
    // fail-fetch: the SDK's error, returned as the handler's own.
    if (cmd == "fail-fetch") handlerError = o.error();
    return fetchDone(o);
  }
  if (cmd == "flow-start") {
    const name = args.length > 1 ? args[1] : "";
    return done(ctx.start(name == "typist" ? typist : name == "fetcher" ? fetcher : signup));
  }
  if (cmd == "flow-continue") {
    const o = ctx.continueFlow([signup, typist, fetcher]);
    if (!o.ok) return failure(o);
    return o.inFlow ? "in-flow" : "not-in-flow";
  }
  if (cmd == "flow-name") {
    const f = ctx.inFlow();
    if (!f.ok) return failure(f);
    return f.name != null ? "flow " + changetype<string>(f.name) : "no-flow";
  }
  if (cmd == "fail") {
    handlerError = arg(args[1]);
    return "failing";
  }
  return "unknown command " + cmd;
}

setHandler((ctx: Context): string | null => {
  handlerError = null;
  let out: string;
  if (ctx.event.interaction != null) {
    // A press is reported, not run: its text is the pressed title.
    const i = changetype<Interaction>(ctx.event.interaction);
    out = "interaction kind=" + ctx.event.kind + " id=" + i.id + " title=" + i.title + " message=" + i.message + " text=" + ctx.event.text;
  } else out = run(ctx, ctx.event.text.split(" "));
  const r = ctx.post("report", out).error();
  if (r != null) return r;
  return handlerError;
});

// codeWord is an SDK call's outcome in a probe: "ok" or its code's name.
function codeWord(o: Outcome): string { return o.ok ? "ok" : codeName(o.code); }

// The send hooks of examples/CONFORMANCE.md, chosen by the send's text.
function before(out: Outgoing): HookResult {
  const words = out.text.split(" ");
  if (words[0] == "hook-cancel") return HookResult.Cancel;
  if (words[0] == "hook-fail") return HookResult.Fail("hook failed");
  if (words[0] == "hook-same") out.text = words.join(" ");
  else if (words[0] == "hook-rewrite" && words.length == 3) {
    out.chat = arg(words[1]);
    out.text = arg(words[2]);
  } else if (words[0] == "hook-probe") {
    const media = out.media != null ? changetype<Media>(out.media).type : "-";
    const list = out.list != null ? changetype<List>(out.list).button : "-";
    const ctx = new Context(new Event());
    const state = codeWord(ctx.stateGet("k"));
    const send = codeWord(ctx.send("x", "y"));
    out.text = "hook=" + out.hook + " event=" + out.event + " provider=" + out.provider + " chat=" + out.chat +
      " key=" + out.key + " at=" + out.at.toString() + " time=" + out.time.toString() + " now=" + nowMs().toString() +
      " media=" + media + " buttons=" + out.buttons.length.toString() + " list=" + list + " state=" + state + " send=" + send;
  }
  return HookResult.Send;
}

function after(out: Outgoing): HookResult {
  if (out.text.split(" ")[0] == "hook-fail") return HookResult.Fail("hook failed");
  log(LOG_INFO, "after_send key=" + out.key + " ref=" + out.ref + " chat=" + out.chat + " text=" + out.text + " time=" + out.time.toString());
  return HookResult.Send;
}

export function botrun_before_send(n: i32): i32 { return beforeSend(n, before); }

export function botrun_after_send(n: i32): i32 { return afterSend(n, after); }
