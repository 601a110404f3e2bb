//! The Rust SDK's conformance guest: every event's text is one command, which
//! it runs through the SDK and whose outcome it posts, as one line, to the chat
//! "report" (examples/CONFORMANCE.md; host/wasm's TestConformance drives it).

use std::collections::HashMap;

use botrun::{Button, Context, Error, List, ListRow, ListSection, Outgoing, Request, Response, SendOptions, SendResult, Verdict};

/// Decodes an argument: "-" is "", "@N" N bytes of 'x'.
fn arg(s: &str) -> String {
    if s == "-" {
        return String::new();
    }
    if let Some(n) = s.strip_prefix('@').and_then(|n| n.parse::<usize>().ok()) {
        return "x".repeat(n);
    }
    s.to_string()
}

fn failure(e: &Error) -> String {
    match e {
        Error::NotSent(r) => format!("not-sent {} key={} ref={} error={}", r.status, r.key, r.r#ref, r.error),
        Error::MediaUnavailable(m) => format!("unavailable {} {}", m.reason, m.message),
        Error::ChannelFailed { message, .. } => format!("channel-failed {}", message),
        Error::FetchFailed { reason, message, .. } => format!("fetch-failed {} {}", reason, message),
        e => match e.code() {
            Some(c) => format!("err {}", c.name()),
            None => format!("err {}", e),
        },
    }
}

fn send_outcome(r: Result<SendResult, Error>) -> String {
    match r {
        Ok(r) => format!("{} key={} ref={} error={}", r.status, r.key, r.r#ref, r.error),
        Err(e) => failure(&e),
    }
}

/// The send function FN of buttons and list: send, post or enqueue.
fn send_fn(ctx: &mut Context, func: &str, chat: &str, text: &str, opts: SendOptions) -> Result<SendResult, Error> {
    match func {
        "send" => ctx.send(chat, text, opts),
        "enqueue" => ctx.enqueue(chat, text, opts),
        _ => ctx.post(chat, text, opts),
    }
}

/// Decodes a button SPEC: "id:ID:TITLE" (a reply button) or "url:TITLE:URL"
/// (a URL button).
fn button(spec: &str) -> Button {
    let mut f = spec.splitn(3, ':');
    let kind = f.next().unwrap_or("");
    let a = arg(f.next().unwrap_or(""));
    let b = arg(f.next().unwrap_or(""));
    if kind == "url" {
        Button::url(&a, &b)
    } else {
        Button::reply(&a, &b)
    }
}

/// Decodes a list SECTION: "TITLE/ROW/ROW…", each ROW "ID:TITLE[:DESCRIPTION]".
fn section(spec: &str) -> ListSection {
    let mut parts = spec.split('/');
    let title = arg(parts.next().unwrap_or(""));
    let rows = parts
        .map(|r| {
            let mut f = r.splitn(3, ':');
            let mut row = ListRow::new(&arg(f.next().unwrap_or("")), "");
            if let Some(t) = f.next() {
                row.title = arg(t);
            }
            if let Some(d) = f.next() {
                row.description = arg(d);
            }
            row
        })
        .collect();
    ListSection { title, rows }
}

/// Decodes a BODY argument of fetch: "hex:HEX" is those bytes.
fn body(s: &str) -> Vec<u8> {
    match s.strip_prefix("hex:") {
        Some(h) => (0..h.len() / 2).map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap_or(0)).collect(),
        None => s.as_bytes().to_vec(),
    }
}

/// The outcome line of a response: its body's first 64 bytes as text when
/// they are printable ASCII, else in hex.
fn fetch_outcome(r: &Response) -> String {
    let b = &r.body[..r.body.len().min(64)];
    let body = if b.iter().all(|&c| (0x20..=0x7e).contains(&c)) {
        String::from_utf8_lossy(b).into_owned()
    } else {
        let hex: String = b.iter().map(|c| format!("{:02x}", c)).collect();
        format!("hex:{}", hex)
    };
    format!(
        "fetch {} replayed={} headers={} type={} len={} body={}",
        r.status,
        r.replayed,
        r.headers.len(),
        r.header("Content-Type").unwrap_or(""),
        r.body.len(),
        body
    )
}

fn signup(f: &mut botrun::Flow) -> Result<(), Error> {
    let name = f.ask("name?")?;
    f.ctx.reply(&format!("hi {}", name))?;
    let city = f.ask("city?")?;
    f.ctx.reply(&format!("bye {} from {}", name, city))?;
    Ok(())
}

/// Shows typing, asks "q?", and edits the message m-1 to the answer:
/// replayed, its typing is not shown again.
fn typist(f: &mut botrun::Flow) -> Result<(), Error> {
    let chat = f.ctx.event.chat.clone();
    f.ctx.typing(&chat)?;
    let a = f.ask("q?")?;
    f.ctx.edit(&chat, "m-1", &a)
}

/// The outcome line of a fetch.
fn call_outcome(r: Result<Response, Error>) -> String {
    match r {
        Ok(r) => fetch_outcome(&r),
        Err(e) => failure(&e),
    }
}

/// Calls orders GET /orders/42 and replies its outcome, asks "next?",
/// replies that outcome again, calls orders POST /orders/42/pay and replies
/// its outcome, asks "last?" and replies the second outcome again. A
/// replayed step's call is answered from the calls kept with the flow,
/// marked replayed, and does not reach the host (abi/SPEC.md section 7).
fn fetcher(f: &mut botrun::Flow) -> Result<(), Error> {
    let first = call_outcome(f.ctx.fetch("orders", &Request { path: "/orders/42", ..Default::default() }));
    f.ctx.reply(&format!("first {}", first))?;
    f.ask("next?")?;
    f.ctx.reply(&format!("had {}", first))?;
    let second = call_outcome(f.ctx.fetch("orders", &Request { method: "POST", path: "/orders/42/pay", ..Default::default() }));
    f.ctx.reply(&format!("paid {}", second))?;
    f.ask("last?")?;
    f.ctx.reply(&format!("end {}", second))?;
    Ok(())
}

fn flows() -> botrun::Flows {
    let mut m: HashMap<&'static str, botrun::FlowFn> = HashMap::new();
    m.insert("signup", signup);
    m.insert("typist", typist);
    m.insert("fetcher", fetcher);
    botrun::Flows(m)
}

fn run(ctx: &mut Context, args: &[&str]) -> (String, Result<(), Error>) {
    let a = |i: usize| arg(args.get(i).copied().unwrap_or(""));
    let key = args.get(3).map(|k| arg(k));
    let opts = SendOptions { idempotency_key: key.as_deref(), ..Default::default() };
    let ok = |r: Result<(), Error>| match r {
        Ok(()) => "ok".to_string(),
        Err(e) => failure(&e),
    };
    let out = match args[0] {
        "now" => format!("now {}", botrun::now()),
        "state-get" => match ctx.state_get(&a(1)) {
            Ok(Some(v)) => format!("value {}", String::from_utf8_lossy(&v)),
            Ok(None) => "absent".to_string(),
            Err(e) => failure(&e),
        },
        "state-set" => ok(ctx.state_set(&a(1), a(2).as_bytes())),
        "fail-state-set" => {
            // The SDK's error, returned as the handler's own.
            return match ctx.state_set(&a(1), a(2).as_bytes()) {
                Ok(()) => ("ok".to_string(), Ok(())),
                Err(e) => (failure(&e), Err(e)),
            };
        }
        "state-delete" => ok(ctx.state_delete(&a(1))),
        "media" | "fail-media" => {
            // An index the event does not have, negative included, is NOT_FOUND.
            let i: i64 = a(1).parse().unwrap_or(0);
            match ctx.load_media(i as usize) {
                Ok(b) => format!("bytes {}", b.len()),
                // The SDK's error, returned as the handler's own.
                Err(e) if args[0] == "fail-media" => return (failure(&e), Err(e)),
                Err(e) => failure(&e),
            }
        }
        "send" => send_outcome(ctx.send(&a(1), &a(2), opts)),
        "post" => send_outcome(ctx.post(&a(1), &a(2), opts)),
        "enqueue" => send_outcome(ctx.enqueue(&a(1), &a(2), opts)),
        "send-at" | "post-at" | "enqueue-at" => {
            // AT: "+N" is the event's time plus N ms, any other number a
            // Unix time in ms ("0": none); the key, if any, follows the text.
            let at = match a(2).strip_prefix('+') {
                Some(n) => ctx.event.received_at + n.parse::<i64>().unwrap_or(0),
                None => a(2).parse().unwrap_or(0),
            };
            let key = args.get(4).map(|k| arg(k));
            let opts = SendOptions { idempotency_key: key.as_deref(), at, ..Default::default() };
            send_outcome(match args[0] {
                "send-at" => ctx.send(&a(1), &a(3), opts),
                "post-at" => ctx.post(&a(1), &a(3), opts),
                _ => ctx.enqueue(&a(1), &a(3), opts),
            })
        }
        "broadcast" | "broadcast-at" => {
            // broadcast PREFIX TEXT CHAT..., broadcast-at PREFIX AT TEXT CHAT...
            let with_at = args[0] == "broadcast-at";
            let at = if !with_at {
                0
            } else {
                match a(2).strip_prefix('+') {
                    Some(n) => ctx.event.received_at + n.parse::<i64>().unwrap_or(0),
                    None => a(2).parse().unwrap_or(0),
                }
            };
            let first = if with_at { 4 } else { 3 };
            let chats: Vec<String> = args.iter().skip(first).map(|c| arg(c)).collect();
            let chats: Vec<&str> = chats.iter().map(|c| c.as_str()).collect();
            match ctx.broadcast(&chats, &a(first - 1), &a(1), at) {
                Ok(r) => format!("journaled {} existing {}", r.journaled, r.existing),
                Err(e) => failure(&e),
            }
        }
        "buttons" => {
            // buttons FN CHAT TEXT SPEC...
            let bs: Vec<Button> = args.iter().skip(4).map(|s| button(s)).collect();
            send_outcome(send_fn(ctx, args[1], &a(2), &a(3), SendOptions { buttons: &bs, ..Default::default() }))
        }
        "list" => {
            // list FN CHAT TEXT BUTTON SECTION...
            let l = List { button: a(4), sections: args.iter().skip(5).map(|s| section(s)).collect() };
            send_outcome(send_fn(ctx, args[1], &a(2), &a(3), SendOptions { list: Some(&l), ..Default::default() }))
        }
        "buttons-list" => {
            let bs = [Button::reply("a", "A")];
            let l = List { button: "Menu".to_string(), sections: vec![ListSection { title: String::new(), rows: vec![ListRow::new("r1", "R1")] }] };
            send_outcome(ctx.post(&a(1), &a(2), SendOptions { buttons: &bs, list: Some(&l), ..Default::default() }))
        }
        "event" => format!("kind={} interaction=none", ctx.event.kind),
        "reply" => send_outcome(ctx.reply(&a(1))),
        "sends" => {
            let n: usize = a(1).parse().unwrap_or(0);
            let mut out = format!("sent {}", n);
            for i in 1..=n {
                if let Err(e) = ctx.send("c1", &format!("n{}", i), SendOptions::default()) {
                    out = format!("{} at {}", failure(&e), i);
                    break;
                }
            }
            out
        }
        "log" => {
            let count: usize = if args.len() > 3 { a(3).parse().unwrap_or(1) } else { 1 };
            let msg = a(2);
            for _ in 0..count {
                ctx.log(a(1).parse().unwrap_or(botrun::LOG_INFO), &msg);
            }
            "ok".to_string()
        }
        "edit" => ok(ctx.edit(&a(1), &a(2), &a(3))),
        "fail-edit" => {
            // The SDK's error, returned as the handler's own.
            return match ctx.edit(&a(1), &a(2), &a(3)) {
                Ok(()) => ("ok".to_string(), Ok(())),
                Err(e) => (failure(&e), Err(e)),
            };
        }
        "typing" => ok(ctx.typing(&a(1))),
        "fetch" | "fail-fetch" => {
            // fetch API PATH [METHOD] [BODY] [KEY] [NAME:VALUE...]
            let (path, method, b, key) = (a(2), a(3), body(&a(4)), a(5));
            let headers: Vec<(&str, &str)> = args.iter().skip(6).map(|h| h.split_once(':').unwrap_or((h, ""))).collect();
            let req = Request { method: &method, path: &path, headers: &headers, body: &b, key: &key };
            match ctx.fetch(&a(1), &req) {
                Ok(r) => fetch_outcome(&r),
                // The SDK's error, returned as the handler's own.
                Err(e) if args[0] == "fail-fetch" => return (failure(&e), Err(e)),
                Err(e) => failure(&e),
            }
        }
        "flow-start" => ok(ctx.start(
            &flows(),
            match args.get(1) {
                Some(&"typist") => "typist",
                Some(&"fetcher") => "fetcher",
                _ => "signup",
            },
        )),
        "flow-continue" => match ctx.continue_flow(&flows()) {
            Ok(true) => "in-flow".to_string(),
            Ok(false) => "not-in-flow".to_string(),
            Err(e) => failure(&e),
        },
        "flow-name" => match ctx.in_flow() {
            Ok(Some(name)) => format!("flow {}", name),
            Ok(None) => "no-flow".to_string(),
            Err(e) => failure(&e),
        },
        "fail" => return ("failing".to_string(), Err(Error::Handler(a(1)))),
        c => format!("unknown command {}", c),
    };
    (out, Ok(()))
}

fn handle(ctx: &mut Context) -> Result<(), Error> {
    let text = ctx.event.text.clone();
    let args: Vec<&str> = text.split(' ').collect();
    let (out, res) = match &ctx.event.interaction {
        // A press is reported, not run: its text is the pressed title.
        Some(i) => (
            format!("interaction kind={} id={} title={} message={} text={}", ctx.event.kind, i.id, i.title, i.message, ctx.event.text),
            Ok(()),
        ),
        None => run(ctx, &args),
    };
    ctx.post("report", &out, SendOptions::default())?;
    res
}

botrun::export_handler!(handle);

/// An SDK call's outcome in a probe: "ok" or its error code's name.
fn code_word<T>(r: Result<T, Error>) -> String {
    match r {
        Ok(_) => "ok".to_string(),
        Err(e) => match e.code() {
            Some(c) => c.name().to_string(),
            None => e.to_string(),
        },
    }
}

/// The before-send hook of examples/CONFORMANCE.md, chosen by the send's text.
fn before_send(s: &mut Outgoing) -> Result<Verdict, Error> {
    let text = s.text.clone();
    let words: Vec<&str> = text.split(' ').collect();
    match words[0] {
        "hook-cancel" => return Ok(Verdict::Cancel),
        "hook-fail" => return Err("hook failed".into()),
        "hook-same" => s.text = text.clone(),
        "hook-rewrite" if words.len() == 3 => {
            s.chat = arg(words[1]);
            s.text = arg(words[2]);
        }
        "hook-probe" => {
            let mut ctx = Context::default();
            let state = code_word(ctx.state_get("k"));
            let send = code_word(ctx.send("x", "y", SendOptions::default()));
            s.text = format!(
                "hook={} event={} provider={} chat={} key={} at={} time={} now={} media={} buttons={} list={} state={} send={}",
                s.hook,
                s.event,
                s.provider,
                s.chat,
                s.key,
                s.at,
                s.time,
                botrun::now(),
                s.media.as_ref().map_or("-", |m| m.r#type.as_str()),
                s.buttons.len(),
                s.list.as_ref().map_or("-", |l| l.button.as_str()),
                state,
                send
            );
        }
        _ => {}
    }
    Ok(Verdict::Send)
}

/// The after-send hook of examples/CONFORMANCE.md.
fn after_send(s: &Outgoing) -> Result<(), Error> {
    if s.text.starts_with("hook-fail") {
        return Err("hook failed".into());
    }
    botrun::log(botrun::LOG_INFO, &format!("after_send key={} ref={} chat={} text={} time={}", s.key, s.r#ref, s.chat, s.text, s.time));
    Ok(())
}

botrun::before_send!(before_send);
botrun::after_send!(after_send);
