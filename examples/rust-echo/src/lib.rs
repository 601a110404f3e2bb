//! The Rust echo bot: replies "echo: <text>" to every text message.

fn handle(ctx: &mut botrun::Context) -> Result<(), String> {
    if ctx.event.text.is_empty() {
        return Ok(());
    }
    let reply = format!("echo: {}", ctx.event.text);
    ctx.reply(&reply)?;
    Ok(())
}

botrun::export_handler!(handle);
