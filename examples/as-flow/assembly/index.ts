// The AssemblyScript flow bot: "/signup" asks two questions, greets the user
// between them and thanks them at the end; the conversation survives a
// restart, and the greeting goes out once. Other messages are echoed.
import { Context, Flow, FlowContext, WAITING, setHandler } from "../../../guest-sdk/assemblyscript/assembly/index";
export { botrun_abi_v1, botrun_on_event } from "../../../guest-sdk/assemblyscript/assembly/index";

const signup = new Flow("signup", (f: FlowContext): string | null => {
  const name = f.ask("What is your name?");
  if (name == null) return WAITING;
  const hi = f.ctx.reply("Nice to meet you, " + name + "!").error();
  if (hi != null) return hi;
  const city = f.ask("Which city do you live in, " + name + "?");
  if (city == null) return WAITING;
  return f.ctx.reply("Thanks " + name + " from " + city + "!").error();
});

setHandler((ctx: Context): string | null => {
  if (ctx.event.text == "/signup") return ctx.start(signup).error();
  const c = ctx.continueFlow([signup]);
  if (!c.ok || c.inFlow) return c.error();
  return ctx.reply("echo: " + ctx.event.text).error();
});
