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
//! fn handle(ctx: &mut botrun::Context) -> Result<(), botrun::Error> {
//!     ctx.reply(&format!("echo: {}", ctx.event.text))?;
//!     Ok(())
//! }
//! botrun::export_handler!(handle);
//! ```
//!
//! Send hooks (abi/SPEC.md section 4.7) are opt-in, each with its macro: a
//! bot that uses neither exports no hook and pays nothing.
//!
//! ```text
//! fn sign(s: &mut botrun::Outgoing) -> Result<botrun::Verdict, botrun::Error> {
//!     s.text.push_str("\n-- sent by botrun");
//!     Ok(botrun::Verdict::Send)
//! }
//! botrun::before_send!(sign);
//! ```

mod json;

use std::cell::RefCell;
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
    #[link_name = "log"]
    fn host_log(level: i32, p: *const u8, n: i32);
    fn now_ms() -> i64;
    fn media_load(index: i32) -> i32;
    fn broadcast(p: *const u8, n: i32) -> i32;
    fn edit(p: *const u8, n: i32) -> i32;
    fn typing(p: *const u8, n: i32) -> i32;
    fn fetch(p: *const u8, n: i32) -> i32;
    fn rewrite(p: *const u8, n: i32) -> i32;
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
    /// `KIND_MESSAGE`, `KIND_INTERACTION` (the press of a button or a list
    /// row the bot sent: `interaction` says which, and `text` holds its title
    /// too), or a kind a later host adds. An event from a host that sends no
    /// kind is a message.
    pub kind: String,
    /// The press, for an event of kind `KIND_INTERACTION`.
    pub interaction: Option<Interaction>,
}

/// `Event::kind` of a message (also every event of a host that sends no kind).
pub const KIND_MESSAGE: &str = "message";
/// `Event::kind` of the press of a reply button or a list row.
pub const KIND_INTERACTION: &str = "interaction";

/// The press of a reply button or a list row.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Interaction {
    /// The button's or row's id, as the send gave it.
    pub id: String,
    /// Its title, when the channel says ("" otherwise).
    pub title: String,
    /// The channel's id of the message it was on (the `ref` its send
    /// returned), when the channel says ("" otherwise).
    pub message: String,
}

/// A button under a message: a reply button (`id` and `title`; a press
/// arrives as an event of kind `KIND_INTERACTION` with that id) or a URL
/// button (`title` and `url`, http or https; the user's app opens it). Give
/// `id` or `url`, not both.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Button {
    pub id: String,
    pub title: String,
    pub url: String,
}

impl Button {
    /// A reply button: pressed, it arrives as an interaction with `id`.
    pub fn reply(id: &str, title: &str) -> Button {
        Button { id: id.to_string(), title: title.to_string(), url: String::new() }
    }

    /// A button that opens `url`.
    pub fn url(title: &str, url: &str) -> Button {
        Button { id: String::new(), title: title.to_string(), url: url.to_string() }
    }
}

/// A list under a message: a button titled `button` opens its sections of
/// rows; a picked row arrives as an interaction with the row's id.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct List {
    pub button: String,
    pub sections: Vec<ListSection>,
}

/// A group of rows; `title` may be empty.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ListSection {
    pub title: String,
    pub rows: Vec<ListRow>,
}

/// One choice of a `List`; `description` may be empty.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ListRow {
    pub id: String,
    pub title: String,
    pub description: String,
}

impl ListRow {
    /// A row with an id and a title, and no description.
    pub fn new(id: &str, title: &str) -> ListRow {
        ListRow { id: id.to_string(), title: title.to_string(), description: String::new() }
    }
}

/// The ABI's bound on a send's buttons (a channel may allow fewer).
pub const MAX_BUTTONS: usize = 16;
/// The ABI's bound on a list's rows, across its sections.
pub const MAX_LIST_ROWS: usize = 100;
/// The ABI's bound on a button's or row's id, in bytes.
pub const MAX_CHOICE_ID: usize = 256;

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
    /// `SENT`, `DEDUPED`, `DEFERRED`, `DEAD` or `BYPASSED`; `QUEUED` from
    /// `post` and `reply`; `SCHEDULED` from `enqueue` with a future `at`; or,
    /// from the SDK, `REPLAYED` (a flow's send while it replays a step already
    /// taken: no host call).
    pub status: String,
    pub key: String,
    pub r#ref: String,
    pub error: String,
}

/// The host's answer to `broadcast`: how many keys `<key_prefix>:<chat>` it
/// journaled now, and how many it had journaled already (a replay of the
/// event, or an earlier broadcast with the same prefix), which are not sent
/// again.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct BroadcastResult {
    pub journaled: i64,
    pub existing: i64,
    /// The SDK's: a flow made the broadcast while it replays a step already
    /// taken, so nothing went to the host (the counts are 0).
    pub replayed: bool,
}

/// One call of an API bot.toml names in an `[[apis]]` entry
/// (`Context::fetch`); set what you need and leave the rest to `Default`:
/// `Request { path: "/orders/42", ..Default::default() }`.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Request<'a> {
    /// GET (the default when empty), HEAD, POST, PUT, PATCH or DELETE.
    pub method: &'a str,
    /// The path under the API's url, with its query:
    /// "/orders/42?expand=items".
    pub path: &'a str,
    /// The request's headers, each name once; the headers bot.toml sets for
    /// the API replace those of the same name.
    pub headers: &'a [(&'a str, &'a str)],
    /// The request's body (empty: none), at most 1 MiB; sent as text when
    /// it is UTF-8, in base64 otherwise.
    pub body: &'a [u8],
    /// Replaces the call's Idempotency-Key, `<event id>:fetch:<n>` for the
    /// event's n-th call (empty: that one).
    pub key: &'a str,
}

/// The API's answer, whatever its status: a 404 or a 500 is a `Response`,
/// not an error.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Response {
    pub status: i64,
    /// The answer's headers (canonical names, the first value of each); see
    /// `header`.
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
    /// The answer came from the journal: the event is handled again (after
    /// a crash, a retry or a replay) and the call it made the first time is
    /// not made again; or, in a flow, from the calls kept with it (a replayed
    /// step's call, see `Context::fetch`).
    pub replayed: bool,
}

impl Response {
    /// The value of the header `name`, compared without case.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The body as text (invalid UTF-8 replaced by U+FFFD).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// What a handler gets for one event. `Context::default()` has no event: in
/// a send hook, where there is none, its sends and state calls answer
/// `Error::Host` with UNSUPPORTED.
#[derive(Default)]
pub struct Context {
    pub event: Event,
    /// Set while a flow replays the steps it already took: sends, edits and
    /// typing are not made.
    replaying: bool,
    /// The kept calls of the flow running now (None outside a flow): `fetch`
    /// answers a replayed step's calls from them.
    calls: RefCell<Option<FlowCalls>>,
}

/// A host function's negative result (abi/SPEC.md section 4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// -1: a pointer/length pair is outside the guest's memory.
    BadPointer,
    /// -2: the payload (or a state key) is not what the host accepts.
    BadPayload,
    /// -3: no such state key, or no media at that index.
    NotFound,
    /// -4: this host does not offer the function.
    Unsupported,
    /// -5: over a host limit, or a state write past the state limits.
    TooLarge,
    /// -6: `result_read` with no pending result.
    NoResult,
    /// -7: the host failed; the event's attempt fails and is retried.
    HostError,
    /// -8: `media_load` cannot have the bytes (see `MediaUnavailableError`).
    MediaUnavailable,
    /// -9: the channel refused or failed an `edit` or a `typing` (see
    /// `Error::ChannelFailed`); the event goes on.
    ChannelFailed,
    /// -10: a `fetch` got no response (see `Error::FetchFailed`); the event
    /// goes on.
    FetchFailed,
    /// A code this SDK does not know.
    Other(i32),
}

impl Code {
    /// The code of a host function's negative result.
    pub fn from_raw(n: i32) -> Code {
        match n {
            -1 => Code::BadPointer,
            -2 => Code::BadPayload,
            -3 => Code::NotFound,
            -4 => Code::Unsupported,
            -5 => Code::TooLarge,
            -6 => Code::NoResult,
            -7 => Code::HostError,
            -8 => Code::MediaUnavailable,
            -9 => Code::ChannelFailed,
            -10 => Code::FetchFailed,
            n => Code::Other(n),
        }
    }

    /// The number on the wire.
    pub fn raw(self) -> i32 {
        match self {
            Code::BadPointer => -1,
            Code::BadPayload => -2,
            Code::NotFound => -3,
            Code::Unsupported => -4,
            Code::TooLarge => -5,
            Code::NoResult => -6,
            Code::HostError => -7,
            Code::MediaUnavailable => -8,
            Code::ChannelFailed => -9,
            Code::FetchFailed => -10,
            Code::Other(n) => n,
        }
    }

    /// The SPEC name, e.g. "TOO_LARGE" ("UNKNOWN" for `Other`).
    pub fn name(self) -> &'static str {
        match self {
            Code::BadPointer => "BAD_POINTER",
            Code::BadPayload => "BAD_PAYLOAD",
            Code::NotFound => "NOT_FOUND",
            Code::Unsupported => "UNSUPPORTED",
            Code::TooLarge => "TOO_LARGE",
            Code::NoResult => "NO_RESULT",
            Code::HostError => "HOST_ERROR",
            Code::MediaUnavailable => "MEDIA_UNAVAILABLE",
            Code::ChannelFailed => "CHANNEL_FAILED",
            Code::FetchFailed => "FETCH_FAILED",
            Code::Other(_) => "UNKNOWN",
        }
    }
}

/// Log levels of `Context::log`.
pub const LOG_DEBUG: i32 = 0;
/// Info level.
pub const LOG_INFO: i32 = 1;
/// Warn level.
pub const LOG_WARN: i32 = 2;
/// Error level: a handler's error is logged at it.
pub const LOG_ERROR: i32 = 3;

/// Why `load_media` has no bytes: `reason` is "not-durable",
/// "provider-mismatch" or "rehydrate-failed" (SPEC.md section 4). The message
/// is processed all the same; only the download failed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MediaUnavailableError {
    pub reason: String,
    pub message: String,
}

/// Every error of the SDK.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// A host function answered a negative code.
    Host { func: &'static str, code: Code },
    /// `load_media`: MEDIA_UNAVAILABLE, with the reason.
    MediaUnavailable(MediaUnavailableError),
    /// `edit` or `typing` (`func`): CHANNEL_FAILED, with the channel's
    /// message (the host cuts it to 512 bytes). The event goes on.
    ChannelFailed { func: &'static str, message: String },
    /// `fetch` of `api`: FETCH_FAILED, the call got no response. `reason`
    /// is "refused" (the destination is not allowed: nothing was sent),
    /// "connection", "timeout" or "too-large" (the answer is over the API's
    /// `max_response`); `message` says more ("" when the host gave none).
    /// The event goes on.
    FetchFailed { api: String, reason: String, message: String },
    /// `send`: the send is dead, or deferred (it stays journaled and the host
    /// keeps retrying it).
    NotSent(SendResult),
    /// A flow's `ask` sent its question: return it to wait for the answer.
    Waiting,
    /// The host's result (a SendResult, a FetchResponse, or
    /// MEDIA_UNAVAILABLE's reason) did not parse: the SDK's own error, with
    /// no host code.
    BadResult(&'static str),
    /// A handler's own error.
    Handler(String),
}

impl Error {
    /// The host code the error carries, if any (MEDIA_UNAVAILABLE for
    /// `MediaUnavailable`, CHANNEL_FAILED for `ChannelFailed`, FETCH_FAILED
    /// for `FetchFailed`).
    pub fn code(&self) -> Option<Code> {
        match self {
            Error::Host { code, .. } => Some(*code),
            Error::MediaUnavailable(_) => Some(Code::MediaUnavailable),
            Error::ChannelFailed { .. } => Some(Code::ChannelFailed),
            Error::FetchFailed { .. } => Some(Code::FetchFailed),
            _ => None,
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Error::Host { func, code } => write!(f, "botrun.{}: {}", func, code.name()),
            Error::MediaUnavailable(e) if e.message.is_empty() => write!(f, "media unavailable: {}", e.reason),
            Error::MediaUnavailable(e) => write!(f, "media unavailable: {}: {}", e.reason, e.message),
            Error::ChannelFailed { func, message } if message.is_empty() => write!(f, "botrun.{}: CHANNEL_FAILED", func),
            Error::ChannelFailed { func, message } => write!(f, "botrun.{}: CHANNEL_FAILED: {}", func, message),
            Error::FetchFailed { api, reason, message } if message.is_empty() => write!(f, "botrun.fetch {}: FETCH_FAILED: {}", api, reason),
            Error::FetchFailed { api, reason, message } => write!(f, "botrun.fetch {}: FETCH_FAILED: {}: {}", api, reason, message),
            Error::NotSent(r) => write!(f, "send {} {}: {}", r.key, r.status, r.error),
            Error::Waiting => write!(f, "{}", WAITING),
            Error::BadResult(func) => write!(f, "botrun.{}: bad result", func),
            Error::Handler(s) => write!(f, "{}", s),
        }
    }
}

impl From<String> for Error {
    fn from(s: String) -> Error {
        Error::Handler(s)
    }
}

impl From<&str> for Error {
    fn from(s: &str) -> Error {
        Error::Handler(s.to_string())
    }
}

fn put_media(b: &mut String, m: &Media) {
    b.push_str(",\"media\":{\"type\":");
    json::put_string(b, &m.r#type);
    for (k, v) in [("ref", &m.r#ref), ("url", &m.url), ("mime", &m.mime), ("caption", &m.caption)] {
        if !v.is_empty() {
            b.push_str(&format!(",\"{}\":", k));
            json::put_string(b, v);
        }
    }
    b.push('}');
}

fn host(func: &'static str, n: i32) -> Error {
    Error::Host { func, code: Code::from_raw(n) }
}

fn result(f: &'static str, n: i32) -> Result<Vec<u8>, Error> {
    if n < 0 {
        return Err(host(f, n));
    }
    let mut buf = vec![0u8; n as usize];
    if n > 0 {
        let got = unsafe { result_read(buf.as_mut_ptr(), n) };
        if got != n {
            return Err(host("result_read", if got < 0 { got } else { Code::NoResult.raw() }));
        }
    }
    Ok(buf)
}

/// The answer of `edit` or `typing` (`func`): Ok, `Error::ChannelFailed`
/// with the pending result's message, or `Error::Host`.
fn channel_op(func: &'static str, n: i32) -> Result<(), Error> {
    if n == 0 {
        return Ok(());
    }
    if Code::from_raw(n) != Code::ChannelFailed {
        return Err(host(func, n));
    }
    // The host cuts the channel's message to 512 bytes; escaped in JSON (six
    // bytes for a '<') that is at most about 3 KiB.
    let mut buf = vec![0u8; 4096];
    let got = unsafe { result_read(buf.as_mut_ptr(), buf.len() as i32) };
    if got < 0 {
        return Err(host("result_read", got));
    }
    buf.truncate(got as usize);
    match json::decode_channel_error(&buf) {
        Some(message) => Err(Error::ChannelFailed { func, message }),
        None => Err(Error::BadResult(func)),
    }
}

// The statuses of a `SendResult` (abi/SPEC.md section 2); `REPLAYED` is the
// SDK's.
/// The channel accepted the send.
pub const SENT: &str = "sent";
/// The key was sent before: nothing was sent again.
pub const DEDUPED: &str = "deduped";
/// Journaled, not sent yet: the host keeps retrying it.
pub const DEFERRED: &str = "deferred";
/// The channel refused the send for good.
pub const DEAD: &str = "dead";
/// Sent without the journal (the channel's own replay is not deduplicated).
pub const BYPASSED: &str = "bypassed";
/// `post` and `reply`: the send is made when the handler returns.
pub const QUEUED: &str = "queued";
/// `enqueue` with a future `at`: the send is journaled and held until then.
pub const SCHEDULED: &str = "scheduled";

/// Options of one send.
#[derive(Default)]
pub struct SendOptions<'a> {
    /// Names the send: sent at most once per bot.
    pub idempotency_key: Option<&'a str>,
    /// One attachment: a ref or a public url.
    pub media: Option<&'a Media>,
    /// Holds an `enqueue` until this time, in Unix milliseconds: the host
    /// journals it at once, answers `SCHEDULED`, and sends it once when it is
    /// due, across restarts (`botrun outbox list --state scheduled` shows it,
    /// `botrun discard KEY` cancels it). The clock is the event's: compute it
    /// from `ctx.event.received_at` (or `now()`), e.g.
    /// `ctx.event.received_at + 60_000`. 0 (the default) or a time already
    /// past sends as soon as possible; a negative time is refused
    /// (BAD_PAYLOAD). Only `enqueue` takes it: `send` and `post` pass it to
    /// the host, which refuses them with BAD_PAYLOAD.
    pub at: i64,
    /// Buttons under the message (`Button::reply`, `Button::url`); empty for
    /// none. The host refuses with BAD_PAYLOAD an empty title, a button with
    /// both an id and a url (or neither), an id that is not printable or is
    /// over `MAX_CHOICE_ID` bytes, a url that is not http(s), more than
    /// `MAX_BUTTONS`, and buttons with a `list`. A channel that cannot show
    /// them refuses the send at send time: it is dead, never sent without
    /// them. A text the channel splits carries them on its last part.
    pub buttons: &'a [Button],
    /// A list under the message (not with `buttons`). The host refuses with
    /// BAD_PAYLOAD a list without a button title, sections or rows, a row
    /// without an id or a title, and more than `MAX_LIST_ROWS` rows.
    pub list: Option<&'a List>,
}

fn put_choices(b: &mut String, buttons: &[Button], list: Option<&List>) {
    if !buttons.is_empty() {
        b.push_str(",\"buttons\":[");
        for (i, btn) in buttons.iter().enumerate() {
            if i > 0 {
                b.push(',');
            }
            b.push('{');
            if !btn.id.is_empty() {
                b.push_str("\"id\":");
                json::put_string(b, &btn.id);
                b.push(',');
            }
            b.push_str("\"title\":");
            json::put_string(b, &btn.title);
            if !btn.url.is_empty() {
                b.push_str(",\"url\":");
                json::put_string(b, &btn.url);
            }
            b.push('}');
        }
        b.push(']');
    }
    if let Some(l) = list {
        b.push_str(",\"list\":{\"button\":");
        json::put_string(b, &l.button);
        b.push_str(",\"sections\":[");
        for (i, sec) in l.sections.iter().enumerate() {
            if i > 0 {
                b.push(',');
            }
            b.push('{');
            if !sec.title.is_empty() {
                b.push_str("\"title\":");
                json::put_string(b, &sec.title);
                b.push(',');
            }
            b.push_str("\"rows\":[");
            for (j, row) in sec.rows.iter().enumerate() {
                if j > 0 {
                    b.push(',');
                }
                b.push_str("{\"id\":");
                json::put_string(b, &row.id);
                b.push_str(",\"title\":");
                json::put_string(b, &row.title);
                if !row.description.is_empty() {
                    b.push_str(",\"description\":");
                    json::put_string(b, &row.description);
                }
                b.push('}');
            }
            b.push_str("]}");
        }
        b.push_str("]}");
    }
}

/// The SendRequest JSON of a send of text to chat with opts.
fn request(chat: &str, text: &str, opts: &SendOptions) -> String {
    let mut b = String::from("{\"chat\":");
    json::put_string(&mut b, chat);
    b.push_str(",\"text\":");
    json::put_string(&mut b, text);
    if let Some(m) = opts.media {
        put_media(&mut b, m);
    }
    if let Some(k) = opts.idempotency_key {
        b.push_str(",\"idempotency_key\":");
        json::put_string(&mut b, k);
    }
    if opts.at != 0 {
        b.push_str(&format!(",\"at\":{}", opts.at));
    }
    put_choices(&mut b, opts.buttons, opts.list);
    b.push('}');
    b
}

impl Context {
    /// Posts text to the event's chat (see `post`): status "queued".
    pub fn reply(&mut self, text: &str) -> Result<SendResult, Error> {
        let chat = self.event.chat.clone();
        self.post(&chat, text, SendOptions::default())
    }

    /// Queues a send of text to chat and returns at once (status "queued",
    /// with its key). The host makes the handler's posted sends, in order,
    /// when it returns, so the instance is free while they wait on the
    /// journal and the channel (abi/SPEC.md section 4.3).
    pub fn post(&mut self, chat: &str, text: &str, opts: SendOptions) -> Result<SendResult, Error> {
        self.do_send("post", chat, text, opts)
    }

    /// Sends text to chat and waits for the outbox's answer. A dead or
    /// deferred send is an error (a deferred one stays journaled and the host
    /// keeps retrying it).
    pub fn send(&mut self, chat: &str, text: &str, opts: SendOptions) -> Result<SendResult, Error> {
        let r = self.do_send("send", chat, text, opts)?;
        if r.status == DEAD || r.status == DEFERRED {
            return Err(Error::NotSent(r));
        }
        Ok(r)
    }

    /// Journals a send for the host to deliver in the background: status
    /// `DEFERRED`, or `SCHEDULED` with a future `opts.at` (held until then).
    pub fn enqueue(&mut self, chat: &str, text: &str, opts: SendOptions) -> Result<SendResult, Error> {
        self.do_send("enqueue", chat, text, opts)
    }

    fn do_send(&mut self, func: &'static str, chat: &str, text: &str, opts: SendOptions) -> Result<SendResult, Error> {
        if self.replaying {
            // The host numbers sends, so one that does not reach it takes no
            // derived key: the live sends keep their numbers on every replay.
            return Ok(SendResult { status: REPLAYED.to_string(), ..Default::default() });
        }
        let b = request(chat, text, &opts);
        let n = unsafe {
            match func {
                "enqueue" => enqueue(b.as_ptr(), b.len() as i32),
                "post" => post(b.as_ptr(), b.len() as i32),
                _ => send(b.as_ptr(), b.len() as i32),
            }
        };
        let out = result(func, n)?;
        json::decode_result(&out).ok_or(Error::BadResult(func))
    }

    /// Journals one send of text to each of chats, under the key
    /// `<key_prefix>:<chat>`, for the host's sweeper to deliver, and returns
    /// at once with the counts. A chat listed twice is sent once; a key
    /// journaled before (the event's retry, or an earlier broadcast with the
    /// same prefix) is not sent again, so name the prefix after what is
    /// announced (`"news:42"`), not after the event. `at` (Unix ms, 0 for now)
    /// holds every send until then, as `SendOptions::at` does an enqueue. A
    /// broadcast counts once against `bot.max_sends`.
    ///
    /// Errors are `Error::Host`: BAD_PAYLOAD (no chats, an empty chat or
    /// prefix, an empty text, a negative `at`, a control character in a chat
    /// or the prefix), TOO_LARGE (over 1 MiB, or more chats than
    /// `bot.max_broadcast`), UNSUPPORTED (a host without broadcast), HOST_ERROR
    /// (the journal failed, or past `bot.max_sends`: the event's attempt
    /// fails).
    pub fn broadcast(&mut self, chats: &[&str], text: &str, key_prefix: &str, at: i64) -> Result<BroadcastResult, Error> {
        self.broadcast_media(chats, text, None, key_prefix, at)
    }

    /// `broadcast` with one attachment (a ref or a public url); text may be
    /// empty with a media.
    pub fn broadcast_media(&mut self, chats: &[&str], text: &str, media: Option<&Media>, key_prefix: &str, at: i64) -> Result<BroadcastResult, Error> {
        if self.replaying {
            // As a flow's sends: the host numbers a broadcast like a send.
            return Ok(BroadcastResult { replayed: true, ..Default::default() });
        }
        let mut b = String::from("{\"chats\":[");
        for (i, c) in chats.iter().enumerate() {
            if i > 0 {
                b.push(',');
            }
            json::put_string(&mut b, c);
        }
        b.push_str("],\"text\":");
        json::put_string(&mut b, text);
        if let Some(m) = media {
            put_media(&mut b, m);
        }
        b.push_str(",\"key_prefix\":");
        json::put_string(&mut b, key_prefix);
        if at != 0 {
            b.push_str(&format!(",\"at\":{}", at));
        }
        b.push('}');
        let n = unsafe { broadcast(b.as_ptr(), b.len() as i32) };
        let out = result("broadcast", n)?;
        json::decode_broadcast(&out).ok_or(Error::BadResult("broadcast"))
    }

    /// Reads a conversation state value of the event's chat: Ok(None) when
    /// absent (NOT_FOUND); every other code is an `Error::Host`, never
    /// absence.
    pub fn state_get(&self, key: &str) -> Result<Option<Vec<u8>>, Error> {
        let n = unsafe { state_get(key.as_ptr(), key.len() as i32) };
        if Code::from_raw(n) == Code::NotFound {
            return Ok(None);
        }
        result("state_get", n).map(Some)
    }

    /// Writes a conversation state value; it commits with the event.
    pub fn state_set(&self, key: &str, value: &[u8]) -> Result<(), Error> {
        let n = unsafe { state_set(key.as_ptr(), key.len() as i32, value.as_ptr(), value.len() as i32) };
        if n < 0 {
            return Err(host("state_set", n));
        }
        Ok(())
    }

    /// Removes a conversation state value; it commits with the event.
    pub fn state_delete(&self, key: &str) -> Result<(), Error> {
        let n = unsafe { state_delete(key.as_ptr(), key.len() as i32) };
        if n < 0 {
            return Err(host("state_delete", n));
        }
        Ok(())
    }

    /// Downloads the bytes of `event.media[index]` through the host:
    /// `Error::MediaUnavailable` when the bytes cannot be had, else
    /// `Error::Host` (UNSUPPORTED: the channel cannot download; NOT_FOUND: no
    /// such index; TOO_LARGE: over 20 MiB).
    pub fn load_media(&self, index: usize) -> Result<Vec<u8>, Error> {
        let n = unsafe { media_load(index as i32) };
        if Code::from_raw(n) != Code::MediaUnavailable {
            return result("media_load", n);
        }
        // The reason is a JSON object of at most 1 KiB (SPEC.md section 4).
        let mut buf = vec![0u8; 1024];
        let got = unsafe { result_read(buf.as_mut_ptr(), buf.len() as i32) };
        if got < 0 {
            return Err(host("result_read", got));
        }
        buf.truncate(got as usize);
        match json::decode_unavailable(&buf) {
            Some(e) => Err(Error::MediaUnavailable(e)),
            None => Err(Error::BadResult("media_load")),
        }
    }

    /// Replaces the text of a message the bot sent in `chat`: `message` is
    /// the `ref` its `send` returned (a `post`'s send is made after the
    /// handler returns, so its ref is not known: `send` what you mean to
    /// edit). The channel edits it now; the edit is not journaled (a retry of
    /// the event edits again, which changes nothing), takes no number in the
    /// event's derived keys and does not count against `bot.max_sends`.
    ///
    /// Errors: `Error::ChannelFailed` when the channel refused or failed it,
    /// with the channel's message (the event goes on); `Error::Host` with
    /// UNSUPPORTED (the channel cannot edit, e.g. WhatsApp or Twilio, or a
    /// host without edit), BAD_PAYLOAD (an empty chat, message or text, or a
    /// chat or message that is not printable), TOO_LARGE (over 1 MiB). While
    /// a flow replays a step already taken it makes no call and returns
    /// Ok(()).
    pub fn edit(&self, chat: &str, message: &str, text: &str) -> Result<(), Error> {
        if self.replaying {
            return Ok(()); // the step's edit was made with the message that took it
        }
        let mut b = String::from("{\"chat\":");
        json::put_string(&mut b, chat);
        b.push_str(",\"message\":");
        json::put_string(&mut b, message);
        b.push_str(",\"text\":");
        json::put_string(&mut b, text);
        b.push('}');
        channel_op("edit", unsafe { edit(b.as_ptr(), b.len() as i32) })
    }

    /// Shows "typing…" in `chat` for a few seconds (or until the bot's next
    /// message), where the channel has it: webchat, Telegram, and WhatsApp
    /// (in answer to the event's message, which it marks read). Not
    /// journaled, not a send; its errors are `edit`'s (UNSUPPORTED on
    /// Twilio). A bot usually ignores them: the indicator is a courtesy.
    /// While a flow replays a step already taken it makes no call.
    pub fn typing(&self, chat: &str) -> Result<(), Error> {
        if self.replaying {
            return Ok(());
        }
        let mut b = String::from("{\"chat\":");
        json::put_string(&mut b, chat);
        b.push('}');
        channel_op("typing", unsafe { typing(b.as_ptr(), b.len() as i32) })
    }

    /// Calls `api`, an `[[apis]]` entry of bot.toml, through the host, which
    /// adds the entry's headers (the bot never sees them) and an
    /// Idempotency-Key. The answer is journaled before `fetch` returns: when
    /// the event is handled again, the same call gets the same answer
    /// (`Response::replayed`) without calling the API again.
    ///
    /// Errors: `Error::FetchFailed` when the call got no response (the event
    /// goes on); `Error::Host` with NOT_FOUND (bot.toml names no such API),
    /// BAD_PAYLOAD (a path that is not under the API's url, a method or
    /// header the host refuses), TOO_LARGE (past `bot.max_fetches` calls in
    /// one event, or a request over 1 MiB), UNSUPPORTED (a host without
    /// fetch, or outside an event), HOST_ERROR (the answer could not be
    /// journaled: the event's attempt fails).
    ///
    /// A module that never calls `fetch` does not import it, so it loads on
    /// a host without it.
    ///
    /// In a flow, a step's calls are kept with the flow (the chat's state
    /// key "botrun.flow.calls", committed with each message): when a later
    /// message replays the step, its calls are answered from there (marked
    /// `replayed`, or the kept `Error::FetchFailed`), and not made again,
    /// however many messages the flow takes. A call whose API, method or
    /// path differs from the kept one at its place (the module changed) is
    /// made anew. An answer too large for the chat's state is not kept
    /// (logged): the replayed step calls again under that message's
    /// Idempotency-Key. The kept calls' format is SPEC.md section 7's,
    /// shared by every SDK.
    pub fn fetch(&self, api: &str, req: &Request) -> Result<Response, Error> {
        let mut calls = self.calls.borrow_mut();
        let fc = match calls.as_mut() {
            Some(fc) => fc,
            None => return self.fetch_host(api, req),
        };
        let method = if req.method.is_empty() { "GET" } else { req.method };
        let id = format!("{} {} {}", api, method, req.path).into_bytes();
        if self.replaying {
            if let Some(kept) = fc.take(self, api, &id) {
                return kept;
            }
        }
        let res = self.fetch_host(api, req);
        if !self.replaying {
            fc.keep(&id, &res);
        }
        res
    }

    /// Makes the call through the host.
    fn fetch_host(&self, api: &str, req: &Request) -> Result<Response, Error> {
        let b = json::fetch_request(api, req);
        let n = unsafe { fetch(b.as_ptr(), b.len() as i32) };
        if Code::from_raw(n) == Code::FetchFailed {
            // The host cuts the message to 160 bytes: the FetchError's JSON
            // is at most 1 KiB.
            let mut buf = vec![0u8; 4096];
            let got = unsafe { result_read(buf.as_mut_ptr(), buf.len() as i32) };
            if got < 0 {
                return Err(host("result_read", got));
            }
            buf.truncate(got as usize);
            return match json::decode_unavailable(&buf) {
                Some(e) => Err(Error::FetchFailed { api: api.to_string(), reason: e.reason, message: e.message }),
                None => Err(Error::BadResult("fetch")),
            };
        }
        let out = result("fetch", n)?;
        json::decode_fetch_response(&out).ok_or(Error::BadResult("fetch"))
    }

    /// Writes a line to the host log (LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR).
    pub fn log(&self, level: i32, msg: &str) {
        log(level, msg)
    }

    /// Starts a flow in this chat.
    pub fn start(&mut self, flows: &Flows, name: &str) -> Result<(), Error> {
        run_flow(self, flows, name, Vec::new())
    }

    /// The name of the chat's flow in progress: Ok(None) when there is none,
    /// or when its state does not parse (`continue_flow` forgets it). An
    /// error reading the state is an `Error::Host`, never "no flow".
    pub fn in_flow(&self) -> Result<Option<String>, Error> {
        let state = match self.state_get(FLOW_KEY)? {
            Some(s) => s,
            None => return Ok(None),
        };
        Ok(decode_flow(&state).map(|f| String::from_utf8_lossy(f[0]).into_owned()))
    }

    /// Feeds this message to the chat's flow in progress; Ok(false) when there
    /// is none. A state that does not parse, or names a flow not in `flows`,
    /// is deleted (logged) and Ok(false) returned: handle the message as a
    /// normal message.
    pub fn continue_flow(&mut self, flows: &Flows) -> Result<bool, Error> {
        let state = match self.state_get(FLOW_KEY)? {
            Some(s) => s,
            None => return Ok(false),
        };
        let mut fields = match decode_flow(&state) {
            Some(f) => f.into_iter().map(|p| String::from_utf8_lossy(p).into_owned()),
            None => {
                self.log(LOG_WARN, "botrun flow: forgetting the chat's flow: its state is not a sequence of netstrings (SPEC.md section 7); the message is handled as a normal message");
                self.state_delete(FLOW_KEY)?;
                return Ok(false);
            }
        };
        let name = fields.next().unwrap_or_default();
        let mut answers: Vec<String> = fields.collect();
        answers.push(self.event.text.clone());
        if !flows.0.contains_key(name.as_str()) {
            self.log(LOG_WARN, &format!("botrun flow: forgetting the chat's flow {:?}: this module has no flow of that name; the message is handled as a normal message", name));
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

/// Writes a line to the host log (LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR)
/// without a `Context`: from a send hook.
pub fn log(level: i32, msg: &str) {
    unsafe { host_log(level, msg.as_ptr(), msg.len() as i32) }
}

/// A flow asks questions and takes the chat's next messages as the answers;
/// it is re-run from the start for each message with the answers so far.
/// While it replays the steps it already took (up to the `ask` that returns
/// this message's answer) its sends are not made: they return a SendResult
/// with status `REPLAYED`, so a reply between two questions goes out once
/// (`edit` and `typing` return Ok(()) without a call, a broadcast is marked
/// `replayed`).
/// Its `fetch` calls are answered from the answers kept with the flow (see
/// `Context::fetch`). The state format is abi/SPEC.md section 7, the same in
/// every SDK.
pub struct Flow<'a> {
    pub ctx: &'a mut Context,
    answers: Vec<String>,
    asked: usize,
}

/// The text of `Error::Waiting`.
pub const WAITING: &str = "botrun flow: waiting for an answer";

/// The status of a send a flow makes while it replays a step already taken.
pub const REPLAYED: &str = "replayed";

impl<'a> Flow<'a> {
    /// The answer to the question; the first time the flow reaches it, sends
    /// it and returns Err(Error::Waiting).
    pub fn ask(&mut self, question: &str) -> Result<String, Error> {
        self.asked += 1;
        if self.asked <= self.answers.len() {
            if self.asked == self.answers.len() {
                self.ctx.replaying = false; // this message's answer: what follows is new
                if let Some(fc) = self.ctx.calls.borrow_mut().as_mut() {
                    if fc.next < fc.ends.len() {
                        fc.truncate(fc.next); // kept calls the replayed steps no longer made
                        fc.dirty = true;
                    }
                }
            }
            return Ok(self.answers[self.asked - 1].clone());
        }
        self.ctx.reply(question)?;
        Err(Error::Waiting)
    }
}

/// The flows of a bot by name.
pub struct Flows(pub HashMap<&'static str, FlowFn>);

/// A flow function: it returns `Error::Waiting` (from `ask`) to wait.
pub type FlowFn = fn(&mut Flow) -> Result<(), Error>;

const FLOW_KEY: &str = "botrun.flow";

fn put_netstring(b: &mut Vec<u8>, s: &[u8]) {
    b.extend_from_slice(s.len().to_string().as_bytes());
    b.push(b':');
    b.extend_from_slice(s);
    b.push(b',');
}

/// Reads the netstring at `b[*at..]` (SPEC.md section 7: no leading zero,
/// nothing cut short): its bytes, and `*at` moves past it.
fn netstring<'b>(b: &'b [u8], at: &mut usize) -> Option<&'b [u8]> {
    let s = &b[*at..];
    let (mut n, mut i) = (0usize, 0usize);
    while i < s.len() && s[i].is_ascii_digit() {
        if i > 0 && n == 0 {
            return None; // a leading zero
        }
        n = n.checked_mul(10)?.checked_add((s[i] - b'0') as usize)?;
        if n > s.len() {
            return None;
        }
        i += 1;
    }
    if i == 0 || i + 1 + n >= s.len() || s[i] != b':' || s[i + 1 + n] != b',' {
        return None;
    }
    *at += i + 2 + n;
    Some(&s[i + 1..i + 1 + n])
}

/// The fields of a flow state (the name, then the answers), or None when the
/// value is not a non-empty sequence of netstrings.
fn decode_flow(b: &[u8]) -> Option<Vec<&[u8]>> {
    let mut fields = Vec::new();
    let mut at = 0;
    while at < b.len() {
        fields.push(netstring(b, &mut at)?);
    }
    if fields.is_empty() {
        None
    } else {
        Some(fields)
    }
}

const FLOW_CALLS_KEY: &str = "botrun.flow.calls";

/// A number of the kept calls: 1 to 9 digits, no leading zero.
fn decimal(f: &[u8]) -> Option<usize> {
    if f.is_empty() || f.len() > 9 || (f[0] == b'0' && f.len() > 1) || !f.iter().all(|c| c.is_ascii_digit()) {
        return None;
    }
    Some(f.iter().fold(0, |n, c| n * 10 + (c - b'0') as usize))
}

/// The answer of a kept call, read in place.
enum KeptAnswer<'b> {
    /// "R": the status, the headers (sorted by name) and the body.
    Response(usize, Vec<(&'b [u8], &'b [u8])>, &'b [u8]),
    /// "E": the reason and the message of a call that got no response.
    Failed(&'b [u8], &'b [u8]),
}

/// Reads the kept call at `b[*at..]`: its id and answer, and `*at` moves past
/// it; None when the bytes there are not a call the SDKs write (a field
/// missing, a kind other than R or E, a number that is not decimal, the
/// headers not sorted by name or a name twice). Each header read consumes
/// bytes, so no number in the value makes it run longer than the value.
fn read_call<'b>(b: &'b [u8], at: &mut usize) -> Option<(&'b [u8], KeptAnswer<'b>)> {
    let id = netstring(b, at)?;
    match netstring(b, at)? {
        b"E" => {
            let reason = netstring(b, at)?;
            Some((id, KeptAnswer::Failed(reason, netstring(b, at)?)))
        }
        b"R" => {
            let status = decimal(netstring(b, at)?)?;
            let n = decimal(netstring(b, at)?)?;
            let mut headers: Vec<(&[u8], &[u8])> = Vec::new();
            for _ in 0..n {
                let name = netstring(b, at)?;
                if let Some((prev, _)) = headers.last() {
                    if *prev >= name {
                        return None; // not sorted, or a name twice
                    }
                }
                headers.push((name, netstring(b, at)?));
            }
            Some((id, KeptAnswer::Response(status, headers, netstring(b, at)?)))
        }
        _ => None,
    }
}

/// The kept calls of the flow running now (SPEC.md section 7): `enc` holds
/// them as the state does, `ends[i]` is where call i ends in it.
#[derive(Default)]
struct FlowCalls {
    loaded: bool,
    /// The kept calls changed in this run.
    dirty: bool,
    enc: Vec<u8>,
    ends: Vec<usize>,
    /// The kept call a replayed step's next call reads.
    next: usize,
}

impl FlowCalls {
    /// Keeps the first `n` calls only.
    fn truncate(&mut self, n: usize) {
        self.ends.truncate(n);
        self.enc.truncate(if n > 0 { self.ends[n - 1] } else { 0 });
    }

    /// Reads the kept calls once, when a replayed step first calls `fetch`.
    /// A value it cannot read, or that does not parse, is as none (the calls
    /// are made again): nothing of it is kept, not even a prefix.
    fn load(&mut self, ctx: &Context) {
        if self.loaded {
            return;
        }
        self.loaded = true;
        let b = match ctx.state_get(FLOW_CALLS_KEY) {
            Ok(Some(b)) => b,
            _ => return,
        };
        let mut ends = Vec::new();
        let mut at = 0;
        while at < b.len() {
            if read_call(&b, &mut at).is_none() {
                return;
            }
            ends.push(at);
        }
        self.enc = b;
        self.ends = ends;
    }

    /// Answers a replayed step's call (`id`) from the kept call at its place,
    /// if that one has the same id, as the host answered the message that
    /// took the step; None when there is none: the call is made through the
    /// host.
    fn take(&mut self, ctx: &Context, api: &str, id: &[u8]) -> Option<Result<Response, Error>> {
        self.load(ctx);
        if self.next >= self.ends.len() {
            return None;
        }
        let mut at = if self.next > 0 { self.ends[self.next - 1] } else { 0 };
        let (kept, answer) = read_call(&self.enc[..self.ends[self.next]], &mut at)?;
        if kept != id {
            return None;
        }
        self.next += 1;
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        Some(match answer {
            KeptAnswer::Failed(reason, message) => Err(Error::FetchFailed { api: api.to_string(), reason: text(reason), message: text(message) }),
            KeptAnswer::Response(status, headers, body) => Ok(Response {
                status: status as i64,
                headers: headers.into_iter().map(|(k, v)| (text(k), text(v))).collect(),
                body: body.to_vec(),
                replayed: true,
            }),
        })
    }

    /// Appends the answer of a call of the step this message takes, after
    /// dropping what the replayed steps did not read (they no longer make
    /// it). A call the host refused (another error) got no answer and is not
    /// kept.
    fn keep(&mut self, id: &[u8], res: &Result<Response, Error>) {
        let mut b = Vec::new();
        put_netstring(&mut b, id);
        match res {
            Ok(r) => {
                put_netstring(&mut b, b"R");
                put_netstring(&mut b, r.status.to_string().as_bytes());
                put_netstring(&mut b, r.headers.len().to_string().as_bytes());
                let mut names: Vec<&String> = r.headers.keys().collect();
                names.sort(); // the same answer, the same bytes
                for name in names {
                    put_netstring(&mut b, name.as_bytes());
                    put_netstring(&mut b, r.headers[name].as_bytes());
                }
                put_netstring(&mut b, &r.body);
            }
            Err(Error::FetchFailed { reason, message, .. }) => {
                put_netstring(&mut b, b"E");
                put_netstring(&mut b, reason.as_bytes());
                put_netstring(&mut b, message.as_bytes());
            }
            Err(_) => return,
        }
        self.truncate(self.next);
        self.enc.extend_from_slice(&b);
        self.ends.push(self.enc.len());
        self.next = self.ends.len();
        self.dirty = true;
    }

    /// Writes the kept calls when this run changed them; an answer over the
    /// chat's state limits is not kept (logged).
    fn save(&self, ctx: &Context) -> Result<(), Error> {
        if !self.dirty {
            return Ok(());
        }
        match ctx.state_set(FLOW_CALLS_KEY, &self.enc) {
            Err(Error::Host { code: Code::TooLarge, .. }) => {
                ctx.log(LOG_WARN, "botrun flow: the answers of the flow's API calls are too large for the chat's state (bot.max_chat_state): a later message of the flow calls its APIs again");
                ctx.state_delete(FLOW_CALLS_KEY)
            }
            r => r,
        }
    }
}

fn run_flow(ctx: &mut Context, flows: &Flows, name: &str, answers: Vec<String>) -> Result<(), Error> {
    let f = *flows.0.get(name).ok_or_else(|| Error::Handler(format!("no flow {}", name)))?;
    ctx.replaying = !answers.is_empty();
    // A new flow starts with no kept calls; a continued one reads them when a
    // replayed step first calls fetch.
    let outer = ctx.calls.replace(Some(FlowCalls { loaded: answers.is_empty(), ..Default::default() }));
    let mut flow = Flow { ctx, answers, asked: 0 };
    let res = f(&mut flow);
    let calls = flow.ctx.calls.replace(outer).unwrap_or_default();
    if flow.ctx.replaying {
        flow.ctx.replaying = false;
        flow.ctx.log(LOG_WARN, &format!("botrun flow: flow {:?} ended before the question this message answers (was the module changed?); sends of the steps it replayed were not repeated", name));
    }
    match res {
        Err(Error::Waiting) => {
            calls.save(flow.ctx)?;
            let mut b = Vec::new();
            put_netstring(&mut b, name.as_bytes());
            for a in &flow.answers {
                put_netstring(&mut b, a.as_bytes());
            }
            flow.ctx.state_set(FLOW_KEY, &b)
        }
        Err(e) => Err(e),
        Ok(()) => {
            // Finished: its kept calls go with it, if it had any.
            if !calls.ends.is_empty() || calls.dirty {
                flow.ctx.state_delete(FLOW_CALLS_KEY)?;
            }
            flow.ctx.state_delete(FLOW_KEY)
        }
    }
}

/// The `len` bytes of the event (or a send hook's SendHook); None when
/// `event_read` does not give them (logged).
fn read_payload(len: i32) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; len as usize];
    let got = unsafe { event_read(buf.as_mut_ptr(), len) };
    if got != len {
        log(LOG_ERROR, &format!("botrun sdk: event_read returned {}, want {}", got, len));
        return None;
    }
    Some(buf)
}

/// Runs one event: called by the export the handler macro generates.
pub fn run(len: i32, handler: fn(&mut Context) -> Result<(), Error>) -> i32 {
    let buf = match read_payload(len) {
        Some(b) => b,
        None => return 1,
    };
    let event = match json::decode_event(&buf) {
        Some(e) => e,
        None => {
            log(LOG_ERROR, "botrun sdk: bad event");
            return 1;
        }
    };
    let mut ctx = Context { event, replaying: false, calls: RefCell::new(None) };
    match handler(&mut ctx) {
        Ok(()) => 0,
        Err(e) => {
            ctx.log(LOG_ERROR, &e.to_string());
            1
        }
    }
}

/// Exports the ABI v1 entry points for a handler
/// `fn(&mut botrun::Context) -> Result<(), botrun::Error>`.
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

/// One send as a send hook sees it (abi/SPEC.md section 4.7).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Outgoing {
    /// "before_send" or "after_send".
    pub hook: String,
    /// The id of the event whose handler made the send.
    pub event: String,
    pub provider: String,
    pub chat: String,
    /// The send's idempotency key.
    pub key: String,
    pub text: String,
    pub media: Option<Media>,
    pub buttons: Vec<Button>,
    pub list: Option<List>,
    /// An enqueued send's hold time in Unix milliseconds (0: now).
    pub at: i64,
    /// The channel's message id of the send (`after_send` only; "" when the
    /// channel gave none).
    pub r#ref: String,
    /// The hook's clock in Unix milliseconds (`now()` answers it).
    pub time: i64,
}

/// What a before-send hook makes of the send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Send it, as the hook left the `Outgoing`.
    Send,
    /// Cancel it: it is not journaled, and the handler's send answers
    /// "cancelled".
    Cancel,
}

/// The send of a hook's payload; None when it cannot be had (logged).
fn read_hook(len: i32) -> Option<Outgoing> {
    let out = json::decode_outgoing(&read_payload(len)?);
    if out.is_none() {
        log(LOG_ERROR, "botrun sdk: bad send hook");
    }
    out
}

/// Runs `botrun_before_send`: called by the export `before_send!`
/// generates. The hook may change the Outgoing's `chat`, `text`, `media`,
/// `buttons` and `list` to rewrite the send (the SDK hands the host the
/// whole send, `rewrite`, only when they changed; a rewrite the host refuses
/// fails the hook with `Error::Host` `botrun.rewrite: BAD_PAYLOAD`), return
/// `Verdict::Cancel` to cancel it, or an error to fail it (the send is dead).
pub fn run_before_send(len: i32, hook: fn(&mut Outgoing) -> Result<Verdict, Error>) -> i32 {
    let orig = match read_hook(len) {
        Some(o) => o,
        None => return 1,
    };
    let mut out = orig.clone();
    let verdict = hook(&mut out);
    let changed = out.chat != orig.chat || out.text != orig.text || out.media != orig.media || out.buttons != orig.buttons || out.list != orig.list;
    let res = match verdict {
        Ok(Verdict::Send) if changed => {
            let opts = SendOptions { media: out.media.as_ref(), buttons: &out.buttons, list: out.list.as_ref(), ..Default::default() };
            let b = request(&out.chat, &out.text, &opts);
            let n = unsafe { rewrite(b.as_ptr(), b.len() as i32) };
            if n < 0 {
                Err(host("rewrite", n))
            } else {
                Ok(Verdict::Send)
            }
        }
        v => v,
    };
    match res {
        Ok(Verdict::Send) => 0,
        Ok(Verdict::Cancel) => 2,
        Err(e) => {
            log(LOG_ERROR, &e.to_string());
            1
        }
    }
}

/// Runs `botrun_after_send`: called by the export `after_send!` generates.
/// The hook's error is logged, not retried.
pub fn run_after_send(len: i32, hook: fn(&Outgoing) -> Result<(), Error>) -> i32 {
    let out = match read_hook(len) {
        Some(o) => o,
        None => return 1,
    };
    match hook(&out) {
        Ok(()) => 0,
        Err(e) => {
            log(LOG_ERROR, &e.to_string());
            1
        }
    }
}

/// Exports `botrun_before_send` for a hook
/// `fn(&mut botrun::Outgoing) -> Result<botrun::Verdict, botrun::Error>`
/// (see `run_before_send`): it runs once for each send, post, enqueue and
/// broadcast chat of a handler, before it is journaled. A hook neither sends
/// nor reads or writes state (UNSUPPORTED); `log` and `now` work.
#[macro_export]
macro_rules! before_send {
    ($hook:path) => {
        #[no_mangle]
        pub extern "C" fn botrun_before_send(len: i32) -> i32 {
            $crate::run_before_send(len, $hook)
        }
    };
}

/// Exports `botrun_after_send` for a hook
/// `fn(&botrun::Outgoing) -> Result<(), botrun::Error>`: it runs at least
/// once for each send of a handler after it was delivered, with `r#ref` the
/// channel's message id.
#[macro_export]
macro_rules! after_send {
    ($hook:path) => {
        #[no_mangle]
        pub extern "C" fn botrun_after_send(len: i32) -> i32 {
            $crate::run_after_send(len, $hook)
        }
    };
}
