//! The buttons example in Rust, the same bot as examples/buttons: "menu"
//! posts "Pick one" with the reply buttons Yes and No; a press of one (an
//! event of kind interaction) answers "you chose <id>"; "remind <n> <text>"
//! answers "ok" and sends <text> to the same chat n seconds after the message
//! arrived (an enqueue with `at`); "edit" shows "typing…", sends "draft" and
//! edits it to "final" (where the channel cannot edit, it sends "final" as a
//! new message); anything else answers a usage line. Build it with make
//! examples (the Rust SDK's header shows the rustc commands).

use botrun::{Button, Code, Context, Error, SendOptions, KIND_INTERACTION, LOG_WARN};

/// A reminder's bound: 30 days.
const MAX_SECONDS: i64 = 30 * 24 * 3600;

const USAGE: &str = "usage: menu | remind <n> <text> | edit";

fn handle(ctx: &mut Context) -> Result<(), Error> {
    // A press first: its text is the pressed title ("Yes"), which a bot that
    // knows no interactions would read as a message.
    if ctx.event.kind == KIND_INTERACTION {
        if let Some(id) = ctx.event.interaction.as_ref().map(|i| i.id.clone()) {
            ctx.reply(&format!("you chose {}", id))?;
            return Ok(());
        }
    }
    let text = ctx.event.text.clone();
    let chat = ctx.event.chat.clone();
    if text == "menu" {
        let buttons = [Button::reply("yes", "Yes"), Button::reply("no", "No")];
        ctx.post(&chat, "Pick one", SendOptions { buttons: &buttons, ..Default::default() })?;
        return Ok(());
    }
    if text == "edit" {
        return draft(ctx, &chat);
    }
    if let Some(rest) = text.strip_prefix("remind ") {
        let mut f = rest.splitn(2, ' ');
        let n: i64 = f.next().and_then(|n| n.parse().ok()).unwrap_or(0);
        let what = f.next().unwrap_or("");
        if (1..=MAX_SECONDS).contains(&n) && !what.trim().is_empty() {
            // The event's clock: the same time on every replay, so a replay
            // finds the reminder journaled under the same key.
            let at = ctx.event.received_at + n * 1000;
            ctx.enqueue(&chat, what, SendOptions { at, ..Default::default() })?;
            ctx.reply("ok")?;
            return Ok(());
        }
    }
    ctx.reply(USAGE)?;
    Ok(())
}

/// Shows "typing…", sends "draft" and edits it to "final". The draft goes
/// through `send`, not `reply`: a posted send is made after the handler
/// returns, and the edit needs the ref the channel gave it. A retry of the
/// event finds the draft journaled (deduped, with its ref) and edits it
/// again, which changes nothing.
fn draft(ctx: &mut Context, chat: &str) -> Result<(), Error> {
    // The indicator is a courtesy: a channel without it (Twilio), or one that
    // refused it, does not stop the answer.
    match ctx.typing(chat) {
        Err(e) if e.code() != Some(Code::Unsupported) => ctx.log(LOG_WARN, &format!("typing: {}", e)),
        _ => {}
    }
    let r = ctx.send(chat, "draft", SendOptions::default())?;
    if !r.r#ref.is_empty() {
        match ctx.edit(chat, &r.r#ref, "final") {
            Ok(()) => return Ok(()),
            // e.g. Error::ChannelFailed: the channel refused.
            Err(e) if e.code() != Some(Code::Unsupported) => ctx.log(LOG_WARN, &format!("edit: {}", e)),
            Err(_) => {}
        }
    }
    // The channel cannot edit (WhatsApp, Twilio), refused, or gave no ref:
    // the final text as a new message.
    ctx.reply("final")?;
    Ok(())
}

botrun::export_handler!(handle);
