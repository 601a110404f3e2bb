//! The Rust echo bot: replies "echo: <text>" to every text message.

fn handle(ctx: &mut botrun::Context) -> Result<(), String> {
    if ctx.event.text.is_empty() {
        // Media without a caption: send it back, named.
        if let Some(m) = ctx.event.media.first().cloned() {
            let reply = format!("echo: [{}]", m.r#type);
            let back = botrun::Media { r#type: m.r#type, r#ref: m.r#ref, ..Default::default() };
            let chat = ctx.event.chat.clone();
            ctx.send(&chat, &reply, botrun::SendOptions { media: Some(&back), ..Default::default() })?;
        }
        return Ok(());
    }
    let reply = format!("echo: {}", ctx.event.text);
    ctx.reply(&reply)?;
    Ok(())
}

botrun::export_handler!(handle);
