// The AssemblyScript echo bot: replies "echo: <text>" to every text message.
import { Context, setHandler } from "../../../guest-sdk/assemblyscript/assembly/index";
export { botrun_abi_v1, botrun_on_event } from "../../../guest-sdk/assemblyscript/assembly/index";

setHandler((ctx: Context): string | null => {
  if (ctx.event.text.length == 0) {
    // Media without a caption: name what came.
    return ctx.event.media.length > 0 ? ctx.reply("echo: [" + ctx.event.media[0].type + "]") : null;
  }
  return ctx.reply("echo: " + ctx.event.text);
});
