//! botrun guest SDK for Rust (ABI v1, see abi/SPEC.md in the botrun
//! repository). It has no dependencies and builds with Debian's rustc 1.63:
//!
//! ```text
//! /usr/bin/rustc --edition 2021 --crate-type=rlib --crate-name botrun \
//!   --target wasm32-unknown-unknown -C opt-level=s -C panic=abort \
//!   -o libbotrun.rlib guest-sdk/rust/src/lib.rs
//! /usr/bin/rustc --edition 2021 --crate-type=cdylib --target wasm32-unknown-unknown \
//!   -C opt-level=s -C panic=abort -C strip=debuginfo --extern botrun=libbotrun.rlib \
//!   -o bot.wasm src/lib.rs
//! ```
//!
//! A bot defines its handler and exports it with the macro:
//!
//! ```text
//! fn handle(ctx: &mut botrun::Context) -> Result<(), String> {
//!     ctx.reply(&format!("echo: {}", ctx.event.text))?;
//!     Ok(())
//! }
//! botrun::export_handler!(handle);
//! ```

mod json;

use std::collections::HashMap;

#[link(wasm_import_module = "botrun")]
extern "C" {
    fn event_read(p: *mut u8, n: i32) -> i32;
    fn send(p: *const u8, n: i32) -> i32;
    fn enqueue(p: *const u8, n: i32) -> i32;
    fn post(p: *const u8, n: i32) -> i32;
    fn result_read(p: *mut u8, n: i32) -> i32;
    fn state_get(k: *const u8, kn: i32) -> i32;
    fn state_set(k: *const u8, kn: i32, v: *const u8, vn: i32) -> i32;
    fn state_delete(k: *const u8, kn: i32) -> i32;
    fn log(level: i32, p: *const u8, n: i32);
    fn now_ms() -> i64;
    fn media_load(index: i32) -> i32;
}

/// The inbound message being handled.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Event {
    pub id: String,
    pub provider: String,
    pub chat: String,
    pub from: String,
    pub text: String,
    pub media: Vec<Media>,
    pub attempt: i64,
    pub received_at: i64,
}

/// An attachment: the provider's ref inbound (opaque), or a public URL.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Media {
    pub r#type: String,
    pub r#ref: String,
    pub url: String,
    pub mime: String,
    pub caption: String,
}

/// The host's answer to a send.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SendResult {
    /// sent, deduped, deferred, dead or bypassed; or, from the SDK, replayed
    /// (a flow's send while it replays a step already taken: no host call).
    pub status: String,
    pub key: String,
    pub r#ref: String,
    pub error: String,
}

/// What a handler gets for one event.
pub struct Context {
    pub event: Event,
    /// Set while a flow replays the steps it already took: sends are not made.
    replaying: bool,
}

fn code_name(code: i32) -> &'static str {
    match code {
        -1 => "BAD_POINTER",
        -2 => "BAD_PAYLOAD",
        -3 => "NOT_FOUND",
        -4 => "UNSUPPORTED",
        -5 => "TOO_LARGE",
        -6 => "NO_RESULT",
        -7 => "HOST_ERROR",
        -8 => "MEDIA_UNAVAILABLE",
        _ => "UNKNOWN",
    }
}

fn result(f: &str, n: i32) -> Result<Vec<u8>, String> {
    if n < 0 {
        return Err(format!("botrun.{}: {}", f, code_name(n)));
    }
    let mut buf = vec![0u8; n as usize];
    if n > 0 && unsafe { result_read(buf.as_mut_ptr(), n) } != n {
        return Err("botrun.result_read failed".into());
    }
    Ok(buf)
}

/// Why `load_media` has no bytes: `reason` is "not-durable",
/// "provider-mismatch" or "rehydrate-failed" (SPEC.md section 4). The message
/// is processed all the same; only the download failed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MediaUnavailableError {
    pub reason: String,
    pub message: String,
}

/// A failed `load_media`.
#[derive(Debug, Clone, PartialEq)]
pub enum MediaError {
    /// The bytes cannot be had, for the reason given.
    Unavailable(MediaUnavailableError),
    /// The event's channel cannot download media.
    Unsupported,
    /// Any other host error.
    Host(String),
}

impl std::fmt::Display for MediaError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            MediaError::Unavailable(e) => write!(f, "media unavailable: {}: {}", e.reason, e.message),
            MediaError::Unsupported => write!(f, "botrun.media_load: UNSUPPORTED"),
            MediaError::Host(s) => write!(f, "{}", s),
        }
    }
}

/// Options of one send.
#[derive(Default)]
pub struct SendOptions<'a> {
    /// Names the send: sent at most once per bot.
    pub idempotency_key: Option<&'a str>,
    /// One attachment: a ref or a public url.
    pub media: Option<&'a Media>,
}

impl Context {
    /// Posts text to the event's chat (see `post`): status "queued".
    pub fn reply(&mut self, text: &str) -> Result<SendResult, String> {
        let chat = self.event.chat.clone();
        self.post(&chat, text, SendOptions::default())
    }

    /// Queues a send of text to chat and returns at once (status "queued",
    /// with its key). The host makes the handler's posted sends, in order,
    /// when it returns, so the instance is free while they wait on the
    /// journal and the channel (abi/SPEC.md section 4.3).
    pub fn post(&mut self, chat: &str, text: &str, opts: SendOptions) -> Result<SendResult, String> {
        self.do_send("post", chat, text, opts)
    }

    /// Sends text to chat and waits for the outbox's answer. A dead or
    /// deferred send is an error (a deferred one stays journaled and the host
    /// keeps retrying it).
    pub fn send(&mut self, chat: &str, text: &str, opts: SendOptions) -> Result<SendResult, String> {
        let r = self.do_send("send", chat, text, opts)?;
        if r.status == "dead" || r.status == "deferred" {
            return Err(format!("send {} {}: {}", r.key, r.status, r.error));
        }
        Ok(r)
    }

    /// Journals a send for the host to deliver in the background.
    pub fn enqueue(&mut self, chat: &str, text: &str, opts: SendOptions) -> Result<SendResult, String> {
        self.do_send("enqueue", chat, text, opts)
    }

    fn do_send(&mut self, func: &'static str, chat: &str, text: &str, opts: SendOptions) -> Result<SendResult, String> {
        if self.replaying {
            // The host numbers sends, so one that does not reach it takes no
            // derived key: the live sends keep their numbers on every replay.
            return Ok(SendResult { status: REPLAYED.to_string(), ..Default::default() });
        }
        let mut b = String::from("{\"chat\":");
        json::put_string(&mut b, chat);
        b.push_str(",\"text\":");
        json::put_string(&mut b, text);
        if let Some(m) = opts.media {
            b.push_str(",\"media\":{\"type\":");
            json::put_string(&mut b, &m.r#type);
            for (k, v) in [("ref", &m.r#ref), ("url", &m.url), ("mime", &m.mime), ("caption", &m.caption)] {
                if !v.is_empty() {
                    b.push_str(&format!(",\"{}\":", k));
                    json::put_string(&mut b, v);
                }
            }
            b.push('}');
        }
        if let Some(k) = opts.idempotency_key {
            b.push_str(",\"idempotency_key\":");
            json::put_string(&mut b, k);
        }
        b.push('}');
        let n = unsafe {
            match func {
                "enqueue" => enqueue(b.as_ptr(), b.len() as i32),
                "post" => post(b.as_ptr(), b.len() as i32),
                _ => send(b.as_ptr(), b.len() as i32),
            }
        };
        let out = result(func, n)?;
        json::decode_result(&out).ok_or_else(|| "botrun.send: bad result".to_string())
    }

    /// Reads a conversation state value of the event's chat.
    pub fn state_get(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        let n = unsafe { state_get(key.as_ptr(), key.len() as i32) };
        if n == -3 {
            return Ok(None);
        }
        result("state_get", n).map(Some)
    }

    /// Writes a conversation state value; it commits with the event.
    pub fn state_set(&self, key: &str, value: &[u8]) -> Result<(), String> {
        let n = unsafe { state_set(key.as_ptr(), key.len() as i32, value.as_ptr(), value.len() as i32) };
        if n < 0 {
            return Err(format!("botrun.state_set: {}", code_name(n)));
        }
        Ok(())
    }

    /// Removes a conversation state value; it commits with the event.
    pub fn state_delete(&self, key: &str) -> Result<(), String> {
        let n = unsafe { state_delete(key.as_ptr(), key.len() as i32) };
        if n < 0 {
            return Err(format!("botrun.state_delete: {}", code_name(n)));
        }
        Ok(())
    }

    /// Downloads the bytes of `event.media[index]` through the host.
    pub fn load_media(&self, index: usize) -> Result<Vec<u8>, MediaError> {
        let n = unsafe { media_load(index as i32) };
        match n {
            -8 => {
                // The reason is a JSON object of at most 1 KiB (SPEC.md section 4).
                let mut buf = vec![0u8; 1024];
                let got = unsafe { result_read(buf.as_mut_ptr(), buf.len() as i32) };
                if got < 0 {
                    return Err(MediaError::Host(format!("botrun.result_read: {}", code_name(got))));
                }
                buf.truncate(got as usize);
                json::decode_unavailable(&buf)
                    .map(MediaError::Unavailable)
                    .ok_or_else(|| MediaError::Host("botrun.media_load: bad result".into()))
                    .and_then(Err)
            }
            -4 => Err(MediaError::Unsupported),
            _ => result("media_load", n).map_err(MediaError::Host),
        }
    }

    /// Writes a line to the host log (0 debug, 1 info, 2 warn, 3 error).
    pub fn log(&self, level: i32, msg: &str) {
        unsafe { log(level, msg.as_ptr(), msg.len() as i32) }
    }

    /// Starts a flow in this chat.
    pub fn start(&mut self, flows: &Flows, name: &str) -> Result<(), String> {
        run_flow(self, flows, name, Vec::new())
    }

    /// Feeds this message to the chat's flow in progress; Ok(false) when there
    /// is none. A state that does not parse, or names a flow not in `flows`,
    /// is deleted (logged) and Ok(false) returned: handle the message as a
    /// normal message.
    pub fn continue_flow(&mut self, flows: &Flows) -> Result<bool, String> {
        let state = match self.state_get(FLOW_KEY)? {
            Some(s) => s,
            None => return Ok(false),
        };
        let mut fields = match decode_flow(&state) {
            Some(f) => f.into_iter().map(|p| String::from_utf8_lossy(p).into_owned()),
            None => {
                self.log(2, "botrun flow: forgetting the chat's flow: its state is not a sequence of netstrings (SPEC.md section 7); the message is handled as a normal message");
                self.state_delete(FLOW_KEY)?;
                return Ok(false);
            }
        };
        let name = fields.next().unwrap_or_default();
        let mut answers: Vec<String> = fields.collect();
        answers.push(self.event.text.clone());
        if !flows.0.contains_key(name.as_str()) {
            self.log(2, &format!("botrun flow: forgetting the chat's flow {:?}: this module has no flow of that name; the message is handled as a normal message", name));
            self.state_delete(FLOW_KEY)?;
            return Ok(false);
        }
        run_flow(self, flows, &name, answers)?;
        Ok(true)
    }
}

/// The event's time in milliseconds: the deterministic clock.
pub fn now() -> i64 {
    unsafe { now_ms() }
}

/// A flow asks questions and takes the chat's next messages as the answers;
/// it is re-run from the start for each message with the answers so far.
/// While it replays the steps it already took (up to the `ask` that returns
/// this message's answer) its sends are not made: they return a SendResult
/// with status `REPLAYED`, so a reply between two questions goes out once.
/// The state format is abi/SPEC.md section 7, the same in every SDK.
pub struct Flow<'a> {
    pub ctx: &'a mut Context,
    answers: Vec<String>,
    asked: usize,
}

/// What ask returns when the question was sent: return it to wait.
pub const WAITING: &str = "botrun flow: waiting for an answer";

/// The status of a send a flow makes while it replays a step already taken.
pub const REPLAYED: &str = "replayed";

impl<'a> Flow<'a> {
    /// The answer to the question; the first time the flow reaches it, sends
    /// it and returns Err(WAITING).
    pub fn ask(&mut self, question: &str) -> Result<String, String> {
        self.asked += 1;
        if self.asked <= self.answers.len() {
            if self.asked == self.answers.len() {
                self.ctx.replaying = false; // this message's answer: what follows is new
            }
            return Ok(self.answers[self.asked - 1].clone());
        }
        self.ctx.reply(question)?;
        Err(WAITING.to_string())
    }
}

/// The flows of a bot by name.
pub struct Flows(pub HashMap<&'static str, fn(&mut Flow) -> Result<(), String>>);

const FLOW_KEY: &str = "botrun.flow";

fn put_netstring(b: &mut Vec<u8>, s: &[u8]) {
    b.extend_from_slice(s.len().to_string().as_bytes());
    b.push(b':');
    b.extend_from_slice(s);
    b.push(b',');
}

/// The fields of a flow state (the name, then the answers), or None when the
/// value is not a non-empty sequence of netstrings.
fn decode_flow(mut b: &[u8]) -> Option<Vec<&[u8]>> {
    let mut fields = Vec::new();
    while !b.is_empty() {
        let (mut n, mut i) = (0usize, 0usize);
        while i < b.len() && b[i].is_ascii_digit() {
            if i > 0 && n == 0 {
                return None; // a leading zero
            }
            n = n.checked_mul(10)?.checked_add((b[i] - b'0') as usize)?;
            if n > b.len() {
                return None;
            }
            i += 1;
        }
        if i == 0 || i + 1 + n >= b.len() || b[i] != b':' || b[i + 1 + n] != b',' {
            return None;
        }
        fields.push(&b[i + 1..i + 1 + n]);
        b = &b[i + 2 + n..];
    }
    if fields.is_empty() {
        None
    } else {
        Some(fields)
    }
}

fn run_flow(ctx: &mut Context, flows: &Flows, name: &str, answers: Vec<String>) -> Result<(), String> {
    let f = *flows.0.get(name).ok_or_else(|| format!("no flow {}", name))?;
    ctx.replaying = !answers.is_empty();
    let mut flow = Flow { ctx, answers, asked: 0 };
    let res = f(&mut flow);
    if flow.ctx.replaying {
        flow.ctx.replaying = false;
        flow.ctx.log(2, &format!("botrun flow: flow {:?} ended before the question this message answers (was the module changed?); sends of the steps it replayed were not repeated", name));
    }
    match res {
        Err(e) if e == WAITING => {
            let mut b = Vec::new();
            put_netstring(&mut b, name.as_bytes());
            for a in &flow.answers {
                put_netstring(&mut b, a.as_bytes());
            }
            flow.ctx.state_set(FLOW_KEY, &b)
        }
        Err(e) => Err(e),
        Ok(()) => flow.ctx.state_delete(FLOW_KEY),
    }
}

/// Runs one event: called by the export the handler macro generates.
pub fn run(len: i32, handler: fn(&mut Context) -> Result<(), String>) -> i32 {
    let mut buf = vec![0u8; len as usize];
    if unsafe { event_read(buf.as_mut_ptr(), len) } != len {
        return 1;
    }
    let event = match json::decode_event(&buf) {
        Some(e) => e,
        None => {
            let m = "botrun sdk: bad event";
            unsafe { log(3, m.as_ptr(), m.len() as i32) };
            return 1;
        }
    };
    let mut ctx = Context { event, replaying: false };
    match handler(&mut ctx) {
        Ok(()) => 0,
        Err(e) => {
            ctx.log(3, &e);
            1
        }
    }
}

/// Exports the ABI v1 entry points for a handler
/// `fn(&mut botrun::Context) -> Result<(), String>`.
#[macro_export]
macro_rules! export_handler {
    ($handler:path) => {
        #[no_mangle]
        pub extern "C" fn botrun_abi_v1() {}

        #[no_mangle]
        pub extern "C" fn botrun_on_event(len: i32) -> i32 {
            $crate::run(len, $handler)
        }
    };
}
