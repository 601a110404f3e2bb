//! The Rust echo bot: replies "echo: <text>" to every text message, and to a
//! photo without a caption "echo: [image, N bytes]" with the photo sent back.

fn handle(ctx: &mut botrun::Context) -> Result<(), botrun::Error> {
    if ctx.event.text.is_empty() {
        // Media without a caption: load it, say how big it is, send it back.
        if let Some(m) = ctx.event.media.first().cloned() {
            let label = match ctx.load_media(0) {
                Ok(bytes) => format!("{}, {} bytes", m.r#type, bytes.len()),
                Err(botrun::Error::MediaUnavailable(e)) => format!("{}, unavailable: {}", m.r#type, e.reason),
                Err(e) if e.code() == Some(botrun::Code::Unsupported) => m.r#type.clone(),
                Err(e) => return Err(e),
            };
            let reply = format!("echo: [{}]", label);
            let back = botrun::Media { r#type: m.r#type, r#ref: m.r#ref, ..Default::default() };
            let chat = ctx.event.chat.clone();
            // The ref is empty when the reference did not survive a restart.
            let media = if back.r#ref.is_empty() { None } else { Some(&back) };
            ctx.send(&chat, &reply, botrun::SendOptions { media, ..Default::default() })?;
        }
        return Ok(());
    }
    let reply = format!("echo: {}", ctx.event.text);
    ctx.reply(&reply)?;
    Ok(())
}

botrun::export_handler!(handle);
