package httpkit

import "github.com/botrun/botrun/host/channel"

// Opened returns what a channel constructor returned as a Channel, with a
// nil interface (not a nil pointer) on error: Config.Open's usual body is
// "return httpkit.Opened(Open(*c, env))".
func Opened[P channel.Channel](p P, err error) (channel.Channel, error) {
	if err != nil {
		return nil, err
	}
	return p, nil
}
