//! The Rust echo bot: replies "echo: <text>" to every text message.

fn handle(ctx: &mut botrun::Context) -> Result<(), String> {
    if ctx.event.text.is_empty() {
        // Media without a caption: name what came.
        if let Some(m) = ctx.event.media.first() {
            let reply = format!("echo: [{}]", m.r#type);
            ctx.reply(&reply)?;
        }
        return Ok(());
    }
    let reply = format!("echo: {}", ctx.event.text);
    ctx.reply(&reply)?;
    Ok(())
}

botrun::export_handler!(handle);
