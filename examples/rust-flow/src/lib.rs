//! The Rust flow bot: "/signup" asks two questions, greets the user between
//! them and thanks them at the end; the conversation survives a restart, and
//! the greeting goes out once. Other messages are echoed.

use std::collections::HashMap;

fn signup(f: &mut botrun::Flow) -> Result<(), botrun::Error> {
    let name = f.ask("What is your name?")?;
    f.ctx.reply(&format!("Nice to meet you, {}!", name))?;
    let city = f.ask(&format!("Which city do you live in, {}?", name))?;
    f.ctx.reply(&format!("Thanks {} from {}!", name, city))?;
    Ok(())
}

fn flows() -> botrun::Flows {
    let mut m: HashMap<&'static str, botrun::FlowFn> = HashMap::new();
    m.insert("signup", signup);
    botrun::Flows(m)
}

fn handle(ctx: &mut botrun::Context) -> Result<(), botrun::Error> {
    let flows = flows();
    if ctx.event.text == "/signup" {
        return ctx.start(&flows, "signup");
    }
    if ctx.continue_flow(&flows)? {
        return Ok(());
    }
    let reply = format!("echo: {}", ctx.event.text);
    ctx.reply(&reply)?;
    Ok(())
}

botrun::export_handler!(handle);
