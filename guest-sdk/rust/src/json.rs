//! A small JSON codec for exactly the ABI's payloads (the SDK has no
//! dependencies). Unknown fields are skipped.

use crate::{BroadcastResult, Button, Event, Interaction, List, ListRow, ListSection, Media, Outgoing, Request, Response, SendResult, KIND_MESSAGE};

pub fn put_string(b: &mut String, s: &str) {
    b.push('"');
    for c in s.chars() {
        match c {
            '"' => b.push_str("\\\""),
            '\\' => b.push_str("\\\\"),
            '\n' => b.push_str("\\n"),
            '\r' => b.push_str("\\r"),
            '\t' => b.push_str("\\t"),
            c if (c as u32) < 0x20 => b.push_str(&format!("\\u{:04x}", c as u32)),
            c => b.push(c),
        }
    }
    b.push('"');
}

struct Reader<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Reader<'a> {
    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn expect(&mut self, c: u8) -> Option<()> {
        self.ws();
        if self.i < self.b.len() && self.b[self.i] == c {
            self.i += 1;
            Some(())
        } else {
            None
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    fn hex4(&mut self) -> Option<u32> {
        let s = std::str::from_utf8(self.b.get(self.i..self.i + 4)?).ok()?;
        self.i += 4;
        u32::from_str_radix(s, 16).ok()
    }

    fn string(&mut self) -> Option<String> {
        self.expect(b'"')?;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let c = *self.b.get(self.i)?;
            self.i += 1;
            match c {
                b'"' => return Some(String::from_utf8_lossy(&out).into_owned()),
                b'\\' => {
                    let e = *self.b.get(self.i)?;
                    self.i += 1;
                    match e {
                        b'n' => out.push(b'\n'),
                        b't' => out.push(b'\t'),
                        b'r' => out.push(b'\r'),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'u' => {
                            let mut cp = self.hex4()?;
                            if (0xd800..0xdc00).contains(&cp) && self.b.get(self.i..self.i + 2) == Some(b"\\u") {
                                self.i += 2;
                                let lo = self.hex4()?;
                                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo.wrapping_sub(0xdc00) & 0x3ff);
                            }
                            let ch = char::from_u32(cp).unwrap_or('\u{fffd}');
                            let mut tmp = [0u8; 4];
                            out.extend_from_slice(ch.encode_utf8(&mut tmp).as_bytes());
                        }
                        other => out.push(other),
                    }
                }
                c if c < 0x20 => return None,
                c => out.push(c),
            }
        }
    }

    fn number(&mut self) -> Option<i64> {
        self.ws();
        let start = self.i;
        while self.i < self.b.len() && matches!(self.b[self.i], b'-' | b'0'..=b'9') {
            self.i += 1;
        }
        std::str::from_utf8(&self.b[start..self.i]).ok()?.parse().ok()
    }

    fn skip(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            b'{' => self.object(|r, _| r.skip()),
            b'[' => self.array(|r| r.skip()),
            _ => {
                while self.i < self.b.len() && !matches!(self.b[self.i], b',' | b'}' | b']' | b' ' | b'\n' | b'\t' | b'\r') {
                    self.i += 1;
                }
                Some(())
            }
        }
    }

    /// A JSON true or false.
    fn boolean(&mut self) -> Option<bool> {
        self.ws();
        for (word, v) in [(&b"true"[..], true), (&b"false"[..], false)] {
            if self.b.get(self.i..self.i + word.len()) == Some(word) {
                self.i += word.len();
                return Some(v);
            }
        }
        None
    }

    /// Consumes a null, and reports whether there was one.
    fn null(&mut self) -> bool {
        self.ws();
        if self.b.get(self.i..self.i + 4) == Some(b"null") {
            self.i += 4;
            return true;
        }
        false
    }

    /// An array (or null, as empty): `item` consumes each value.
    fn array(&mut self, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        if self.null() {
            return Some(());
        }
        self.expect(b'[')?;
        if self.peek()? == b']' {
            self.i += 1;
            return Some(());
        }
        loop {
            item(self)?;
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn media_object(&mut self) -> Option<Media> {
        let mut m = Media::default();
        self.object(|r, k| {
            match k {
                "type" => m.r#type = r.string()?,
                "ref" => m.r#ref = r.string()?,
                "url" => m.url = r.string()?,
                "mime" => m.mime = r.string()?,
                "caption" => m.caption = r.string()?,
                _ => r.skip()?,
            }
            Some(())
        })?;
        Some(m)
    }

    fn media(&mut self) -> Option<Vec<Media>> {
        let mut out = Vec::new();
        self.array(|r| {
            out.push(r.media_object()?);
            Some(())
        })?;
        Some(out)
    }

    fn buttons(&mut self) -> Option<Vec<Button>> {
        let mut out = Vec::new();
        self.array(|r| {
            let mut b = Button::default();
            r.object(|r, k| {
                match k {
                    "id" => b.id = r.string()?,
                    "title" => b.title = r.string()?,
                    "url" => b.url = r.string()?,
                    _ => r.skip()?,
                }
                Some(())
            })?;
            out.push(b);
            Some(())
        })?;
        Some(out)
    }

    fn list(&mut self) -> Option<List> {
        let mut l = List::default();
        self.object(|r, k| {
            match k {
                "button" => l.button = r.string()?,
                "sections" => r.array(|r| {
                    let mut sec = ListSection::default();
                    r.object(|r, k| {
                        match k {
                            "title" => sec.title = r.string()?,
                            "rows" => r.array(|r| {
                                let mut row = ListRow::default();
                                r.object(|r, k| {
                                    match k {
                                        "id" => row.id = r.string()?,
                                        "title" => row.title = r.string()?,
                                        "description" => row.description = r.string()?,
                                        _ => r.skip()?,
                                    }
                                    Some(())
                                })?;
                                sec.rows.push(row);
                                Some(())
                            })?,
                            _ => r.skip()?,
                        }
                        Some(())
                    })?;
                    l.sections.push(sec);
                    Some(())
                })?,
                _ => r.skip()?,
            }
            Some(())
        })?;
        Some(l)
    }

    /// An interaction object, or None for null (the outer Option is the
    /// parse).
    fn interaction(&mut self) -> Option<Option<Interaction>> {
        if self.null() {
            return Some(None);
        }
        let mut it = Interaction::default();
        self.object(|r, k| {
            match k {
                "id" => it.id = r.string()?,
                "title" => it.title = r.string()?,
                "message" => it.message = r.string()?,
                _ => r.skip()?,
            }
            Some(())
        })?;
        Some(Some(it))
    }

    fn object(&mut self, mut field: impl FnMut(&mut Self, &str) -> Option<()>) -> Option<()> {
        self.expect(b'{')?;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            let key = self.string()?;
            self.expect(b':')?;
            field(self, &key)?;
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }
}

pub fn decode_event(b: &[u8]) -> Option<Event> {
    let mut e = Event::default();
    let mut r = Reader { b, i: 0 };
    r.object(|r, k| {
        match k {
            "id" => e.id = r.string()?,
            "provider" => e.provider = r.string()?,
            "chat" => e.chat = r.string()?,
            "from" => e.from = r.string()?,
            "text" => e.text = r.string()?,
            "attempt" => e.attempt = r.number()?,
            "received_at" => e.received_at = r.number()?,
            "media" => e.media = r.media()?,
            "kind" => e.kind = r.string()?,
            "interaction" => e.interaction = r.interaction()?,
            _ => r.skip()?,
        }
        Some(())
    })?;
    if e.kind.is_empty() {
        // A host before interactions sends no kind: every event is a message.
        e.kind = KIND_MESSAGE.to_string();
    }
    Some(e)
}

pub fn decode_result(b: &[u8]) -> Option<SendResult> {
    let mut s = SendResult::default();
    let mut r = Reader { b, i: 0 };
    r.object(|r, k| {
        match k {
            "status" => s.status = r.string()?,
            "key" => s.key = r.string()?,
            "ref" => s.r#ref = r.string()?,
            "error" => s.error = r.string()?,
            _ => r.skip()?,
        }
        Some(())
    })?;
    Some(s)
}

pub fn decode_unavailable(b: &[u8]) -> Option<crate::MediaUnavailableError> {
    let mut e = crate::MediaUnavailableError::default();
    let mut r = Reader { b, i: 0 };
    r.object(|r, k| {
        match k {
            "reason" => e.reason = r.string()?,
            "message" => e.message = r.string()?,
            _ => r.skip()?,
        }
        Some(())
    })?;
    Some(e)
}

/// The message of CHANNEL_FAILED's result, `{"error":"…"}`.
pub fn decode_channel_error(b: &[u8]) -> Option<String> {
    let mut msg = String::new();
    let mut r = Reader { b, i: 0 };
    r.object(|r, k| {
        match k {
            "error" => msg = r.string()?,
            _ => r.skip()?,
        }
        Some(())
    })?;
    if r.peek().is_some() {
        return None;
    }
    Some(msg)
}

pub fn decode_broadcast(b: &[u8]) -> Option<BroadcastResult> {
    let mut o = BroadcastResult::default();
    let mut r = Reader { b, i: 0 };
    r.object(|r, k| {
        match k {
            "journaled" => o.journaled = r.number()?,
            "existing" => o.existing = r.number()?,
            _ => r.skip()?,
        }
        Some(())
    })?;
    if r.peek().is_some() {
        return None;
    }
    Some(o)
}

/// A send hook's SendHook; None when it does not parse.
pub fn decode_outgoing(b: &[u8]) -> Option<Outgoing> {
    let mut o = Outgoing::default();
    let mut r = Reader { b, i: 0 };
    r.object(|r, k| {
        match k {
            "hook" => o.hook = r.string()?,
            "event" => o.event = r.string()?,
            "provider" => o.provider = r.string()?,
            "chat" => o.chat = r.string()?,
            "key" => o.key = r.string()?,
            "text" => o.text = r.string()?,
            "ref" => o.r#ref = r.string()?,
            "at" => o.at = r.number()?,
            "time" => o.time = r.number()?,
            "media" => o.media = if r.null() { None } else { Some(r.media_object()?) },
            "buttons" => o.buttons = r.buttons()?,
            "list" => o.list = if r.null() { None } else { Some(r.list()?) },
            _ => r.skip()?,
        }
        Some(())
    })?;
    if r.peek().is_some() {
        return None;
    }
    Some(o)
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// `b` in standard base64, padded.
fn base64(b: &[u8]) -> String {
    let mut out = String::with_capacity((b.len() + 2) / 3 * 4);
    for c in b.chunks(3) {
        let v = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        out.push(B64[(v >> 18) as usize] as char);
        out.push(B64[(v >> 12 & 63) as usize] as char);
        out.push(if c.len() > 1 { B64[(v >> 6 & 63) as usize] as char } else { '=' });
        out.push(if c.len() > 2 { B64[(v & 63) as usize] as char } else { '=' });
    }
    out
}

/// Decodes standard padded base64; None when `s` is not base64.
fn unbase64(s: &str) -> Option<Vec<u8>> {
    let s = s.as_bytes();
    if s.len() % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    for (i, q) in s.chunks(4).enumerate() {
        let last = (i + 1) * 4 == s.len();
        let pad = if last { q.iter().rev().take_while(|&&c| c == b'=').count() } else { 0 };
        if pad > 2 {
            return None;
        }
        let mut v = 0u32;
        for &c in &q[..4 - pad] {
            v = v << 6 | B64.iter().position(|&d| d == c)? as u32;
        }
        v <<= 6 * pad as u32;
        out.push((v >> 16) as u8);
        if pad < 2 {
            out.push((v >> 8) as u8);
        }
        if pad < 1 {
            out.push(v as u8);
        }
    }
    Some(out)
}

/// The FetchRequest of `req` to `api`: the headers sorted by name (the same
/// request, the same bytes), the body as text when it is UTF-8 and in base64
/// otherwise.
pub fn fetch_request(api: &str, req: &Request) -> String {
    let mut b = String::from("{\"api\":");
    put_string(&mut b, api);
    if !req.method.is_empty() {
        b.push_str(",\"method\":");
        put_string(&mut b, req.method);
    }
    b.push_str(",\"path\":");
    put_string(&mut b, req.path);
    if !req.headers.is_empty() {
        let mut hs: Vec<&(&str, &str)> = req.headers.iter().collect();
        hs.sort_by(|a, b| a.0.cmp(b.0)); // stable: of a name given twice the host keeps the last
        b.push_str(",\"headers\":{");
        for (i, (k, v)) in hs.into_iter().enumerate() {
            if i > 0 {
                b.push(',');
            }
            put_string(&mut b, k);
            b.push(':');
            put_string(&mut b, v);
        }
        b.push('}');
    }
    if !req.body.is_empty() {
        match std::str::from_utf8(req.body) {
            Ok(text) => {
                b.push_str(",\"body\":");
                put_string(&mut b, text);
            }
            Err(_) => {
                b.push_str(",\"body_base64\":\"");
                b.push_str(&base64(req.body));
                b.push('"');
            }
        }
    }
    if !req.key.is_empty() {
        b.push_str(",\"key\":");
        put_string(&mut b, req.key);
    }
    b.push('}');
    b
}

/// A FetchResponse; None when it does not parse.
pub fn decode_fetch_response(b: &[u8]) -> Option<Response> {
    let mut res = Response::default();
    let mut r = Reader { b, i: 0 };
    r.object(|r, k| {
        match k {
            "status" => res.status = r.number()?,
            "headers" if r.null() => {}
            "headers" => r.object(|r, name| {
                let v = r.string()?;
                res.headers.insert(name.to_string(), v);
                Some(())
            })?,
            "body" => res.body = r.string()?.into_bytes(),
            "body_base64" => res.body = unbase64(&r.string()?)?,
            "replayed" => res.replayed = r.boolean()?,
            _ => r.skip()?,
        }
        Some(())
    })?;
    if r.peek().is_some() {
        return None;
    }
    Some(res)
}
