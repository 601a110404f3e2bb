//! The buttons example in Rust, the same bot as examples/buttons: "menu"
//! posts "Pick one" with the reply buttons Yes and No; a press of one (an
//! event of kind interaction) answers "you chose <id>"; "remind <n> <text>"
//! answers "ok" and sends <text> to the same chat n seconds after the message
//! arrived (an enqueue with `at`); "edit" says that editing a sent message is
//! not available yet; anything else answers a usage line. Build it with make
//! examples (the Rust SDK's header shows the rustc commands).

use botrun::{Button, Context, Error, SendOptions, KIND_INTERACTION};

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
        // Editing a sent message is not in the ABI yet: say so rather than
        // pretend.
        ctx.reply("edit is not available yet")?;
        return Ok(());
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

botrun::export_handler!(handle);
