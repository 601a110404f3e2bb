// The AssemblyScript echo bot: replies "echo: <text>" to every text message,
// and to a photo without a caption "echo: [image, N bytes]" with the photo
// sent back.
import { Code, Context, Media, MediaUnavailableError, setHandler } from "../../../guest-sdk/assemblyscript/assembly/index";
export { botrun_abi_v1, botrun_on_event } from "../../../guest-sdk/assemblyscript/assembly/index";

setHandler((ctx: Context): string | null => {
  if (ctx.event.text.length == 0) {
    // Media without a caption: load it, say how big it is, send it back.
    if (ctx.event.media.length == 0) return null;
    const back = new Media();
    back.type = ctx.event.media[0].type;
    back.ref = ctx.event.media[0].ref;
    let label = back.type;
    const loaded = ctx.loadMedia(0);
    if (loaded.bytes != null) {
      label += ", " + changetype<ArrayBuffer>(loaded.bytes).byteLength.toString() + " bytes";
    } else if (loaded.unavailable != null) {
      label += ", unavailable: " + changetype<MediaUnavailableError>(loaded.unavailable).reason;
    } else if (loaded.code != Code.Unsupported) {
      return loaded.error();
    }
    // The ref is empty when the reference did not survive a restart.
    return ctx.send(ctx.event.chat, "echo: [" + label + "]", "", back.ref.length > 0 ? back : null).error();
  }
  return ctx.reply("echo: " + ctx.event.text).error();
});
