// The AssemblyScript echo bot: replies "echo: <text>" to every text message.
import { Context, Media, setHandler } from "../../../guest-sdk/assemblyscript/assembly/index";
export { botrun_abi_v1, botrun_on_event } from "../../../guest-sdk/assemblyscript/assembly/index";

setHandler((ctx: Context): string | null => {
  if (ctx.event.text.length == 0) {
    // Media without a caption: send it back, named.
    if (ctx.event.media.length == 0) return null;
    const back = new Media();
    back.type = ctx.event.media[0].type;
    back.ref = ctx.event.media[0].ref;
    return ctx.send(ctx.event.chat, "echo: [" + back.type + "]", "", back);
  }
  return ctx.reply("echo: " + ctx.event.text);
});
